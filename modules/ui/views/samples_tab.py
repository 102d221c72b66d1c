"""Samples: the viewer of what the run samples — the video playing, its contact sheet, its prompt, step and (E2V)
element images, and the same sample at every earlier step to compare. Choosing and browsing is
`SampleGallery`'s (modules/ui/controllers/sample_gallery.py); this view decodes and draws.

Playback decodes the video with the project's reader (`read_video_frames`: PyAV for mp4, Pillow for GIF / WebP,
the same decoder the data loader trusts) into PIL images once, and a Tk `after` timer pastes frame after frame
into one PhotoImage — no external player.
"""
from __future__ import annotations

import logging
import time
import tkinter as tk
from pathlib import Path
from typing import Any

import customtkinter as ctk
from PIL import Image, ImageTk

from modules.dataLoader.errors import DataError
from modules.dataLoader.video_io import read_image, read_video_frames
from modules.ui.controllers.sample_gallery import (
    Playback,
    fit_size,
    record_title,
    step_key,
    step_label,
)
from modules.ui.views.base_tab import BaseTab
from modules.ui.views.widgets import GRAY, RED, bold_font, button, small_button, small_font
from modules.util.sample_record import SampleRecord

logger = logging.getLogger(__name__)

PLAYER_SIZE = (640, 400)  # the largest the playing video is drawn
SHEET_WIDTH = 1160  # the contact sheet's width at most
SHEET_HEIGHT = 150
HISTORY_HEIGHT = 60  # one row per earlier step in "across steps"
HISTORY_ROWS = 8  # the newest steps shown there
ELEMENT_SIZE = 120


def _mode(color: Any) -> str:
    """A ctk (light, dark) colour pair as the one colour of the current appearance mode, for plain Tk widgets."""
    if isinstance(color, (list, tuple)):
        color = color[0] if ctk.get_appearance_mode() == "Light" else color[1]
    return str(color)


def _background(ui: Any) -> str:
    """The colour of the tab pages, for the plain Tk labels that show images on them."""
    return _mode(ui.tabview.cget("fg_color"))


