"""General: workspace, cache, devices, tensorboard (and any field no other tab places)."""
from __future__ import annotations

from modules.ui.views.base_tab import BaseTab


class GeneralTab(BaseTab):
    name = "general"

    def build(self) -> None:
        self.config_form()
        self.note("Each run writes its logs, tensorboard files, samples and backups to its own folder, "
                  "<workspace>/<run name>; run `tensorboard --logdir <workspace>` to compare the runs.")
