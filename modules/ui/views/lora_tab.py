"""LoRA: rank, alpha, dropout, target modules and blocks, continuing from a LoRA file."""
from __future__ import annotations

from modules.ui.views.base_tab import BaseTab


class LoRATab(BaseTab):
    name = "LoRA"

    def build(self) -> None:
        self.config_form()
        self.note("Target modules are module-name suffixes, one per line; the defaults are the modules both "
                  "diffusers and ComfyUI know by name, so the LoRA loads in both.")
