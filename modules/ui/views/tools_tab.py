"""Tools: the data tools on a concept's folder — clips from footage, captions, E2V element images, masks — with
their inputs, progress, Cancel and the results as thumbnails. The logic is ToolsController's (no Tk); this view
draws it and polls the worker's events every 100 ms on the Tk thread."""
from __future__ import annotations

import gc
import tkinter as tk
from pathlib import Path
from typing import Any

import customtkinter as ctk
from PIL import Image, ImageTk

from modules.dataLoader.errors import DataError
from modules.dataLoader.video_io import IMAGE_EXTENSIONS, read_image, read_video_frames
from modules.ui.controllers.tools_controller import CHOICES, FIELDS, TOOLS, ToolsController
from modules.ui.views.base_tab import BaseTab
from modules.ui.views.widgets import GRAY, RED, Tooltip, button, pick_path, small_font
from modules.util.errors import UserError

THUMB = 96
MAX_THUMBS = 24
TOOL_NOTES = {
    "clips": "Cut footage into clips at its shot boundaries (PySceneDetect); the footage is only read.",
    "captions": "Caption each clip with Qwen3-VL; an E2V dataset's prompts name its elements. Existing captions "
                "are kept unless Overwrite.",
    "elements": "Make the E2V dataset's element images with SAM 3: each element found by its prompt, cut out on "
                "white; the background element is the scene without them.",
    "masks": "Make <clip>-masklabel.mp4 for masked training, white where SAM 3 finds the prompts.",
}


def thumbnail(path: Path, size: int = THUMB) -> Image.Image | None:
    """A small picture of a result: a still, a clip's first frame, or None (a caption, an unreadable file)."""
    try:
        if path.suffix.lower() in IMAGE_EXTENSIONS:
            pixels = read_image(path)
        elif path.suffix.lower() == ".txt":
            return None
        else:
            pixels = read_video_frames(path, max_frames=1)[0][0]
    except (DataError, OSError):
        return None
    image = Image.fromarray(pixels)
    image.thumbnail((size, size))
    return image


