"""LoRA: rank, alpha, dropout, target modules and blocks, continuing from a LoRA file."""
from __future__ import annotations

from modules.ui.views.base_tab import BaseTab


class LoRATab(BaseTab):
    name = "LoRA"

    def build(self) -> None:
        self.config_form()
        self.note("Target modules are module-name suffixes, one per line; the defaults are modules Wan's "
                  "original code names too, so a COMFY_LORA file (the default output) loads in ComfyUI, "
                  "diffusers and SkyReels-A2. DIFFUSERS_LORA files load in diffusers only.")
