"""Runs: every run of the workspace with its state, last backup and outputs (trainer/run_catalog.py); the selected
run's samples and curves one click away, and *Continue* / *Train more* for it (modules/ui/controllers/run_browser.py).
"""
from __future__ import annotations

from typing import Any

import customtkinter as ctk

from modules.trainer.run_catalog import RunState
from modules.ui.views.base_tab import BaseTab
from modules.ui.views.widgets import GRAY, bold_font, button, small_font

COLUMNS = (("run", 220), ("state", 340), ("last backup", 140), ("outputs", 240), ("last started", 160))
SELECTED = ("#bbdefb", "#1f4f7a")


class RunsTab(BaseTab):
    name = "runs"

    def build(self) -> None:
        bar = self.place(ctk.CTkFrame(self.body, fg_color="transparent"), padx=12, pady=(8, 2))
        button(bar, "Refresh", self._reload, width=90).pack(side="left")
        self.where = ctk.CTkLabel(bar, text="", font=small_font(), text_color=GRAY, anchor="w")
        self.where.pack(side="left", padx=10)
        self.table = self.place(ctk.CTkFrame(self.body), padx=12, pady=4)
        for column, (title, width) in enumerate(COLUMNS):
            ctk.CTkLabel(self.table, text=title, font=bold_font(13), anchor="w", width=width).grid(
                row=0, column=column, sticky="w", padx=6, pady=(4, 2))
        self.cells: list[list[ctk.CTkLabel]] = []
        self.empty = ctk.CTkLabel(self.table, text="", anchor="w", text_color=GRAY)
        actions = self.place(ctk.CTkFrame(self.body, fg_color="transparent"), padx=12, pady=(8, 2))
        self.samples_button = button(actions, "Samples", lambda: self._show("samples"), width=90)
        self.curves_button = button(actions, "Curves", lambda: self._show("curves"), width=90)
        self.continue_button = button(actions, "Continue", self._continue, width=100)
        self.more_button = button(actions, "Train more", self._train_more, width=110)
        for widget in (self.samples_button, self.curves_button, self.continue_button, self.more_button):
            widget.pack(side="left", padx=(0, 8))
        self.details = self.place(ctk.CTkLabel(self.body, text="", anchor="w", justify="left", wraplength=1100),
                                  padx=14, pady=(4, 8))
        self.note("A run is a folder of the workspace with its own backups, samples, curves and logs. Selecting a run "
                  "shows its samples and curves; it does not name the next run (the general tab's run name does). "
                  "Continue resumes the selected run from its last backup with the config of its last start; a "
                  "finished run is not resumed: Train more starts a new run from its weights.")
        self._shown_rows: Any = None

    # --- actions -------------------------------------------------------------------------------------------
    def _reload(self) -> None:
        self.app.runs.reload(self.app.workspace())
        self.refresh()

    def _select(self, name: str) -> None:
        self.ui.guard(lambda: self.app.select_run(name))
        self.ui.refresh()

    def _show(self, tab: str) -> None:
        self.app.load_run_results()
        self.ui.show_tab(tab).refresh()

    def _continue(self) -> None:
        self.ui.guard(self.app.continue_selected)
        self.ui.refresh()

    def _train_more(self) -> None:
        self.ui.guard(self.app.train_more)
        self.ui.refresh()

    # --- drawing -------------------------------------------------------------------------------------------
    def refresh(self) -> None:
        runs = self.app.runs
        runs.reload(self.app.workspace(), force=False)
        self.where.configure(text=f"{len(runs.runs)} run(s) in {runs.workspace}")
        rows = runs.rows()
        if rows != self._shown_rows:
            self._draw(rows)
            self._shown_rows = rows
        for row, cells in zip(rows, self.cells):
            color = SELECTED if row.name == runs.selected else "transparent"
            if cells[0].cget("fg_color") != color:
                for cell in cells:
                    cell.configure(fg_color=color)
        selected = runs.summary()
        self.details.configure(text="\n".join(runs.details()))
        has_run = selected is not None
        self.samples_button.configure(state="normal" if has_run and selected.samples_dir else "disabled")
        self.curves_button.configure(state="normal" if has_run else "disabled")
        idle = not self.app.training.running
        self.continue_button.configure(state="normal" if idle and has_run and selected.resumable else "disabled")
        finished = has_run and selected.state == RunState.FINISHED
        self.more_button.configure(state="normal" if idle and finished and selected.outputs else "disabled")

    def _draw(self, rows: list[Any]) -> None:
        for cells in self.cells:
            for cell in cells:
                cell.destroy()
        self.cells = []
        for index, row in enumerate(rows, start=1):
            values = (row.name, row.state, row.backup, row.outputs, row.started)
            cells = []
            for column, (value, (_, width)) in enumerate(zip(values, COLUMNS)):
                cell = ctk.CTkLabel(self.table, text=value, anchor="w", width=width, wraplength=width - 8,
                                    justify="left", corner_radius=4)
                cell.grid(row=index, column=column, sticky="ew", padx=2, pady=1)
                cell.bind("<Button-1>", lambda _event, name=row.name: self._select(name))
                cells.append(cell)
            self.cells.append(cells)
        if rows:
            self.empty.grid_forget()
        else:
            self.empty.configure(text=f"no run in {self.app.runs.workspace} yet: Start makes one")
            self.empty.grid(row=1, column=0, columnspan=len(COLUMNS), sticky="w", padx=6, pady=4)

    def row_texts(self) -> list[tuple[str, ...]]:
        """What the table shows, row by row (tests, screenshots)."""
        return [tuple(cell.cget("text") for cell in cells) for cells in self.cells]
