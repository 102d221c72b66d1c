"""Common frame of every tab: a scrollable body and generated forms that refresh together."""
from __future__ import annotations

from typing import Any

import customtkinter as ctk

from modules.ui.controllers.layout import DATASET_SECTIONS, Section, sections_of
from modules.ui.views.widgets import GRAY, FieldForm, scrollable, small_font
from modules.ui.views.window import Window


class BaseTab:
    name = ""

    def __init__(self, master: Any, ui: Window):
        self.ui = ui
        self.app = ui.app
        self.body = scrollable(master)
        self.forms: list[FieldForm] = []
        self._next_row = 0
        self.build()

    def build(self) -> None:
        self.config_form()

    def place(self, widget: Any, **kwargs: Any) -> Any:
        """Stack `widget` below what the tab already shows."""
        kwargs.setdefault("sticky", "ew")
        kwargs.setdefault("padx", 4)
        kwargs.setdefault("pady", 2)
        widget.grid(row=self._next_row, column=0, **kwargs)
        self._next_row += 1
        return widget

    def note(self, text: str) -> ctk.CTkLabel:
        return self.place(ctk.CTkLabel(self.body, text=text, anchor="w", justify="left", wraplength=900,
                                       text_color=GRAY, font=small_font()), padx=12)

    def config_form(self, sections: tuple[Section, ...] | None = None) -> FieldForm:
        if sections is None:
            sections = sections_of(self.name, self.app.config.specs)
        form = self.place(FieldForm(self.body, self.app.config, sections))
        self.forms.append(form)
        return form

    def dataset_form(self) -> FieldForm:
        form = self.place(FieldForm(self.body, self.app.dataset, DATASET_SECTIONS[self.name]))
        self.forms.append(form)
        return form

    def refresh(self) -> None:
        for form in self.forms:
            form.refresh()

    def field_errors(self) -> dict[str, str]:
        """key -> error text currently shown beside a field of this tab (for tests)."""
        return {key: row.error_text for form in self.forms for key, row in form.rows.items() if row.error_text}
