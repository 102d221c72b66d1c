"""Model: base model folder and overrides (with the variant read from the checkpoint), dtypes, output."""
from __future__ import annotations

import customtkinter as ctk

from modules.ui.views.base_tab import BaseTab
from modules.ui.views.widgets import GRAY, RED


class ModelTab(BaseTab):
    name = "model"

    def build(self) -> None:
        self.variant = self.place(ctk.CTkLabel(self.body, text="", anchor="w", justify="left"), padx=12)
        self.config_form()

    def refresh(self) -> None:
        super().refresh()
        text, ok = self.app.config.detected_variant()
        self.variant.configure(text=f"Detected variant: {text}", text_color=GRAY if ok else RED)
