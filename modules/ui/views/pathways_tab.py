"""Pathways: which conditioning pathways train (train config `e2v`) and the VAE / CLIP processors
(frame conditioning, resolutions, preprocessing) of the E2V dataset JSON."""
from __future__ import annotations

from modules.ui.views.base_tab import BaseTab


class PathwaysTab(BaseTab):
    name = "pathways"

    def build(self) -> None:
        self.config_form()
        self.dataset_form()
        self.note("The processor settings belong to the E2V dataset JSON (saved with it from the E2V elements "
                  "tab); e2v_type, the posterior and the target layout belong to the training config.")
