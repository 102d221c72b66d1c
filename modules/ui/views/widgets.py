"""Generated field widgets: one row per config field, drawn from its FieldSpec.

A "source" is anything with ``spec(key)``, ``display(key)``, ``set(key, value)`` and ``error(key)``
(the ConfigController, the DatasetController, one row of a list). Enums become dropdowns, bools
switches, paths an entry with a picker, string lists a text box, everything else an entry; the doc
is shown beside the field and replaced by the error, in red, while the value is bad.
"""
from __future__ import annotations

import tkinter as tk
from tkinter import filedialog
from typing import Any, Callable, Iterable

import customtkinter as ctk

from modules.ui.controllers.fields import BOOL, CHOICE, NOT_SET, PATH, TEXT_LIST, FieldSpec, same_value
from modules.ui.controllers.layout import Section

GRAY = ("gray40", "gray60")
RED = ("#c62828", "#ff6e6e")
GREEN = ("#2e7d32", "#81c784")
BLUE = ("#1565c0", "#64b5f6")  # a value memory_preset AUTO chose
SMALL = 12


def small_font() -> ctk.CTkFont:
    return ctk.CTkFont(size=SMALL)


def bold_font(size: int = 14) -> ctk.CTkFont:
    return ctk.CTkFont(size=size, weight="bold")


class Tooltip:
    """A small window with `text` shown while the mouse rests on `widget`."""

    def __init__(self, widget: Any, text: str, delay_ms: int = 600):
        self.widget, self.text, self.delay_ms = widget, text, delay_ms
        self.window: tk.Toplevel | None = None
        self._job: str | None = None
        if text:
            widget.bind("<Enter>", self._schedule, add="+")
            widget.bind("<Leave>", self._hide, add="+")

    def _schedule(self, _event: Any = None) -> None:
        self._job = self.widget.after(self.delay_ms, self._show)

    def _show(self) -> None:
        if self.window is not None:
            return
        x = self.widget.winfo_rootx() + 10
        y = self.widget.winfo_rooty() + self.widget.winfo_height() + 4
        self.window = tk.Toplevel(self.widget)
        self.window.wm_overrideredirect(True)
        self.window.wm_geometry(f"+{x}+{y}")
        tk.Label(self.window, text=self.text, justify="left", wraplength=420, background="#ffffe0",
                 relief="solid", borderwidth=1, padx=6, pady=3).pack()

    def _hide(self, _event: Any = None) -> None:
        if self._job is not None:
            self.widget.after_cancel(self._job)
            self._job = None
        if self.window is not None:
            self.window.destroy()
            self.window = None


def pick_path(mode: str, current: str = "") -> str:
    """Open the file / folder picker for a path field; "" when cancelled."""
    if mode == "dir":
        return filedialog.askdirectory(initialdir=current or ".", mustexist=False) or ""
    if mode == "save":
        return filedialog.asksaveasfilename(initialfile=current) or ""
    return filedialog.askopenfilename(initialfile=current) or ""


