"""E2V elements: the dataset JSON file, its dataset options, the element table and a live preview of
which files of the dataset folder each element matches."""
from __future__ import annotations

import tkinter as tk
from typing import Any

import customtkinter as ctk

from modules.ui.controllers.e2v_dataset import DATASET_SPECS
from modules.ui.controllers.elements_controller import COLUMNS
from modules.ui.controllers.fields import BOOL, CHOICE, same_value
from modules.ui.views.base_tab import BaseTab
from modules.ui.views.widgets import GRAY, GREEN, RED, Tooltip, bold_font, button, pick_path, small_button, small_font

COLUMN_WIDTHS = {"name": 130, "suffixes": 230, "vae.position": 56, "vae.repeat": 56}


class ElementCell:
    """One editable cell of the element table."""

    def __init__(self, master: Any, tab: "ElementsTab", index: int, column: str):
        self.tab, self.index, self.column = tab, index, column
        spec = COLUMNS[column]
        self._updating = False
        if spec.kind == BOOL:
            self.var: Any = tk.BooleanVar(master)
            self.widget = ctk.CTkSwitch(master, text="", variable=self.var, width=40,
                                        command=lambda: self._set(bool(self.var.get())))
        elif spec.kind == CHOICE:
            self.var = tk.StringVar(master)
            self.widget = ctk.CTkOptionMenu(master, values=list(spec.choices), variable=self.var, width=118,
                                            dynamic_resizing=False, command=self._set)
        else:
            self.var = tk.StringVar(master)
            self.widget = ctk.CTkEntry(master, textvariable=self.var, width=COLUMN_WIDTHS.get(column, 80))
            self.var.trace_add("write", lambda *_: self._set(self.var.get()))
        self.refresh()

    def _set(self, value: Any) -> None:
        if not self._updating:
            self.tab.app.dataset.elements.set(self.index, self.column, value)

    def refresh(self) -> None:
        value = self.tab.app.dataset.elements.display(self.index, self.column)
        self._updating = True
        try:
            if not same_value(COLUMNS[self.column], self.var.get(), value):
                self.var.set(value)
        finally:
            self._updating = False