class SamplesTab(BaseTab):
    name = "samples"

    def build(self) -> None:
        self.gallery = self.app.gallery
        bar = self.place(ctk.CTkFrame(self.body, fg_color="transparent"), padx=12, pady=(8, 2))
        self.previous_button = small_button(bar, "◀", self._previous, width=32)
        self.previous_button.pack(side="left")
        self.step_menu = ctk.CTkOptionMenu(bar, values=["—"], width=150, command=self._step_chosen)
        self.step_menu.pack(side="left", padx=4)
        self.next_button = small_button(bar, "▶", self._next, width=32)
        self.next_button.pack(side="left")
        self.index_menu = ctk.CTkOptionMenu(bar, values=["—"], width=360, command=self._index_chosen)
        self.index_menu.pack(side="left", padx=(12, 4))
        self.play_button = button(bar, "Pause", self._toggle_play, width=80)
        self.play_button.pack(side="left", padx=4)
        self.reload_button = button(bar, "Reload", self._reload, width=80)
        self.reload_button.pack(side="left", padx=4)
        self.follow_label = ctk.CTkLabel(bar, text="", font=small_font(), text_color=GRAY)
        self.follow_label.pack(side="left", padx=8)

        self.title_label = self.place(ctk.CTkLabel(self.body, text="", anchor="w", font=bold_font(13)), padx=12)
        self.prompt_label = self.place(ctk.CTkLabel(self.body, text="", anchor="w", justify="left", wraplength=1100),
                                       padx=12)

        media = self.place(ctk.CTkFrame(self.body, fg_color="transparent"), padx=12, pady=4)
        self._bg = _background(self.ui)
        self.player = tk.Label(media, bg=self._bg, borderwidth=0, highlightthickness=0)
        self.player.grid(row=0, column=0, sticky="nw")
        self.player.bind("<Button-1>", lambda _e: self._toggle_play())
        side = ctk.CTkFrame(media, fg_color="transparent")
        side.grid(row=0, column=1, sticky="nw", padx=16)
        self.frame_label = ctk.CTkLabel(side, text="", anchor="w", font=small_font(), text_color=GRAY)
        self.frame_label.pack(anchor="w")
        self.elements_title = ctk.CTkLabel(side, text="", anchor="w", font=bold_font(12))
        self.elements_title.pack(anchor="w", pady=(8, 2))
        self.elements_frame = tk.Frame(side, bg=self._bg)
        self.elements_frame.pack(anchor="w")
        self.files_label = ctk.CTkLabel(side, text="", anchor="w", justify="left", font=small_font(),
                                        text_color=GRAY, wraplength=420)
        self.files_label.pack(anchor="w", pady=(8, 0))

        self.sheet_title = self.place(ctk.CTkLabel(self.body, text="", anchor="w", font=bold_font(12)), padx=12,
                                      pady=(8, 0))
        self.sheet = self.place(tk.Label(self.body, bg=self._bg, borderwidth=0, highlightthickness=0),
                                sticky="w", padx=12)
        self.history_title = self.place(ctk.CTkLabel(self.body, text="", anchor="w", font=bold_font(12)), padx=12,
                                        pady=(10, 0))
        self.history_frame = self.place(tk.Frame(self.body, bg=self._bg), sticky="w", padx=12)
        self.empty_label = self.place(ctk.CTkLabel(self.body, text="", anchor="w", justify="left", wraplength=1000,
                                                   text_color=GRAY), padx=12, pady=8)

        self.shown_record: SampleRecord | None = None  # what the viewer shows (tests read these)
        self.shown_frame: Image.Image | None = None  # the frame on screen now
        self.frames: list[Image.Image] = []  # the shown video, decoded and sized for the player
        self.sheet_image: Image.Image | None = None
        self.playback = Playback(0, 16.0)
        self._photo: ImageTk.PhotoImage | None = None
        self._element_photos: list[ImageTk.PhotoImage] = []  # kept alive while shown
        self._sheet_photo: ImageTk.PhotoImage | None = None
        self._history_photos: list[ImageTk.PhotoImage] = []
        self._history_key: tuple[Any, ...] = ()
        self._shown_version = -1
        self._shown_index = -1
        self._timer: str | None = None
        self.app.load_run_results()
        self._tick()

    # --- user actions ---------------------------------------------------------------------------------
    def _previous(self) -> None:
        if self.gallery.previous_step():
            self.refresh()

    def _next(self) -> None:
        if self.gallery.next_step():
            self.refresh()

    def _step_chosen(self, text: str) -> None:
        step = self._menu_steps.get(text)
        if step is not None:
            self.gallery.select_step(step)
            self.refresh()

    def _index_chosen(self, text: str) -> None:
        index = self._menu_indexes.get(text)
        if index is not None:
            self.gallery.select_index(index)
            self.refresh()

    def _toggle_play(self) -> None:
        self.playback.toggle(time.monotonic())
        self.play_button.configure(text="Play" if self.playback.paused else "Pause")

    def _reload(self) -> None:
        self.app.load_run_results()
        self.ui.refresh()

    # --- drawing -----------------------------------------------------------------------------------------
    def refresh(self) -> None:
        folder = self.app.samples_folder()
        if folder != self.gallery.folder and not self.app.training.running:  # another workspace
            self.app.load_run_results()
        if self.gallery.version == self._shown_version:
            return
        self._shown_version = self.gallery.version
        self._refresh_menus()
        record = self.gallery.current()
        self.empty_label.configure(text="" if record is not None else (
            f"No samples in {folder} yet. Add prompts in the sampling tab: the run writes them every "
            "sample_after (and at the end), or press Sample now while it trains; each appears here as it is written."))
        if record is not None and record != self.shown_record:
            self._show(record)
        elif record is not None:
            self._show_history(record)  # a new step of this sample while looking at an earlier one
        else:
            self._clear()

    def _refresh_menus(self) -> None:
        gallery = self.gallery
        steps = gallery.steps()
        self._menu_steps = {step_label(step): step for step in steps}
        self.step_menu.configure(values=list(self._menu_steps) or ["—"])
        self.step_menu.set(step_label(gallery.step) if gallery.step is not None else "—")
        records = {r.index: r for r in gallery.records if step_key(r) == gallery.step}
        self._menu_indexes = {f"{i}: {_short(records[i].prompt, 44)}": i for i in gallery.indexes()}
        self.index_menu.configure(values=list(self._menu_indexes) or ["—"])
        current = next((text for text, i in self._menu_indexes.items() if i == gallery.index), "—")
        self.index_menu.set(current)
        position = steps.index(gallery.step) if gallery.step in steps else -1
        self.previous_button.configure(state="normal" if position > 0 else "disabled")
        self.next_button.configure(state="normal" if 0 <= position < len(steps) - 1 else "disabled")
        newest = bool(steps) and gallery.step == steps[-1]
        self.follow_label.configure(text=f"{_count(len(gallery), 'sample')} at {_count(len(steps), 'step')}" +
                                    (" · new samples are shown as they are written" if newest else
                                     " · ▶ to the newest"))

    def _show(self, record: SampleRecord) -> None:
        self.shown_record = record
        self.title_label.configure(text=record_title(record))
        prompt = record.prompt or "(empty prompt)"
        negative = f"\nnegative: {record.negative_prompt}" if record.negative_prompt else ""
        self.prompt_label.configure(text=f"prompt: {prompt}{negative}")
        self._load_video(record)
        self._show_elements(record)
        self._show_sheet(record)
        self._show_history(record)

    def _clear(self) -> None:
        self.shown_record, self.shown_frame, self.frames = None, None, []
        for label in (self.title_label, self.prompt_label, self.frame_label, self.elements_title, self.files_label,
                      self.sheet_title, self.history_title):
            label.configure(text="")
        self.player.configure(image="", text="")
        self.sheet.configure(image="")
        self._photo = self._sheet_photo = None
        for child in (*self.elements_frame.winfo_children(), *self.history_frame.winfo_children()):
            child.destroy()
        self._element_photos, self._history_photos, self._history_key = [], [], ()

    def _load_video(self, record: SampleRecord) -> None:
        try:
            frames, _ = read_video_frames(record.video)
        except DataError as e:
            self.frames, self.shown_frame, self._photo = [], None, None
            self.player.configure(image="", text=f"cannot play {record.video.name}: {e.reason}", fg=_mode(RED))
            return
        height, width = frames.shape[1:3]
        size = fit_size(width, height, *PLAYER_SIZE)
        resample = Image.NEAREST if size[0] >= 2 * width else Image.BILINEAR  # tiny samples stay crisp
        self.frames = [Image.fromarray(frame).resize(size, resample) for frame in frames]
        self.playback = Playback(len(self.frames), record.fps, paused=self.playback.paused)
        self.playback.seek(0, time.monotonic())
        self._photo = ImageTk.PhotoImage(self.frames[0], master=self.player)
        self.player.configure(image=self._photo, text="")
        self._draw_frame(0)

    def _draw_frame(self, index: int) -> None:
        if not self.frames or self._photo is None:
            return
        self.shown_frame = self.frames[index]
        self._photo.paste(self.shown_frame)
        self._shown_index = index
        self.frame_label.configure(text=f"frame {index + 1}/{len(self.frames)} · {self.playback.fps:g} fps · "
                                        f"{self.shown_record.video.name} (click to pause)")

    def _tick(self) -> None:
        """The playback timer: the next frame, only while this tab is the one shown."""
        try:
            if self.frames and self.ui.tabview.get() == self.name and not self.playback.paused:
                index = self.playback.frame_at(time.monotonic())
                if index != self._shown_index:
                    self._draw_frame(index)
            self._timer = self.body.after(self.playback.delay_ms(), self._tick)
        except tk.TclError:  # the window is closing
            self._timer = None

    def _image(self, master: Any, image: Image.Image, keep: list[ImageTk.PhotoImage]) -> tk.Label:
        photo = ImageTk.PhotoImage(image, master=master)
        keep.append(photo)
        return tk.Label(master, image=photo, bg=self._bg, borderwidth=0, highlightthickness=0)

    def _text(self, master: Any, text: str, color: tuple[str, str] = GRAY, bold: bool = False) -> tk.Label:
        """A plain Tk label. The cells rebuilt while a run goes are plain Tk widgets with a font tuple: a CTkLabel
        makes a CTkFont, and a font collected later on the training thread runs Tk's __del__ there (a stall)."""
        return tk.Label(master, text=text, bg=self._bg, fg=_mode(color), anchor="w", justify="left",
                        font=("TkDefaultFont", 9, "bold" if bold else "normal"))

    def _show_elements(self, record: SampleRecord) -> None:
        for child in self.elements_frame.winfo_children():
            child.destroy()
        self._element_photos = []
        inputs = [("image", record.image)] if record.image else []
        inputs += [(f"element {i}", path) for i, path in enumerate(record.elements)]
        self.elements_title.configure(text="E2V element images" if record.elements else
                                      ("first-frame image" if record.image else ""))
        for column, (what, path) in enumerate(inputs):
            cell = tk.Frame(self.elements_frame, bg=self._bg)
            cell.grid(row=0, column=column, padx=(0, 8), sticky="n")
            try:
                image = Image.fromarray(read_image(path))
                image = image.resize(fit_size(image.width, image.height, ELEMENT_SIZE, ELEMENT_SIZE, 4.0))
                self._image(cell, image, self._element_photos).pack()
            except DataError as e:
                self._text(cell, f"({e.reason})", RED).pack()
            self._text(cell, f"{what}: {Path(path).name}").pack()
        self.files_label.configure(text=f"video: {record.video}\ncontact sheet: {record.contact_sheet.name}")

    def _show_sheet(self, record: SampleRecord) -> None:
        self.sheet_image = None
        try:
            sheet = Image.open(record.contact_sheet).convert("RGB")
        except OSError:
            self.sheet_title.configure(text=f"contact sheet: {record.contact_sheet.name} is missing")
            self.sheet.configure(image="")
            return
        title = "contact sheet (reference frames, then generated frames)" if record.elements else "contact sheet"
        self.sheet_title.configure(text=title)
        self.sheet_image = sheet.resize(fit_size(sheet.width, sheet.height, SHEET_WIDTH, SHEET_HEIGHT, 4.0),
                                        Image.NEAREST if sheet.height < SHEET_HEIGHT // 2 else Image.BILINEAR)
        self._sheet_photo = ImageTk.PhotoImage(self.sheet_image, master=self.sheet)
        self.sheet.configure(image=self._sheet_photo)

    def _show_history(self, record: SampleRecord) -> None:
        """The same sample (its index) at the newest steps, one contact sheet each: click one to show that step."""
        history = self.gallery.history(record.index)[-HISTORY_ROWS:]
        key = (record, tuple(history))
        if key == self._history_key:
            return
        self._history_key = key
        for child in self.history_frame.winfo_children():
            child.destroy()
        self._history_photos = []
        self.history_title.configure(text=f"sample {record.index} across steps" if len(history) > 1 else "")
        if len(history) <= 1:
            return
        for row, earlier in enumerate(reversed(history)):
            step = step_key(earlier)
            label = self._text(self.history_frame, step_label(step), bold=earlier == record)
            label.grid(row=row, column=0, sticky="w", padx=(0, 12))
            try:
                sheet = Image.open(earlier.contact_sheet).convert("RGB")
            except OSError:
                continue
            sheet = sheet.resize(fit_size(sheet.width, sheet.height, SHEET_WIDTH - 100, HISTORY_HEIGHT, 4.0))
            image = self._image(self.history_frame, sheet, self._history_photos)
            image.grid(row=row, column=1, sticky="w", pady=2)
            for widget in (label, image):
                widget.bind("<Button-1>", lambda _e, s=step: self._step_chosen(step_label(s)))

    def close(self) -> None:
        """Stop the playback timer (the window is closing)."""
        if self._timer is not None:
            try:
                self.body.after_cancel(self._timer)
            except tk.TclError:
                pass
            self._timer = None


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _short(text: str, length: int) -> str:
    text = " ".join(str(text).split()) or "(empty prompt)"
    return text if len(text) <= length else text[:length - 1] + "…"
