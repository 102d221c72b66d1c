"""Visualization: what the E2V run writes for inspection (dataset JSON `visualization`)."""
from __future__ import annotations

from typing import Any

import customtkinter as ctk

from modules.ui.controllers.e2v_dataset import VISUALIZATION_COLUMNS
from modules.ui.controllers.fields import CHOICE, same_value
from modules.ui.views.base_tab import BaseTab
from modules.ui.views.widgets import RED, bold_font, button, small_button


class VisualizationTab(BaseTab):
    name = "visualization"

    def build(self) -> None:
        self.dataset_form()
        header = self.place(ctk.CTkFrame(self.body, fg_color="transparent"), padx=12, pady=(12, 2))
        ctk.CTkLabel(header, text="Processors", font=bold_font()).pack(side="left")
        button(header, "Add processor", self.app.dataset.add_visualization).pack(side="left", padx=12)
        self.table = self.place(ctk.CTkFrame(self.body, fg_color="transparent"), padx=12)
        self.rows: list[dict[str, Any]] = []
        self._signature: Any = None

    def _signature_now(self) -> Any:
        return id(self.app.dataset.document), self.app.dataset.index, tuple(
            id(r) for r in self.app.dataset.visualization_rows)

    def rebuild(self) -> None:
        for child in self.table.winfo_children():
            child.destroy()
        self.rows = []
        for col, spec in enumerate(VISUALIZATION_COLUMNS.values()):
            ctk.CTkLabel(self.table, text=spec.label, font=bold_font(12)).grid(row=0, column=col, sticky="w", padx=3)
        dataset = self.app.dataset
        for i in range(len(dataset.visualization_rows)):
            widgets: dict[str, Any] = {}
            for col, (column, spec) in enumerate(VISUALIZATION_COLUMNS.items()):
                var = ctk.StringVar(self.table)
                if spec.kind == CHOICE:
                    widget = ctk.CTkOptionMenu(self.table, values=list(spec.choices), variable=var, width=130,
                                               command=lambda v, i=i, c=column: dataset.set_visualization(i, c, v))
                else:
                    widget = ctk.CTkEntry(self.table, textvariable=var, width=300 if column == "data" else 100)
                    var.trace_add("write", lambda *_, i=i, c=column, v=var: self._typed(i, c, v))
                widget.grid(row=1 + i, column=col, sticky="w", padx=3, pady=2)
                widgets[column] = var
            end = len(VISUALIZATION_COLUMNS)
            small_button(self.table, "✕", lambda i=i: dataset.remove_visualization(i)).grid(row=1 + i, column=end, padx=3)
            error = ctk.CTkLabel(self.table, text="", text_color=RED)
            error.grid(row=1 + i, column=end + 1, sticky="w", padx=6)
            widgets["_error"] = error
            self.rows.append(widgets)
        self._signature = self._signature_now()

    def _typed(self, index: int, column: str, var: Any) -> None:
        if not getattr(self, "_updating", False):
            self.app.dataset.set_visualization(index, column, var.get())

    def refresh(self) -> None:
        super().refresh()
        if self._signature != self._signature_now():
            self.rebuild()
        dataset = self.app.dataset
        self._updating = True
        for i, widgets in enumerate(self.rows):
            for column in VISUALIZATION_COLUMNS:
                value = dataset.visualization_display(i, column)
                if not same_value(VISUALIZATION_COLUMNS[column], widgets[column].get(), value):
                    widgets[column].set(value)
            widgets["_error"].configure(text=dataset.visualization_error(i))
        self._updating = False
