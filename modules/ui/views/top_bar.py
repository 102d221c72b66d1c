"""Top bar: preset dropdown and "save preset", model type with the detected variant, training method."""
from __future__ import annotations

from typing import Any

import customtkinter as ctk

from modules.ui.controllers.app_controller import APP_NAME
from modules.ui.views.widgets import GRAY, RED, FieldInput, Tooltip, bold_font, button, small_font
from modules.ui.views.window import Window

NO_PRESET = "choose a preset…"


class TopBar(ctk.CTkFrame):
    def __init__(self, master: Any, ui: Window):
        super().__init__(master, corner_radius=0)
        self.ui, self.app = ui, ui.app
        config = self.app.config
        ctk.CTkLabel(self, text=APP_NAME, font=bold_font(18)).pack(side="left", padx=(12, 16), pady=8)
        ctk.CTkLabel(self, text="Preset").pack(side="left")
        self.preset_menu = ctk.CTkOptionMenu(self, values=[NO_PRESET], width=230, dynamic_resizing=False,
                                             command=self._apply_preset)
        self.preset_menu.pack(side="left", padx=6)
        Tooltip(self.preset_menu, "Shipped presets start with '#'; a preset sets the training options and keeps "
                                  "your concepts, samples and dataset.")
        button(self, "Save preset", self._save_preset, width=100).pack(side="left", padx=(0, 16))
        ctk.CTkLabel(self, text="Model type").pack(side="left")
        self.model_type = FieldInput(self, config, "model_type", width=110)
        self.model_type.widget.pack(side="left", padx=6)
        Tooltip(self.model_type.widget, "Read from the checkpoint's own configs once the base model folder is a Wan "
                                        "model (then not a choice); " + config.spec("model_type").doc)
        ctk.CTkLabel(self, text="Method").pack(side="left", padx=(10, 0))
        self.method = FieldInput(self, config, "training_method", width=120)
        self.method.widget.pack(side="left", padx=6)
        Tooltip(self.method.widget, config.spec("training_method").doc)
        self.variant = ctk.CTkLabel(self, text="", text_color=GRAY, font=small_font(), anchor="w")
        self.variant.pack(side="left", padx=10, fill="x", expand=True)
        self._preset_names: list[str] = []

    def _apply_preset(self, name: str) -> None:
        if name != NO_PRESET:
            self.ui.guard(lambda: self.app.apply_preset(name))

    def _save_preset(self) -> None:
        dialog = ctk.CTkInputDialog(text="Name of the new preset:", title="Save preset")
        name = dialog.get_input()
        if name:
            path = self.ui.guard(lambda: self.app.config.save_preset(name))
            if path:
                self.ui.set_status(f"preset saved to {path}")
                self.refresh()

    def refresh(self) -> None:
        config = self.app.config
        names = [p.name for p in config.list_presets()]
        if names != self._preset_names:
            self.preset_menu.configure(values=names or [NO_PRESET])
            self._preset_names = names
        self.preset_menu.set(config.preset_name or NO_PRESET)
        self.model_type.refresh()
        detected = bool(config.detected_model_type())  # the checkpoint's: not a choice while one is read
        if (self.model_type.widget.cget("state") == "disabled") != detected:
            self.model_type.widget.configure(state="disabled" if detected else "normal")
        self.method.refresh()
        text, ok = config.detected_variant()
        self.variant.configure(text=f"variant: {text}", text_color=GRAY if ok else RED)
