"""A small message window (errors with their one-line reason, notices). Not modal: the main window
keeps polling the training thread while it is open."""
from __future__ import annotations

from typing import Any

import customtkinter as ctk

from modules.ui.views.widgets import RED


class MessageDialog(ctk.CTkToplevel):
    def __init__(self, master: Any, title: str, message: str, error: bool = True):
        super().__init__(master)
        self.title(title)
        self.message = message
        self.resizable(False, False)
        self.transient(master)
        ctk.CTkLabel(self, text=title, font=ctk.CTkFont(size=15, weight="bold"),
                     text_color=RED if error else None).pack(padx=20, pady=(16, 4), anchor="w")
        ctk.CTkLabel(self, text=message, wraplength=520, justify="left", anchor="w").pack(padx=20, pady=4, anchor="w")
        self.ok = ctk.CTkButton(self, text="OK", width=90, command=self.destroy)
        self.ok.pack(padx=20, pady=(8, 16), anchor="e")
        self.bind("<Return>", lambda _e: self.destroy())
        self.bind("<Escape>", lambda _e: self.destroy())
        self.after(50, self.lift)
