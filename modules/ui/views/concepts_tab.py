"""Concepts: the list of concept folders (or .jsonl manifests) with their options, or a concept file."""
from __future__ import annotations

import gc
import threading
import tkinter as tk
from pathlib import Path
from typing import Any

import customtkinter as ctk

from modules.ui.views.base_tab import BaseTab
from modules.ui.views.record_list import RecordListView
from modules.ui.views.widgets import GRAY, button, pick_path, small_font


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
        self._watching = False
        self.file_var.trace_add("write", self._file_typed)
        self.list_view = self.place(RecordListView(self.body, self.app.concepts, "Concepts", "Add concept",
                                                   concept_summary, self.app.concepts.empty_note,
                                                   note=self.app.verdicts.line))
        stats_bar = self.place(ctk.CTkFrame(self.body, fg_color="transparent"), padx=12, pady=(10, 2))
        self.stats_button = button(stats_bar, "Count clips", self._count, width=120)
        self.stats_button.pack(side="left")
        ctk.CTkLabel(stats_bar, text="files, samples, windows per length, buckets and captions of each concept "
                     "(scripts/dataset_stats.py; probes the clips, loads no model)", text_color=GRAY,
                     font=small_font()).pack(side="left", padx=8)
        self.stats_box = self.place(ctk.CTkTextbox(self.body, height=180, wrap="none"), padx=12, pady=(2, 10))
        self.stats_box.configure(state="disabled")

    def _count(self) -> None:
        """Counts on a worker thread (probing clips can take a while); the Tk thread polls for its lines (Tk
        may only be called from its own thread)."""
        self.stats_button.configure(state="disabled", text="Counting…")
        result: list[list[str]] = []
        gc.collect()  # on the Tk thread: a collection in the worker would run Tk objects' __del__ there
        worker = threading.Thread(target=lambda: result.append(self.app.concepts.statistics()), daemon=True)
        worker.start()

        def poll() -> None:
            if worker.is_alive():
                self.body.after(100, poll)
            else:
                self._show_statistics(result[0] if result else ["counting failed: see the log"])

        self.body.after(100, poll)

    def _show_statistics(self, lines: list[str]) -> None:
        self.stats_box.configure(state="normal")
        self.stats_box.delete("1.0", "end")
        self.stats_box.insert("1.0", "\n".join(lines))
        self.stats_box.configure(state="disabled")
        self.stats_button.configure(state="normal", text="Count clips")

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
        self.app.check_data()  # the data verdict beside each concept, judged again once the config changed
        self._watch_verdicts()
        self.list_view.refresh()

    def _watch_verdicts(self) -> None:
        """While the data is being judged, look for the verdicts every 200 ms (the worker never touches Tk)."""
        if self.app.verdicts.poll():
            self.ui.schedule_refresh()  # the lines, and Start / the tab mark for a concept start-up refuses
        elif self.app.verdicts.checking and not self._watching:
            self._watching = True

            def again() -> None:
                self._watching = False
                self._watch_verdicts()

            self.body.after(200, again)

    def field_errors(self) -> dict[str, str]:
        return self.list_view.field_errors()
