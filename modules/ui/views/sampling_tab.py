"""Sampling: schedule, the sample list (prompt, image, size, steps, CFG, seed) and "sample now"."""
from __future__ import annotations

from typing import Any

import customtkinter as ctk

from modules.ui.views.base_tab import BaseTab
from modules.ui.views.record_list import RecordListView
from modules.ui.views.widgets import button
from modules.util.resolution_text import clip_text


def sample_summary(row: dict[str, Any]) -> str:
    prompt = str(row.get("prompt") or "(no prompt yet)")
    prompt = prompt if len(prompt) <= 60 else prompt[:57] + "…"
    size = clip_text(row.get("frames"), row.get("height"), row.get("width"))
    # E2V: the frames include the reference frames the video drops (samples[].frames' doc says how many)
    return f"{prompt} — {size}" + (" (frames include the reference frames)" if row.get("elements") else "")


class SamplingTab(BaseTab):
    name = "sampling"

    def build(self) -> None:
        self.config_form()
        bar = self.place(ctk.CTkFrame(self.body, fg_color="transparent"), padx=12, pady=6)
        self.sample_button = button(bar, "Sample now", self._sample_now)
        self.sample_button.pack(side="left")
        self.list_view = self.place(RecordListView(self.body, self.app.samples, "Samples", "Add sample",
                                                   sample_summary))

    def _sample_now(self) -> None:
        if self.app.sample_now():
            self.ui.refresh_status()

    def refresh(self) -> None:
        super().refresh()
        self.sample_button.configure(state="normal" if self.app.training.running else "disabled")
        self.list_view.refresh()

    def field_errors(self) -> dict[str, str]:
        return {**super().field_errors(), **self.list_view.field_errors()}