class FieldInput:
    """The input widget of one field, bound to `source`; `refresh()` re-reads the source."""

    def __init__(self, master: Any, source: Any, key: str, width: int = 260,
                 on_change: Callable[[], None] | None = None):
        self.source, self.key = source, key
        self.spec: FieldSpec = source.spec(key)
        self.on_change = on_change
        self._updating = False
        kind = self.spec.kind
        if kind == BOOL:
            self.var: Any = tk.BooleanVar(master)
            self.widget = ctk.CTkSwitch(master, text="", variable=self.var, command=self._switched, width=50)
        elif kind == CHOICE:
            self.var = tk.StringVar(master)
            choices = ([NOT_SET] if self.spec.optional else []) + list(self.spec.choices)
            self.widget = ctk.CTkOptionMenu(master, values=choices, variable=self.var,
                                            command=self._chosen, width=min(width, 200), dynamic_resizing=False)
        elif kind == TEXT_LIST:
            self.var = None
            self.widget = ctk.CTkTextbox(master, width=width, height=96)
            self.widget.bind("<KeyRelease>", self._typed_box, add="+")
            self.widget.bind("<FocusOut>", self._typed_box, add="+")
        elif kind == PATH:
            self.var = tk.StringVar(master)
            self.widget = ctk.CTkFrame(master, fg_color="transparent")
            self.entry = ctk.CTkEntry(self.widget, textvariable=self.var, width=width - 34)
            self.entry.pack(side="left", fill="x", expand=True)
            button = ctk.CTkButton(self.widget, text="…", width=30, command=self._pick)
            button.pack(side="left", padx=(4, 0))
            self.var.trace_add("write", self._typed)
        else:
            self.var = tk.StringVar(master)
            self.widget = self.entry = ctk.CTkEntry(master, textvariable=self.var, width=width)
            self.var.trace_add("write", self._typed)
        self.refresh()

    # user -> source
    def _set(self, value: Any) -> None:
        if self._updating:
            return
        self.source.set(self.key, value)
        if self.on_change is not None:
            self.on_change()

    def _switched(self) -> None:
        self._set(bool(self.var.get()))

    def _chosen(self, value: str) -> None:
        self._set(value)

    def _typed(self, *_args: Any) -> None:
        self._set(self.var.get())

    def _typed_box(self, _event: Any = None) -> None:
        self._set(self.widget.get("1.0", "end-1c"))

    def _pick(self) -> None:
        chosen = pick_path(self.spec.path_mode, self.var.get())
        if chosen:
            self.var.set(chosen)

    # source -> widget
    def refresh(self) -> None:
        value = self.source.display(self.key)
        self._updating = True
        try:
            if self.spec.kind == TEXT_LIST:
                if not same_value(self.spec, self.widget.get("1.0", "end-1c"), value):
                    self.widget.delete("1.0", "end")
                    self.widget.insert("1.0", value)
            elif self.spec.kind == BOOL:
                if bool(self.var.get()) != bool(value):
                    self.var.set(bool(value))
            elif self.spec.kind == CHOICE:  # nothing typed to keep: show exactly the value ("—": not set)
                if self.var.get() != value:
                    self.var.set(value)
            elif not same_value(self.spec, self.var.get(), value):
                self.var.set(value)
        finally:
            self._updating = False

    def grid(self, **kwargs: Any) -> None:
        self.widget.grid(**kwargs)

    def grid_remove(self) -> None:
        self.widget.grid_remove()


class FieldRow:
    """label | input | doc-or-error, on one grid row of the column frame its form puts it in."""

    def __init__(self, master: Any, source: Any, key: str, row: int, column: Any = None):
        self.source, self.key = source, key
        spec = source.spec(key)
        self.doc = spec.doc
        self.label = ctk.CTkLabel(master, text=spec.label, anchor="w")
        Tooltip(self.label, spec.doc)
        self.input = FieldInput(master, source, key)
        self.note = ctk.CTkLabel(master, text=spec.doc, anchor="w", justify="left", wraplength=NOTE_WRAP,
                                 text_color=GRAY, font=small_font())
        self._shown: tuple[str, Any] = (spec.doc, GRAY)
        self.visible = True
        self.place(column if column is not None else master, row)

    def place(self, column: Any, row: int) -> None:
        """Grid the row's parts on `row` of `column` (a frame inside the form: the form's one or two columns)."""
        where = {} if column is self.label.master else {"in_": column}
        self.label.grid(row=row, column=0, sticky="nw", padx=(12, 8), pady=3, **where)
        self.input.grid(row=row, column=1, sticky="w", padx=4, pady=3, **where)
        self.note.grid(row=row, column=2, sticky="w", padx=(8, 12), pady=3, **where)
        if not self.visible:
            for part in (self.label, self.input, self.note):
                part.grid_remove()

    def refresh(self) -> None:
        shows = getattr(self.source, "shows", None)  # a source may hide fields (another optimizer's options)
        self.set_visible(shows is None or shows(self.key))
        self.input.refresh()
        error = self.source.error(self.key)
        auto = getattr(self.source, "auto_note", lambda _key: "")(self.key)  # memory_preset AUTO set this field
        shown = (error, RED) if error else (auto, BLUE) if auto else (self.doc, GRAY)
        if shown != self._shown:
            self.note.configure(text=shown[0], text_color=shown[1])
            self._shown = shown

    def set_visible(self, visible: bool) -> None:
        if visible == self.visible:
            return
        for part in (self.label, self.input, self.note):  # grid() again restores the remembered placement
            part.grid() if visible else part.grid_remove()
        self.visible = visible

    @property
    def error_text(self) -> str:
        return self._shown[0] if self._shown[1] == RED else ""

    @property
    def note_text(self) -> str:
        return self._shown[0]


NOTE_WRAP, NOTE_WRAP_TWO_COLUMNS = 520, 380
TWO_COLUMNS_FROM = 1500  # a form at least this wide (a 1920 px window) lays its sections out in two columns


