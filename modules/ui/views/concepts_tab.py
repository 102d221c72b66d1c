"""Concepts: the list of concept folders (or .jsonl manifests) with their options, or a concept file."""
from __future__ import annotations

import tkinter as tk
from pathlib import Path
from typing import Any

import customtkinter as ctk

from modules.ui.views.base_tab import BaseTab
from modules.ui.views.record_list import RecordListView
from modules.ui.views.widgets import GRAY, pick_path, small_font


def concept_summary(row: dict[str, Any]) -> str:
    name = row.get("name") or (Path(row["path"]).name if row.get("path") else "(no folder yet)")
    return name if row.get("enabled", True) else f"{name} (disabled)"


class ConceptsTab(BaseTab):
    name = "concepts"

    def build(self) -> None:
        file_bar = self.place(ctk.CTkFrame(self.body, fg_color="transparent"), padx=12, pady=6)
        ctk.CTkLabel(file_bar, text="Concept file (optional)").pack(side="left")
        self.file_var = tk.StringVar(file_bar)
        self.file_entry = ctk.CTkEntry(file_bar, textvariable=self.file_var, width=360)
        self.file_entry.pack(side="left", padx=8)
        ctk.CTkButton(file_bar, text="…", width=30, command=self._pick_file).pack(side="left")
        ctk.CTkLabel(file_bar, text="a JSON list of concepts used instead of the list below", text_color=GRAY,
                     font=small_font()).pack(side="left", padx=8)
        self._updating = False
        self.file_var.trace_add("write", self._file_typed)
        self.list_view = self.place(RecordListView(self.body, self.app.concepts, "Concepts", "Add concept",
                                                   concept_summary))

    def _pick_file(self) -> None:
        chosen = pick_path("file", self.file_var.get())
        if chosen:
            self.file_var.set(chosen)

    def _file_typed(self, *_args: Any) -> None:
        if not self._updating:
            self.app.concepts.set_concept_file(self.file_var.get())

    def refresh(self) -> None:
        super().refresh()
        self._updating = True
        if self.file_var.get() != self.app.concepts.concept_file:
            self.file_var.set(self.app.concepts.concept_file)
        self._updating = False
        self.list_view.refresh()

    def field_errors(self) -> dict[str, str]:
        return self.list_view.field_errors()