class ElementsTab(BaseTab):
    name = "E2V elements"

    def build(self) -> None:
        self._build_file_bar()
        self.dataset_form()
        self._build_table()
        self._build_preview()

    # --- the dataset JSON file ---------------------------------------------------------------------
    def _build_file_bar(self) -> None:
        bar = self.place(ctk.CTkFrame(self.body, fg_color="transparent"), padx=12, pady=(6, 0))
        ctk.CTkLabel(bar, text="Dataset JSON", font=bold_font()).pack(side="left")
        self.path_var = tk.StringVar(bar)
        self.path_entry = ctk.CTkEntry(bar, textvariable=self.path_var, width=380)
        self.path_entry.pack(side="left", padx=8)
        Tooltip(self.path_entry, self.app.config.spec("dataset_config").doc)
        self._updating = False
        self.path_var.trace_add("write", self._path_typed)
        for text, command in (("Open…", self._open), ("Load", self._load), ("New", self._new), ("Save", self._save)):
            button(bar, text, command, width=64).pack(side="left", padx=2)
        self.dataset_menu = ctk.CTkOptionMenu(bar, values=["dataset 1"], width=110, command=self._select_dataset)
        self.dataset_menu.pack(side="left", padx=(12, 2))
        small_button(bar, "+", self._add_dataset).pack(side="left", padx=1)
        small_button(bar, "−", self._remove_dataset).pack(side="left", padx=1)
        self.file_state = self.place(ctk.CTkLabel(self.body, text="", anchor="w", text_color=GRAY, font=small_font()),
                                     padx=12)

    def _path_typed(self, *_args: Any) -> None:
        if not self._updating:
            self.app.config.set("dataset_config", self.path_var.get())

    def _open(self) -> None:
        chosen = pick_path("file", self.path_var.get())
        if chosen:
            self.ui.guard(lambda: self.app.set_dataset_path(chosen))

    def _load(self) -> None:
        self.ui.guard(lambda: self.app.set_dataset_path(self.path_var.get()))

    def _new(self) -> None:
        self.app.dataset.new()

    def _save(self) -> None:
        self.ui.guard(self.app.save_dataset)

    def _select_dataset(self, label: str) -> None:
        self.app.dataset.select(int(label.split()[-1]) - 1)

    def _add_dataset(self) -> None:
        self.app.dataset.add_dataset()

    def _remove_dataset(self) -> None:
        self.ui.guard(lambda: self.app.dataset.remove_dataset(self.app.dataset.index))

    # --- the element table --------------------------------------------------------------------------
    def _build_table(self) -> None:
        header = self.place(ctk.CTkFrame(self.body, fg_color="transparent"), padx=12, pady=(12, 2))
        ctk.CTkLabel(header, text="Elements", font=bold_font()).pack(side="left")
        self.add_button = button(header, "Add element", self._add_element)
        self.add_button.pack(side="left", padx=12)
        button(header, "Positions = row order", self.app.dataset.elements.renumber, width=160).pack(side="left")
        self.table = self.place(ctk.CTkFrame(self.body), padx=12)
        self.table_errors = self.place(ctk.CTkLabel(self.body, text="", anchor="w", justify="left", text_color=RED,
                                                    wraplength=1000), padx=14)
        self.table_errors.grid_remove()  # shown only while there is something to say
        self.cells: list[list[ElementCell]] = []
        self.row_labels: list[tuple[ctk.CTkLabel, ctk.CTkLabel]] = []
        self.row_buttons: list[dict[str, ctk.CTkButton]] = []
        self._signature: Any = None

    def _add_element(self) -> None:
        self.app.dataset.elements.add()

    def _signature_now(self) -> Any:
        dataset = self.app.dataset
        return id(dataset.document), dataset.index, tuple(id(r) for r in dataset.elements.rows)

    def rebuild_table(self) -> None:
        for child in self.table.winfo_children():
            child.destroy()
        self.cells, self.row_labels, self.row_buttons = [], [], []
        columns = list(COLUMNS)
        titles = ["#"] + [COLUMNS[c].label for c in columns] + ["Matched", ""]
        for col, title in enumerate(titles):
            label = ctk.CTkLabel(self.table, text=title, font=bold_font(12), anchor="w")
            label.grid(row=0, column=col, sticky="w", padx=3, pady=(4, 0))
            if 1 <= col <= len(columns):
                Tooltip(label, COLUMNS[columns[col - 1]].doc)
        elements = self.app.dataset.elements
        for i in range(len(elements)):
            grid_row = 1 + 2 * i
            ctk.CTkLabel(self.table, text=str(i + 1), width=20).grid(row=grid_row, column=0, padx=3)
            cells = []
            for col, column in enumerate(columns, start=1):
                cell = ElementCell(self.table, self, i, column)
                cell.widget.grid(row=grid_row, column=col, sticky="w", padx=3, pady=2)
                cells.append(cell)
            matched = ctk.CTkLabel(self.table, text="", width=60, anchor="w")
            matched.grid(row=grid_row, column=len(columns) + 1, sticky="w", padx=3)
            buttons = ctk.CTkFrame(self.table, fg_color="transparent")
            buttons.grid(row=grid_row, column=len(columns) + 2, sticky="w")
            row_buttons = {}
            for text, command in (("↑", lambda i=i: elements.move(i, -1)), ("↓", lambda i=i: elements.move(i, 1)),
                                  ("✕", lambda i=i: elements.remove(i))):
                row_buttons[text] = small_button(buttons, text, command)
                row_buttons[text].pack(side="left", padx=1)
            self.row_buttons.append(row_buttons)
            error = ctk.CTkLabel(self.table, text="", text_color=RED, anchor="w", font=small_font())
            error.grid(row=grid_row + 1, column=1, columnspan=len(columns) + 2, sticky="w", padx=3)
            error.grid_remove()
            self.cells.append(cells)
            self.row_labels.append((matched, error))
        self._signature = self._signature_now()

    # --- preview -------------------------------------------------------------------------------------
    def _build_preview(self) -> None:
        self.place(ctk.CTkLabel(self.body, text="Preview of the dataset folder", font=bold_font(), anchor="w"),
                   padx=12, pady=(12, 2))
        self.preview_summary = self.place(ctk.CTkLabel(self.body, text="", anchor="w", justify="left",
                                                       wraplength=1000), padx=14)
        self.preview_box = self.place(ctk.CTkTextbox(self.body, height=170, font=ctk.CTkFont(family="monospace",
                                                                                            size=12)), padx=12)
        self._preview_text = ""

    def refresh_preview(self) -> None:
        preview = self.app.dataset.elements.preview()
        ok = not preview.error and preview.total and preview.complete == preview.total
        self.preview_summary.configure(text=preview.summary(), text_color=GREEN if ok else (RED if preview.error else GRAY))
        lines = []
        for sample in preview.samples[:200]:
            found = "  ".join(f"{name}: {file or '—'}" for name, file in sample.files.items())
            state = "complete" if sample.complete else (
                "no caption" if not sample.caption else "missing " + ", ".join(sample.missing_required))
            lines.append(f"{sample.video:<16} [{state}]  {found}")
        if len(preview.samples) > 200:
            lines.append(f"… and {len(preview.samples) - 200} more")
        text = "\n".join(lines)
        if text != self._preview_text:
            self.preview_box.configure(state="normal")
            self.preview_box.delete("1.0", "end")
            self.preview_box.insert("1.0", text)
            self.preview_box.configure(state="disabled")
            self._preview_text = text
        for i, (matched, _) in enumerate(self.row_labels):
            name = str(self.app.dataset.elements.rows[i].get("name", ""))
            count = preview.counts.get(name, 0)
            matched.configure(text=f"{count}/{preview.total}" if preview.total else "–")

    # --- refresh --------------------------------------------------------------------------------------
    def refresh(self) -> None:
        super().refresh()
        app = self.app
        self._updating = True
        if self.path_var.get() != str(app.config.value("dataset_config") or ""):
            self.path_var.set(str(app.config.value("dataset_config") or ""))
        self._updating = False
        labels = [f"dataset {i + 1}" for i in range(len(app.dataset.datasets))]
        self.dataset_menu.configure(values=labels)
        self.dataset_menu.set(labels[app.dataset.index])
        state = "unsaved changes" if app.dataset.dirty else (
            f"saved in {app.dataset.path}" if app.dataset.path else "not saved yet")
        config_error = app.config.error("dataset_config")
        self.file_state.configure(text=config_error or state, text_color=RED if config_error else GRAY)
        if self._signature != self._signature_now():
            self.rebuild_table()
        for cells in self.cells:
            for cell in cells:
                cell.refresh()
        problems = app.dataset.problems()
        per_row: dict[int, list[str]] = {}
        general = []
        for problem in problems:
            if problem.row is not None:
                per_row.setdefault(problem.row, []).append(f"{COLUMNS[problem.field].label}: {problem.message}")
            elif problem.path not in DATASET_SPECS:  # those are shown beside their fields
                general.append(str(problem))
        for i, (_, error) in enumerate(self.row_labels):
            text = "; ".join(per_row.get(i, []))
            if text != error.cget("text"):
                error.configure(text=text)
                if text:
                    error.grid()
                else:
                    error.grid_remove()  # no empty gap between rows
        text = "\n".join(general)
        if text != self.table_errors.cget("text"):
            self.table_errors.configure(text=text)
            if text:
                self.table_errors.grid()
            else:
                self.table_errors.grid_remove()
        self.refresh_preview()

    def field_errors(self) -> dict[str, str]:
        errors = super().field_errors()
        for i, (_, error) in enumerate(self.row_labels):
            if error.cget("text"):
                errors[f"elements[{i}]"] = error.cget("text")
        if self.table_errors.cget("text"):
            errors["elements"] = self.table_errors.cget("text")
        return errors
