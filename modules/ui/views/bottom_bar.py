"""Bottom bar: progress (step and epoch), loss, ETA, status, what blocks Start, and the buttons."""
from __future__ import annotations

from typing import Any

import customtkinter as ctk

from modules.ui.views.widgets import GRAY, RED, button, small_font
from modules.ui.views.window import Window

START_COLOR, STOP_COLOR, IDLE_COLOR = "#2e7d32", "#c62828", ("gray70", "gray35")


class BottomBar(ctk.CTkFrame):
    def __init__(self, master: Any, ui: Window):
        super().__init__(master, corner_radius=0)
        self.ui, self.app = ui, ui.app
        self.grid_columnconfigure(1, weight=1)
        self.progress = ctk.CTkProgressBar(self, width=240)
        self.progress.grid(row=0, column=0, padx=12, pady=(10, 2), sticky="w")
        self.progress.set(0)
        stats = ctk.CTkFrame(self, fg_color="transparent")
        stats.grid(row=0, column=1, sticky="w", pady=(10, 2))
        self.step_label = ctk.CTkLabel(stats, text="", width=210, anchor="w")
        self.step_label.pack(side="left", padx=4)
        self.loss_label = ctk.CTkLabel(stats, text="", width=110, anchor="w")
        self.loss_label.pack(side="left", padx=4)
        self.eta_label = ctk.CTkLabel(stats, text="", width=100, anchor="w")
        self.eta_label.pack(side="left", padx=4)
        buttons = ctk.CTkFrame(self, fg_color="transparent")
        buttons.grid(row=0, column=2, padx=8, pady=(6, 0), sticky="e")
        self.load_button = button(buttons, "Load config…", self.ui.load_config, width=110)
        self.load_button.pack(side="left", padx=3)
        self.export_button = button(buttons, "Export config…", self.ui.export_config, width=120)
        self.export_button.pack(side="left", padx=3)
        self.tensorboard_button = button(buttons, "TensorBoard", self.ui.open_tensorboard, width=110)
        self.tensorboard_button.pack(side="left", padx=3)
        self.start_button = button(buttons, "Start", self.ui.start_training, width=90, fg_color=START_COLOR,
                                   hover_color="#1b5e20")
        self.start_button.pack(side="left", padx=3)
        self.stop_button = button(buttons, "Stop", self.ui.stop_training, width=90, fg_color=STOP_COLOR,
                                  hover_color="#8e0000")
        self.stop_button.pack(side="left", padx=3)
        self.status_label = ctk.CTkLabel(self, text="", anchor="w", justify="left", wraplength=640, font=small_font(),
                                         text_color=GRAY)
        self.status_label.grid(row=1, column=0, columnspan=2, padx=12, pady=(0, 8), sticky="w")
        # The estimated peak GPU memory of the config as it is (scripts/estimate_vram.py's figure), under Start:
        # in the row of the step counters it had no room at the default 1280 px and was cut off. Its suggestion
        # (when over the GPU) wraps instead.
        self.vram_label = ctk.CTkLabel(self, text="", anchor="e", justify="right", wraplength=540, font=small_font(),
                                       text_color=GRAY)
        self.vram_label.grid(row=1, column=2, padx=12, pady=(0, 8), sticky="ne")
        self._shown: tuple[Any, ...] = ()

    def refresh(self) -> None:
        state = self.app.training.state
        can_start, _ = self.app.can_start()
        status, is_error = self.app.status_line()
        color = RED if is_error else GRAY
        shown = (state.fraction, state.progress_text(), state.loss_text(), state.eta_text(), status, color,
                 can_start, state.running, state.phase)
        if shown == self._shown:
            return
        self._shown = shown
        self.progress.set(state.fraction)
        self.step_label.configure(text=state.progress_text())
        self.loss_label.configure(text=state.loss_text())
        self.eta_label.configure(text=state.eta_text())
        self.status_label.configure(text=status, text_color=color)
        can_stop = state.running and state.phase != "stopping"
        self.start_button.configure(state="normal" if can_start else "disabled",
                                    fg_color=START_COLOR if can_start else IDLE_COLOR)
        self.stop_button.configure(state="normal" if can_stop else "disabled",
                                   fg_color=STOP_COLOR if can_stop else IDLE_COLOR)
        self.load_button.configure(state="disabled" if state.running else "normal")

    def refresh_vram(self) -> None:
        text = self.app.vram.text()
        if self.vram_label.cget("text") != text:
            self.vram_label.configure(text=text)
            self.ui.schedule_refresh()  # a new plan: the memory switches show what AUTO chose

    @property
    def status_text(self) -> str:
        return self.status_label.cget("text")
