"""Curves: the loss (raw and smoothed), the validation loss when there is one, and the learning rate, drawn on a
Tk canvas as the run logs them. The arithmetic (smoothing, ranges, ticks, pixels) is
modules/ui/controllers/curves.py — see there why this is a canvas of our own and not matplotlib; this view
only draws the charts it lays out.
"""
from __future__ import annotations

import tkinter as tk
from typing import Any

import customtkinter as ctk

from modules.ui.controllers.curves import DEFAULT_SMOOTHING, Chart, loss_chart, lr_chart, run_title
from modules.ui.views.base_tab import BaseTab
from modules.ui.views.widgets import GRAY, button, small_font

CANVAS_HEIGHT = 640
LOSS_SHARE = 0.6  # of the canvas height; the learning rate gets the rest
# (light, dark) colours per line style
STYLE_COLORS = {"raw": ("#90caf9", "#3f6b94"), "smooth": ("#1565c0", "#64b5f6"),
                "validation": ("#e65100", "#ffb74d"), "lr": ("#2e7d32", "#81c784")}
STYLE_WIDTHS = {"raw": 1, "smooth": 2, "validation": 2, "lr": 2}
INK = ("gray15", "gray85")
GRID = ("gray85", "gray25")
PAPER = ("white", "gray14")


class CurvesTab(BaseTab):
    name = "curves"

    def build(self) -> None:
        self.history = self.app.curves
        bar = self.place(ctk.CTkFrame(self.body, fg_color="transparent"), padx=12, pady=(8, 2))
        ctk.CTkLabel(bar, text="smoothing").pack(side="left")
        self.smoothing = DEFAULT_SMOOTHING
        self.smoothing_slider = ctk.CTkSlider(bar, from_=0, to=0.99, number_of_steps=99, width=200,
                                              command=self._smoothing_changed)
        self.smoothing_slider.set(self.smoothing)
        self.smoothing_slider.pack(side="left", padx=6)
        self.smoothing_label = ctk.CTkLabel(bar, text=f"{self.smoothing:.2f}", width=40)
        self.smoothing_label.pack(side="left")
        self.reload_button = button(bar, "Reload", self._reload, width=80)
        self.reload_button.pack(side="left", padx=12)
        self.run_label = ctk.CTkLabel(bar, text="", font=small_font())  # whose curves these are
        self.run_label.pack(side="left", padx=(0, 8))
        self.summary_label = ctk.CTkLabel(bar, text="", font=small_font(), text_color=GRAY)
        self.summary_label.pack(side="left", padx=8)
        self.canvas = self.place(tk.Canvas(self.body, height=CANVAS_HEIGHT, highlightthickness=0,
                                           background=self._color(PAPER)), padx=12, pady=4)
        self.canvas.bind("<Configure>", lambda _e: self.redraw())
        self.note("The values the trainer logs to tensorboard (loss per optimizer step, the learning rate of the "
                  "first parameter group, loss/validation) for the run named above: every start of it (a resumed "
                  "run shows its whole history; the steps trained again after its backup replace the old ones), "
                  "and the values of the run this window trains as they are logged. Reload reads its tensorboard "
                  "folder again. TensorBoard (button below) has every series.")
        self.charts: list[Chart] = []  # what is drawn now (tests read it)
        self._drawn: tuple[Any, ...] = ()
        self.app.load_run_results()

    @staticmethod
    def _color(pair: tuple[str, str]) -> str:
        return pair[0] if ctk.get_appearance_mode() == "Light" else pair[1]

    def _smoothing_changed(self, value: float) -> None:
        self.smoothing = round(float(value), 2)
        self.smoothing_label.configure(text=f"{self.smoothing:.2f}")
        self.redraw()

    def _reload(self) -> None:
        self.app.load_run_results()
        self.redraw()

    def refresh(self) -> None:
        self.redraw()

    def redraw(self) -> None:
        width, height = self.canvas.winfo_width(), int(self.canvas.cget("height"))
        if width <= 1:  # not mapped yet: lay out at the requested width
            width = max(400, self.canvas.winfo_reqwidth())
        key = (self.history.version, self.history.run, self.smoothing, width, height)
        if key == self._drawn:
            return
        self._drawn = key
        loss_height = int(height * LOSS_SHARE)
        self.charts = [loss_chart(self.history, self.smoothing, width, loss_height),
                       lr_chart(self.history, width, height - loss_height)]
        canvas = self.canvas
        canvas.delete("all")
        canvas.configure(background=self._color(PAPER))
        top = 0
        for chart in self.charts:
            self._draw(chart, top)
            top += chart.height
        losses = self.history.points("loss")
        self.run_label.configure(text=run_title(self.history.run))
        self.summary_label.configure(text=f"{len(losses)} steps logged · last loss {losses[-1][1]:.4f}"
                                     if losses else "")

    def _draw(self, chart: Chart, top: int) -> None:
        canvas, box = self.canvas, chart.box
        ink, grid = self._color(INK), self._color(GRID)
        canvas.create_text(box.left, top + 6, text=chart.title, anchor="nw", fill=ink, font=("TkDefaultFont", 11, "bold"))
        canvas.create_rectangle(box.left, top + box.top, box.right, top + box.bottom, outline=grid)
        if not chart.lines:
            canvas.create_text((box.left + box.right) / 2, top + (box.top + box.bottom) / 2, text=chart.empty_text,
                               fill=self._color(GRAY))
            return
        for tick in chart.y_ticks:
            y = top + tick.pixel
            canvas.create_line(box.left, y, box.right, y, fill=grid)
            canvas.create_text(box.left - 6, y, text=tick.label, anchor="e", fill=ink, font=("TkDefaultFont", 9))
        for tick in chart.x_ticks:
            canvas.create_line(tick.pixel, top + box.top, tick.pixel, top + box.bottom, fill=grid)
            canvas.create_text(tick.pixel, top + box.bottom + 4, text=tick.label, anchor="n", fill=ink,
                               font=("TkDefaultFont", 9))
        for line in chart.lines:  # raw first, the smoothed line and the validation points over it
            color = self._color(STYLE_COLORS[line.style])
            points = [(x, y + top) for x, y in line.pixels]
            if len(points) == 1 or line.style == "validation":  # dots: a single value, or sparse measurements
                for x, y in points:
                    canvas.create_oval(x - 3, y - 3, x + 3, y + 3, fill=color, outline=color, tags=(line.style,))
            if len(points) > 1:
                canvas.create_line(*[c for point in points for c in point], fill=color,
                                   width=STYLE_WIDTHS[line.style], tags=(line.style,))
        legend_x = box.right
        for line in reversed(chart.lines):
            text = canvas.create_text(legend_x, top + 8, text=line.label, anchor="ne",
                                      fill=self._color(STYLE_COLORS[line.style]), font=("TkDefaultFont", 10))
            legend_x = canvas.bbox(text)[0] - 16
