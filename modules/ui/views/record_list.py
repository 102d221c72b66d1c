"""A list editor of config records (concepts, samples): one card per row with a generated form."""
from __future__ import annotations

from typing import Any, Callable

import customtkinter as ctk

from modules.ui.controllers.layout import Section
from modules.ui.controllers.list_controller import RecordListController
from modules.ui.views.widgets import GRAY, RED, FieldForm, bold_font, button, small_button, small_font


class RecordListView(ctk.CTkFrame):
    def __init__(self, master: Any, rows: RecordListController, title: str, add_text: str,
                 summary: Callable[[dict[str, Any]], str], empty_note: Callable[[], str] = lambda: "(none yet)",
                 note: Callable[[int], tuple[str, bool]] | None = None):
        super().__init__(master, fg_color="transparent")
        self.rows, self.summary, self.empty_note = rows, summary, empty_note
        self.note = note  # a line under a card's title (a concept's data verdict): (text, is_error)
        self.notes: list[ctk.CTkLabel] = []
        self.grid_columnconfigure(0, weight=1)
        header = ctk.CTkFrame(self, fg_color="transparent")
        header.grid(row=0, column=0, sticky="ew", padx=8, pady=(4, 2))
        ctk.CTkLabel(header, text=title, font=bold_font()).pack(side="left")
        self.add_button = button(header, add_text, self._add)
        self.add_button.pack(side="left", padx=12)
        self.empty = ctk.CTkLabel(self, text=empty_note(), anchor="w", justify="left", wraplength=900)
        self.cards: list[tuple[ctk.CTkFrame, ctk.CTkLabel, FieldForm]] = []
        self._signature: Any = None
        self.refresh()

    def _add(self) -> None:
        self.rows.add()

    def _signature_now(self) -> Any:
        return id(self.rows.config.data.get(self.rows.key)), len(self.rows)

    def rebuild(self) -> None:
        for card, _, _ in self.cards:
            card.destroy()
        self.cards, self.notes = [], []
        names = tuple(self.rows.specs)
        for i in range(len(self.rows)):
            card = ctk.CTkFrame(self, border_width=1)
            card.grid(row=i + 1, column=0, sticky="ew", padx=8, pady=4)
            card.grid_columnconfigure(0, weight=1)
            top = ctk.CTkFrame(card, fg_color="transparent")
            top.grid(row=0, column=0, sticky="ew", padx=6, pady=(6, 0))
            title = ctk.CTkLabel(top, text="", font=bold_font(13), anchor="w")
            title.pack(side="left")
            for text, command in (("✕", lambda i=i: self.rows.remove(i)), ("copy", lambda i=i: self.rows.duplicate(i)),
                                  ("↓", lambda i=i: self.rows.move(i, 1)), ("↑", lambda i=i: self.rows.move(i, -1))):
                small_button(top, text, command, width=44 if text == "copy" else 28).pack(side="right", padx=2)
            if self.note is not None:
                note = ctk.CTkLabel(card, text="", anchor="w", justify="left", font=small_font(), text_color=GRAY)
                note.grid(row=1, column=0, sticky="ew", padx=10)
                self.notes.append(note)
            form = FieldForm(card, self.rows.row_source(i), [Section("", names)])
            form.grid(row=2, column=0, sticky="ew", padx=4, pady=(0, 6))
            self.cards.append((card, title, form))
        if self.cards:
            self.empty.grid_forget()
        else:
            self.empty.grid(row=1, column=0, sticky="w", padx=16)
        self._signature = self._signature_now()

    def refresh(self) -> None:
        if self._signature != self._signature_now():
            self.rebuild()
        if not self.cards and self.empty.cget("text") != self.empty_note():
            self.empty.configure(text=self.empty_note())
        for i, (_, title, form) in enumerate(self.cards):
            title.configure(text=f"{i + 1}. {self.summary(self.rows.rows[i])}")
            if self.note is not None:
                text, error = self.note(i)
                self.notes[i].configure(text=text, text_color=RED if error else GRAY)
            form.refresh()

    def field_errors(self) -> dict[str, str]:
        return {f"{self.rows.key}[{i}].{k}": r.error_text for i, (_, _, form) in enumerate(self.cards)
                for k, r in form.rows.items() if r.error_text}