class FieldForm(ctk.CTkFrame):
    """Titled sections of generated field rows for one source; in two columns when the form is wide enough (the
    sections in order, down the left column, then the right; one long section is split in two)."""

    def __init__(self, master: Any, source: Any, sections: Iterable[Section], **kwargs: Any):
        super().__init__(master, fg_color="transparent", **kwargs)
        self.rows: dict[str, FieldRow] = {}
        self.titles: list[tuple[ctk.CTkLabel, tuple[str, ...]]] = []
        # the column frames first: the rows, gridded into them, must lie above them
        self.columns = [ctk.CTkFrame(self, fg_color="transparent") for _ in range(2)]
        for column in self.columns:
            column.grid_columnconfigure(2, weight=1)
        self.columns[0].grid(row=0, column=0, sticky="new")
        self.grid_columnconfigure(0, weight=1)
        self.blocks: list[tuple[ctk.CTkLabel | None, list[str]]] = []  # (title, keys) in order
        for section in sections:
            if not section.keys:
                continue
            title = None
            if section.title:
                title = ctk.CTkLabel(self, text=section.title, font=bold_font(), anchor="w")
                self.titles.append((title, section.keys))
            for key in section.keys:
                self.rows[key] = FieldRow(self, source, key, 0, column=self.columns[0])
            self.blocks.append((title, list(section.keys)))
        self.two_columns = False
        self._layout()
        self.bind("<Configure>", self._resized, add="+")

    def _resized(self, event: Any) -> None:
        if (event.width >= TWO_COLUMNS_FROM) != self.two_columns:
            self.two_columns = not self.two_columns
            self._layout()

    def _layout(self) -> None:
        """Place the sections in one column, or two balanced by the rows shown now (a hidden row keeps its place in
        its section: it is shown there when it comes to apply)."""
        def weight(keys: list[str]) -> int:
            return sum(1 for key in keys if self._shown(key))

        blocks = self.blocks
        if self.two_columns and len(blocks) == 1 and weight(blocks[0][1]) > 6:  # one long section: split it
            title, keys = blocks[0]
            half = next(i for i in range(len(keys) + 1) if weight(keys[:i]) >= (weight(keys) + 1) // 2)
            blocks = [(title, keys[:half]), (None, keys[half:])]
        total = sum(weight(keys) + (title is not None) for title, keys in blocks)
        placed, column, rows = 0, 0, [0, 0]
        for title, keys in blocks:
            size = weight(keys) + (title is not None)
            if self.two_columns and column == 0 and placed and placed + size / 2 > total / 2:
                column = 1
            frame = self.columns[column]
            if title is not None:
                title.grid(in_=frame, row=rows[column], column=0, columnspan=3, sticky="w", padx=8,
                           pady=(12 if rows[column] else 4, 2))
                rows[column] += 1
            for key in keys:
                self.rows[key].place(frame, rows[column])
                rows[column] += 1
            placed += size
        if self.two_columns and rows[1]:
            self.columns[1].grid(row=0, column=1, sticky="new")
            self.grid_columnconfigure(1, weight=1, uniform="half")
            self.grid_columnconfigure(0, weight=1, uniform="half")
        else:
            self.columns[1].grid_forget()
            self.grid_columnconfigure(1, weight=0, uniform="")
            self.grid_columnconfigure(0, weight=1, uniform="")
        wrap = NOTE_WRAP_TWO_COLUMNS if self.two_columns else NOTE_WRAP
        for field_row in self.rows.values():
            if field_row.note.cget("wraplength") != wrap:
                field_row.note.configure(wraplength=wrap)
        self._show_titles()

    def _shown(self, key: str) -> bool:
        shows = getattr(self.rows[key].source, "shows", None)  # other optimizers' options take no room
        return shows is None or shows(key)

    def refresh(self) -> None:
        for field_row in self.rows.values():
            field_row.refresh()
        self._show_titles()

    def _show_titles(self) -> None:
        for title, keys in self.titles:  # a section none of whose fields apply (VACE on a T2V base) goes too
            if any(self.rows[key].visible for key in keys) != bool(title.winfo_manager()):
                title.grid() if any(self.rows[key].visible for key in keys) else title.grid_remove()


def scrollable(master: Any) -> ctk.CTkScrollableFrame:
    """A scrollable frame filling `master` (every tab's body)."""
    frame = ctk.CTkScrollableFrame(master, fg_color="transparent")
    frame.pack(fill="both", expand=True)
    frame.grid_columnconfigure(0, weight=1)
    return frame


def button(master: Any, text: str, command: Callable[[], Any], width: int = 110, **kwargs: Any) -> ctk.CTkButton:
    return ctk.CTkButton(master, text=text, command=command, width=width, **kwargs)


def small_button(master: Any, text: str, command: Callable[[], Any], width: int = 28, **kwargs: Any) -> ctk.CTkButton:
    return ctk.CTkButton(master, text=text, command=command, width=width, **kwargs)
