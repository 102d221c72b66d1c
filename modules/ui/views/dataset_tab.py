"""Dataset: the concepts as compact cards with a thumbnail; the chosen concept's clips, each playing beside its
caption (edited and saved here, atomically) and its element images. Choosing is DatasetViewController's (no Tk);
the video plays as in the samples tab: decoded once, pasted frame after frame by an `after` timer."""
from __future__ import annotations

import time
import tkinter as tk
from pathlib import Path
from typing import Any

import customtkinter as ctk
from PIL import Image, ImageTk

from modules.dataLoader.errors import DataError
from modules.dataLoader.video_io import read_image, read_video_frames
from modules.ui.controllers.dataset_view import ClipEntry, DatasetViewController
from modules.ui.controllers.sample_gallery import Playback, fit_size
from modules.ui.views.base_tab import BaseTab
from modules.ui.views.tools_tab import thumbnail
from modules.ui.views.widgets import GRAY, RED, bold_font, button, small_font
from modules.util.errors import UserError

PLAYER_SIZE = (480, 320)
CARD_THUMB = 72
TEXT = ctk.ThemeManager.theme["CTkLabel"]["text_color"]
ELEMENT_SIZE = 110
MAX_CLIPS = 300  # listed per concept


class DatasetTab(BaseTab):
    name = "dataset"

    def build(self) -> None:
        app = self.app
        if not hasattr(app, "dataset_view"):
            app.dataset_view = DatasetViewController(app.config, app.dataset)
        self.view: DatasetViewController = app.dataset_view
        bar = self.place(ctk.CTkFrame(self.body, fg_color="transparent"), padx=12, pady=(8, 2))
        ctk.CTkLabel(bar, text="Concepts", font=bold_font()).pack(side="left")
        button(bar, "Reload", self.reload, width=80).pack(side="left", padx=8)
        self.cards_frame = self.place(ctk.CTkFrame(self.body, fg_color="transparent"), padx=12, pady=2)
        main = self.place(ctk.CTkFrame(self.body, fg_color="transparent"), padx=12, pady=6)
        self.clip_list = ctk.CTkScrollableFrame(main, width=220, height=PLAYER_SIZE[1] + 140)
        self.clip_list.grid(row=0, column=0, sticky="ns", padx=(0, 10))
        right = ctk.CTkFrame(main, fg_color="transparent")
        right.grid(row=0, column=1, sticky="nw")
        self.player = tk.Label(right, borderwidth=0, highlightthickness=0, text="choose a concept")
        self.player.grid(row=0, column=0, sticky="nw")
        self.player.bind("<Button-1>", lambda _e: self.playback.toggle(time.monotonic()))
        self.clip_label = ctk.CTkLabel(right, text="", text_color=GRAY, font=small_font(), anchor="w")
        self.clip_label.grid(row=1, column=0, sticky="w")
        side = ctk.CTkFrame(right, fg_color="transparent")
        side.grid(row=0, column=1, rowspan=2, sticky="nw", padx=(12, 0))
        ctk.CTkLabel(side, text="Caption", font=bold_font(12), anchor="w").pack(anchor="w")
        self.caption_box = ctk.CTkTextbox(side, width=380, height=150, wrap="word")
        self.caption_box.pack(anchor="w")
        save_bar = ctk.CTkFrame(side, fg_color="transparent")
        save_bar.pack(anchor="w", pady=4)
        self.save_button = button(save_bar, "Save caption", self.save_caption, width=120)
        self.save_button.pack(side="left")
        self.save_label = ctk.CTkLabel(save_bar, text="", text_color=GRAY, font=small_font())
        self.save_label.pack(side="left", padx=8)
        ctk.CTkLabel(side, text="Elements", font=bold_font(12), anchor="w").pack(anchor="w", pady=(8, 0))
        self.elements_frame = ctk.CTkFrame(side, fg_color="transparent")
        self.elements_frame.pack(anchor="w")
        self.entries: list[ClipEntry] = []
        self.entry: ClipEntry | None = None
        self.frames: list[Image.Image] = []
        self.playback = Playback(0, 16.0)
        self._photo: ImageTk.PhotoImage | None = None
        self._card_photos: list[ImageTk.PhotoImage] = []
        self._element_photos: list[ImageTk.PhotoImage] = []
        self._shown_index = -1
        self._timer: str | None = None
        self.reload()
        self._tick()

    # --- concepts ---------------------------------------------------------------------------------------------
    def reload(self) -> None:
        for child in self.cards_frame.winfo_children():
            child.destroy()
        self._card_photos = []
        self.cards = self.view.cards()
        if not self.cards:
            ctk.CTkLabel(self.cards_frame, text="No concepts yet: add a folder in the concepts tab (or an E2V dataset)",
                         text_color=GRAY).pack(anchor="w")
        for column, card in enumerate(self.cards):
            cell = ctk.CTkFrame(self.cards_frame, corner_radius=8, border_width=1)
            cell.grid(row=0, column=column, padx=4, pady=2, sticky="n")
            image = thumbnail(card.thumbnail, CARD_THUMB) if card.thumbnail else None
            if image is not None:
                photo = ImageTk.PhotoImage(image, master=cell)
                self._card_photos.append(photo)
                picture = tk.Label(cell, image=photo, borderwidth=0)
                picture.pack(padx=4, pady=(4, 0))
                picture.bind("<Button-1>", lambda _e, c=card: self.choose(c.folder))
            note = card.problem or f"{card.clips} clip(s)"
            ctk.CTkButton(cell, text=f"{card.name}\n{note}", width=120, fg_color="transparent",
                          text_color=RED if card.problem else TEXT, border_width=0,
                          command=lambda c=card: self.choose(c.folder)).pack(padx=4, pady=4)
        if self.view.selected is not None:
            self.choose(self.view.selected, keep_clip=True)
        elif any(card.clips for card in self.cards):  # open on the first concept that has clips
            self.choose(next(card.folder for card in self.cards if card.clips))

    def choose(self, folder: Path, keep_clip: bool = False) -> None:
        index = self.view.clip_index if keep_clip else 0
        self.entries = self.view.select(folder)[:MAX_CLIPS]
        for child in self.clip_list.winfo_children():
            child.destroy()
        for i, entry in enumerate(self.entries):
            ctk.CTkButton(self.clip_list, text=entry.name, anchor="w", fg_color="transparent", border_width=0,
                          text_color=TEXT, command=lambda i=i: self.show_clip(i)).pack(fill="x")
        if self.entries:
            self.show_clip(min(index, len(self.entries) - 1))
        else:
            self.entry, self.frames = None, []
            self.player.configure(image="", text="no clips in this folder")

    # --- one clip ---------------------------------------------------------------------------------------------
    def show_clip(self, index: int) -> None:
        self.view.clip_index = index
        self.entry = entry = self.entries[index]
        self.caption_box.delete("1.0", "end")
        self.caption_box.insert("1.0", self.view.caption(entry))
        self.save_label.configure(text="" if entry.caption_path.exists() else "no caption yet", text_color=GRAY)
        self._load_video(entry)
        self._show_elements(entry)

    def _load_video(self, entry: ClipEntry) -> None:
        try:
            frames, fps = read_video_frames(entry.media)
        except DataError as e:
            self.frames, self._photo = [], None
            self.player.configure(image="", text=f"cannot play {entry.name}: {e.reason}")
            return
        height, width = frames.shape[1:3]
        size = fit_size(width, height, *PLAYER_SIZE)
        self.frames = [Image.fromarray(f).resize(size, Image.BILINEAR) for f in frames]
        self.playback = Playback(len(self.frames), fps or 16.0)
        self.playback.seek(0, time.monotonic())
        self._photo = ImageTk.PhotoImage(self.frames[0], master=self.player)
        self.player.configure(image=self._photo, text="")
        self._shown_index = 0
        self.clip_label.configure(text=f"{entry.name} · {len(frames)} frames · {width}x{height}"
                                       f"{' · mask' if entry.mask else ''} (click to pause)")

    def _tick(self) -> None:
        try:
            if self.frames and self._photo is not None and self.ui.tabview.get() == self.name \
                    and not self.playback.paused:
                index = self.playback.frame_at(time.monotonic())
                if index != self._shown_index:
                    self._photo.paste(self.frames[index])
                    self._shown_index = index
            self._timer = self.body.after(self.playback.delay_ms(), self._tick)
        except tk.TclError:  # the window is closing
            self._timer = None

    def _show_elements(self, entry: ClipEntry) -> None:
        for child in self.elements_frame.winfo_children():
            child.destroy()
        self._element_photos = []
        if not entry.elements:
            ctk.CTkLabel(self.elements_frame, text="none", text_color=GRAY, font=small_font()).pack(anchor="w")
        for column, (name, path) in enumerate(entry.elements.items()):
            cell = ctk.CTkFrame(self.elements_frame, fg_color="transparent")
            cell.grid(row=0, column=column, padx=3)
            try:
                image = Image.fromarray(read_image(path))
                image = image.resize(fit_size(image.width, image.height, ELEMENT_SIZE, ELEMENT_SIZE))
                photo = ImageTk.PhotoImage(image, master=cell)
                self._element_photos.append(photo)
                tk.Label(cell, image=photo, borderwidth=0).pack()
            except DataError as e:
                tk.Label(cell, text=e.reason, fg="red").pack()
            tk.Label(cell, text=f"{name}\n{path.name}", font=("TkDefaultFont", 8)).pack()

    def save_caption(self) -> None:
        if self.entry is None:
            return
        text = self.caption_box.get("1.0", "end")
        try:
            written = self.view.save_caption(self.entry, text)
        except UserError as e:
            self.save_label.configure(text=str(e), text_color=RED)
            return
        self.save_label.configure(text=f"saved {written.name}", text_color=GRAY)
        self.ui.set_status(f"caption saved: {written}")

    def close(self) -> None:
        if self._timer is not None:
            try:
                self.body.after_cancel(self._timer)
            except tk.TclError:
                pass
            self._timer = None