class ToolsTab(BaseTab):
    name = "tools"

    def build(self) -> None:
        app = self.app
        if not hasattr(app, "tools"):
            app.tools = ToolsController(app.config, app.dataset)
        self.tools: ToolsController = app.tools
        folder_bar = self.place(ctk.CTkFrame(self.body, fg_color="transparent"), padx=12, pady=(8, 2))
        ctk.CTkLabel(folder_bar, text="Folder").pack(side="left")
        self.folder_box = ctk.CTkComboBox(folder_bar, values=self.tools.folders() or [""], width=420,
                                          command=self._folder_chosen)
        self.folder_box.set(self.tools.folder)
        self.folder_box.pack(side="left", padx=8)
        self.folder_box.bind("<KeyRelease>", lambda _e: self._folder_chosen(self.folder_box.get()))
        ctk.CTkButton(folder_bar, text="…", width=30, command=self._pick_folder).pack(side="left")
        ctk.CTkLabel(folder_bar, text="a concept's folder or the E2V dataset's data_root", text_color=GRAY,
                     font=small_font()).pack(side="left", padx=8)
        self.tool_choice = self.place(ctk.CTkSegmentedButton(self.body, values=list(TOOLS), command=self._show_tool),
                                      padx=12, pady=4, sticky="w")
        self.tool_choice.set(TOOLS[0])
        self.note_label = self.note(TOOL_NOTES[TOOLS[0]])
        self.fields_frame = self.place(ctk.CTkFrame(self.body, fg_color="transparent"), padx=12)
        self.inputs: dict[str, Any] = {}
        run_bar = self.place(ctk.CTkFrame(self.body, fg_color="transparent"), padx=12, pady=6)
        self.run_button = button(run_bar, "Run", self._run, width=100)
        self.run_button.pack(side="left")
        self.cancel_button = button(run_bar, "Cancel", self.tools.cancel, width=100, state="disabled")
        self.cancel_button.pack(side="left", padx=8)
        self.progress = ctk.CTkProgressBar(run_bar, width=300)
        self.progress.set(0)
        self.progress.pack(side="left", padx=8)
        self.status_label = ctk.CTkLabel(run_bar, text="", anchor="w", text_color=GRAY, font=small_font(),
                                         wraplength=620, justify="left")
        self.status_label.pack(side="left", padx=8)
        self.results_frame = self.place(ctk.CTkFrame(self.body, fg_color="transparent"), padx=12, pady=4)
        self._photos: list[ImageTk.PhotoImage] = []
        self._shown = 0
        self._show_tool(TOOLS[0])
        self._poll_job = self.body.after(100, self._poll)

    # --- fields -------------------------------------------------------------------------------------------------
    def _show_tool(self, tool: str) -> None:
        self.tool = tool
        self.note_label.configure(text=TOOL_NOTES[tool])
        for child in self.fields_frame.winfo_children():
            child.destroy()
        self.inputs = {}
        if tool == "elements" and self.tools.values[tool]["prompts"] == FIELDS[tool]["prompts"][1]:
            self.tools.values[tool]["prompts"] = self.tools.element_prompts_template() or FIELDS[tool]["prompts"][1]
        for row, (key, (label, default, help_text)) in enumerate(FIELDS[tool].items()):
            text = ctk.CTkLabel(self.fields_frame, text=label, anchor="w", width=150)
            text.grid(row=row, column=0, sticky="w", pady=1)
            Tooltip(text, help_text)
            value = self.tools.values[tool][key]
            if isinstance(default, bool):
                widget = ctk.CTkSwitch(self.fields_frame, text="", command=lambda k=key: self._switched(k))
                widget.select() if value else widget.deselect()
            elif (tool, key) in CHOICES:
                widget = ctk.CTkOptionMenu(self.fields_frame, values=list(CHOICES[(tool, key)]),
                                           command=lambda choice, k=key: self.tools.set(self.tool, k, choice))
                widget.set(value)
            else:
                variable = tk.StringVar(self.fields_frame, value=str(value))
                variable.trace_add("write", lambda *_a, k=key, var=variable: self.tools.set(self.tool, k, var.get()))
                widget = ctk.CTkEntry(self.fields_frame, textvariable=variable, width=360)
                widget.variable = variable
            widget.grid(row=row, column=1, sticky="w", padx=8, pady=1)
            ctk.CTkLabel(self.fields_frame, text=help_text, text_color=GRAY, font=small_font(), anchor="w").grid(
                row=row, column=2, sticky="w")
            self.inputs[key] = widget

    def set_field(self, key: str, value: Any) -> None:
        """Set a field of the shown tool as typing or switching would (tests, screenshots)."""
        widget = self.inputs[key]
        if isinstance(widget, ctk.CTkSwitch):
            widget.select() if value else widget.deselect()
            self._switched(key)
        elif isinstance(widget, ctk.CTkOptionMenu):
            widget.set(value)
            self.tools.set(self.tool, key, value)
        else:
            widget.variable.set(str(value))

    def _switched(self, key: str) -> None:
        self.tools.set(self.tool, key, bool(self.inputs[key].get()))

    def _folder_chosen(self, value: str) -> None:
        self.tools.folder = value

    def _pick_folder(self) -> None:
        chosen = pick_path("folder", self.tools.folder)
        if chosen:
            self.folder_box.set(chosen)
            self._folder_chosen(chosen)

    # --- running -----------------------------------------------------------------------------------------------
    def _run(self) -> None:
        gc.collect()  # on the Tk thread: a collection in the worker would run Tk objects' __del__ there
        for child in self.results_frame.winfo_children():
            child.destroy()
        self._photos, self._shown = [], 0
        self.progress.set(0)
        try:
            self.tools.start(self.tool)
        except UserError as e:
            self.status_label.configure(text=f"{self.tool}: {e}", text_color=RED)
            self.ui.set_status(f"cannot run {self.tool}: {e}")
            return
        self.run_button.configure(state="disabled")
        self.cancel_button.configure(state="normal")
        self.status_label.configure(text=f"{self.tool}: running…", text_color=GRAY)

    def _poll(self) -> None:
        try:
            for event in self.tools.poll():
                self._handle(event)
            self._poll_job = self.body.after(100, self._poll)
        except tk.TclError:  # the window is closing
            self._poll_job = None

    def _handle(self, event: Any) -> None:
        if event.kind == "progress":
            done, total = event.payload
            self.progress.set(done / total if total else 0.5)
            self.status_label.configure(text=f"{self.tool}: {done}/{total or '?'} done")
        elif event.kind == "result":
            self._add_result(event.payload)
        else:
            self.run_button.configure(state="normal")
            self.cancel_button.configure(state="disabled")
            error = event.kind == "error"
            self.progress.set(0 if error else 1)
            self.status_label.configure(text=f"{self.tool}: {event.payload}", text_color=RED if error else GRAY)
            self.ui.set_status(f"{self.tool}: {event.payload}")
            if not error and "elements" in self.ui.tabs:  # its preview lists the new images at once
                self.ui.tabs["elements"].refresh_preview()
            if not error and "dataset" in self.ui.tabs:
                self.ui.tabs["dataset"].reload()

    def _add_result(self, path: Path) -> None:
        if self._shown >= MAX_THUMBS:
            return
        cell = ctk.CTkFrame(self.results_frame, fg_color="transparent")
        cell.grid(row=self._shown // 8, column=self._shown % 8, padx=4, pady=4, sticky="n")
        image = thumbnail(path)
        if image is not None:
            photo = ImageTk.PhotoImage(image, master=cell)
            self._photos.append(photo)
            tk.Label(cell, image=photo, borderwidth=0).pack()
        else:
            text = path.read_text(encoding="utf-8", errors="replace")[:120] if path.suffix == ".txt" else ""
            tk.Label(cell, text=text, wraplength=THUMB * 2, justify="left", font=("TkDefaultFont", 8)).pack()
        tk.Label(cell, text=path.name, font=("TkDefaultFont", 8)).pack()
        self._shown += 1

    def refresh(self) -> None:
        super().refresh()
        folders = self.tools.folders()
        if list(self.folder_box.cget("values")) != (folders or [""]):
            self.folder_box.configure(values=folders or [""])

    def close(self) -> None:
        self.tools.cancel()
        if self._poll_job is not None:
            try:
                self.body.after_cancel(self._poll_job)
            except tk.TclError:
                pass
            self._poll_job = None
