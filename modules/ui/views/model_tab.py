"""Model: base model folder and overrides (with the variant read from the checkpoint), the LoRAs merged into the
base (base_loras), dtypes, output."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import customtkinter as ctk

from modules.ui.views.base_tab import BaseTab
from modules.ui.views.record_list import RecordListView
from modules.ui.views.widgets import GRAY, RED


def base_lora_summary(row: dict[str, Any]) -> str:
    name = Path(str(row.get("path") or "")).name or "(no file yet)"
    expert = row.get("expert") or "BOTH"
    only = " (training only)" if row.get("training_only") else " (samples only)" if row.get("sample_only") else ""
    return f"{name} × {row.get('strength')}" + ("" if expert == "BOTH" else f" ({expert.lower()}-noise expert)") + only


class ModelTab(BaseTab):
    name = "model"

    def build(self) -> None:
        self.variant = self.place(ctk.CTkLabel(self.body, text="", anchor="w", justify="left"), padx=12)
        self.config_form()
        self.base_loras = self.place(RecordListView(self.body, self.app.base_loras, "LoRAs merged into the base",
                                                    "Add base LoRA", base_lora_summary))
        self.note("Merged into the frozen base when it loads, in order (e.g. a Lightning speed LoRA): the LoRA trains "
                  "on the base you generate with, and its file records them so sample.py applies the same stack. "
                  "Set the sampling tab's 'Every sample' steps and CFG for a distilled base. 'sample only': merged "
                  "for the samples only (preview with a speed LoRA you do not train on).")

    def refresh(self) -> None:
        super().refresh()
        self.base_loras.refresh()
        text, ok = self.app.config.detected_variant()
        self.variant.configure(text=f"Detected variant: {text}", text_color=GRAY if ok else RED)

    def field_errors(self) -> dict[str, str]:
        return {**super().field_errors(), **self.base_loras.field_errors()}
