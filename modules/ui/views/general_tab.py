"""General: workspace, cache, devices, tensorboard (and any field no other tab places)."""
from __future__ import annotations

from modules.ui.views.base_tab import BaseTab


class GeneralTab(BaseTab):
    name = "general"

    def build(self) -> None:
        self.config_form()
        self.note("Logs, tensorboard files, samples and backups go to the workspace folder; "
                  "run `tensorboard --logdir <workspace>/tensorboard` to watch a run.")
