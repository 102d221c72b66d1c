"""Data: clip size and frames, frame rate, aspect bucketing, latent caching, caption dropout."""
from __future__ import annotations

from modules.ui.views.base_tab import BaseTab


class DataTab(BaseTab):
    name = "data"

    def build(self) -> None:
        self.config_form()
        self.note("Concept folders are edited in the concepts tab; E2V datasets (videos plus element images) "
                  "in the E2V elements tab.")
