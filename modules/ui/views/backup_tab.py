"""Backup: schedule, rolling count, "backup now" while training, resuming from the last backup."""
from __future__ import annotations

import customtkinter as ctk

from modules.ui.views.base_tab import BaseTab
from modules.ui.views.widgets import GRAY, button


class BackupTab(BaseTab):
    name = "backup"

    def build(self) -> None:
        self.config_form()
        bar = self.place(ctk.CTkFrame(self.body, fg_color="transparent"), padx=12, pady=8)
        self.backup_button = button(bar, "Backup now", self._backup_now)
        self.backup_button.pack(side="left")
        self.latest = ctk.CTkLabel(bar, text="", text_color=GRAY, anchor="w")
        self.latest.pack(side="left", padx=12)

    def _backup_now(self) -> None:
        if self.app.training.backup_now():
            self.ui.refresh_status()

    def refresh(self) -> None:
        super().refresh()
        self.backup_button.configure(state="normal" if self.app.training.running else "disabled")
        latest = self.app.latest_backup()
        self.latest.configure(text=f"latest backup: {latest}" if latest else "no backup in this workspace yet")
