"""The main window: top bar, one tab per area, bottom bar; polls the training thread with `after`."""
from __future__ import annotations

import logging
from tkinter import filedialog
from typing import Any, Callable

import customtkinter as ctk

from modules.ui.controllers.app_controller import WINDOW_TITLE, AppController
from modules.ui.controllers.training_controller import Event
from modules.ui.views.backup_tab import BackupTab
from modules.ui.views.base_tab import BaseTab
from modules.ui.views.bottom_bar import BottomBar
from modules.ui.views.concepts_tab import ConceptsTab
from modules.ui.views.curves_tab import CurvesTab
from modules.ui.views.data_tab import DataTab
from modules.ui.views.dataset_tab import DatasetTab
from modules.ui.views.dialogs import MessageDialog
from modules.ui.views.elements_tab import ElementsTab
from modules.ui.views.general_tab import GeneralTab
from modules.ui.views.lora_tab import LoRATab
from modules.ui.views.model_tab import ModelTab
from modules.ui.views.pathways_tab import PathwaysTab
from modules.ui.views.runs_tab import RunsTab
from modules.ui.views.samples_tab import SamplesTab
from modules.ui.views.sampling_tab import SamplingTab
from modules.ui.views.tools_tab import ToolsTab
from modules.ui.views.top_bar import TopBar
from modules.ui.views.training_tab import TrainingTab
from modules.ui.views.visualization_tab import VisualizationTab
from modules.ui.views.widgets import RED
from modules.util.errors import UserError

logger = logging.getLogger(__name__)

EXPORT_COMMAND = ".venv/bin/python scripts/train.py"  # as the README runs an exported config
TAB_TEXT = ctk.ThemeManager.theme["CTkSegmentedButton"]["text_color"]

TAB_CLASSES: tuple[type[BaseTab], ...] = (GeneralTab, ModelTab, DataTab, ConceptsTab, DatasetTab, ToolsTab,
                                          TrainingTab, SamplingTab, BackupTab, LoRATab, ElementsTab, PathwaysTab,
                                          VisualizationTab, RunsTab, SamplesTab, CurvesTab)


RECHECK_POLLS = 20  # the start-up check runs again every 20 polls (2 s)


class TrainUI(ctk.CTk):
    POLL_MS = 100

    def __init__(self, app: AppController | None = None):
        super().__init__()
        self.app = app or AppController()
        self.title(WINDOW_TITLE)
        self.geometry("1280x860")
        self.minsize(980, 600)
        self.grid_columnconfigure(0, weight=1)
        self.grid_rowconfigure(1, weight=1)
        self.last_dialog: MessageDialog | None = None
        self._refresh_pending = False
        self._refreshing = False
        self._closing = False
        self._polls = 0

        self.top_bar = TopBar(self, self)
        self.top_bar.grid(row=0, column=0, sticky="ew")
        self.tabview = ctk.CTkTabview(self, anchor="nw", command=self._tab_changed)
        self.tabview.grid(row=1, column=0, sticky="nsew", padx=8, pady=(2, 4))
        self._tab_frames = {tab_cls.name: self.tabview.add(tab_cls.name) for tab_cls in TAB_CLASSES}
        self.tabs: dict[str, BaseTab] = {}  # built on first view: the window opens at once
        self.bottom_bar = BottomBar(self, self)
        self.bottom_bar.grid(row=2, column=0, sticky="ew")

        self.app.config.subscribe(self.schedule_refresh)
        self.app.dataset.subscribe(self.schedule_refresh)
        self.tab(self.tabview.get())
        self.refresh()
        self._poll_job: str | None = self.after(self.POLL_MS, self._poll)
        self.protocol("WM_DELETE_WINDOW", self.on_close)

    # --- tabs -------------------------------------------------------------------------------------------
    def tab(self, name: str) -> BaseTab:
        """The tab `name`, built (and filled from the controllers) the first time it is asked for."""
        if name not in self.tabs:
            tab_cls = next(cls for cls in TAB_CLASSES if cls.name == name)
            self.tabs[name] = tab_cls(self._tab_frames[name], self)
            self.tabs[name].refresh()
        return self.tabs[name]

    def show_tab(self, name: str) -> BaseTab:
        self.tabview.set(name)
        return self.tab(name)

    def _tab_changed(self) -> None:
        self.tab(self.tabview.get())

    # --- refreshing (Tk thread only) ---------------------------------------------------------------
    def schedule_refresh(self, _what: Any = None) -> None:
        if not self._refresh_pending:
            self._refresh_pending = True
            self.after_idle(self.refresh)

    def _defer_refresh(self) -> None:
        # A timer, not an idle callback: `update_idletasks` inside the running refresh would run an
        # idle callback at once.
        if not self._refresh_pending:
            self._refresh_pending = True
            self.after(20, self.refresh)

    def refresh(self) -> None:
        """Re-read every widget from the controllers. Not re-entrant: customtkinter may run idle
        callbacks while widgets are being (re)built, so a nested call is deferred instead."""
        if self._refreshing:
            self._defer_refresh()
            return
        self._refreshing = True
        self._refresh_pending = False
        try:
            self.top_bar.refresh()
            for tab in list(self.tabs.values()):
                tab.refresh()
            self.bottom_bar.refresh()
            self._mark_error_tabs()
        finally:
            self._refreshing = False

    def _mark_error_tabs(self) -> None:
        """A tab whose fields hold errors says so in its button (red, with the count), even before it is opened; a
        tab none of whose fields applies (the LoRA tab of a fine-tune) is not offered."""
        counts = self.app.error_tabs()
        segmented = self.tabview._segmented_button  # noqa: SLF001 - customtkinter has no public API for either
        for index, (name, tab_button) in enumerate(segmented._buttons_dict.items()):  # noqa: SLF001
            marked = (f"{name} ⚠ {counts[name]}", RED) if name in counts else (name, TAB_TEXT)
            if (tab_button.cget("text"), tab_button.cget("text_color")) != marked:
                tab_button.configure(text=marked[0], text_color=marked[1])
            offered = self.app.config.shows_tab(name) or name in counts
            if offered != bool(tab_button.winfo_manager()):
                tab_button.grid() if offered else tab_button.grid_remove()
                segmented.grid_columnconfigure(index, weight=int(offered), minsize=0)
                if not offered and self.tabview.get() == name:
                    self.show_tab(TAB_CLASSES[0].name)

    def tab_offered(self, name: str) -> bool:
        """Whether tab `name`'s button is shown (tests, screenshots)."""
        return bool(self.tabview._segmented_button._buttons_dict[name].winfo_manager())  # noqa: SLF001

    def tab_label(self, name: str) -> str:
        """The text of tab `name`'s button (tests, screenshots)."""
        return self.tabview._segmented_button._buttons_dict[name].cget("text")  # noqa: SLF001

    def refresh_status(self) -> None:
        if self._refreshing:
            self._defer_refresh()
            return
        self.bottom_bar.refresh()
        for name in ("backup", "sampling", "runs", "samples", "curves"):
            if name in self.tabs:
                self.tabs[name].refresh()

    def set_status(self, text: str) -> None:
        """The result of an action (export, preset saved, TensorBoard's URL): it replaces the status line, during a
        run too."""
        self.app.training.say(text)
        self.bottom_bar.refresh()

    # --- the training thread's messages --------------------------------------------------------------
    def _poll(self) -> None:
        """Drain the worker's queue on the Tk thread; the worker itself never touches a widget."""
        events = self.app.training.poll()
        for event in events:
            self._handle(event)
        if events:
            self.refresh_status()
        self.bottom_bar.refresh_vram()
        self._polls += 1
        if self._polls % RECHECK_POLLS == 0 and not self.app.training.running:
            self.app.config.recheck_start()  # a file the start-up check named may have appeared (or gone)
        if self._closing and not self.app.training.running:
            self.destroy()
            return
        self._poll_job = self.after(self.POLL_MS, self._poll)

    def _handle(self, event: Event) -> None:
        if event.kind == "error":
            self.show_message("Training failed", event.payload)
        elif event.kind == "finished" and self.app.training.state.warnings:  # said at the end, not only logged
            self.show_message("Training finished, but skipped some of the work",
                              "\n".join(self.app.training.state.warnings), error=False)
        elif event.kind == "sample" and self.app.training.sample_requested:  # "Sample now": show its result
            self.app.training.sample_requested = False
            self.show_tab("samples")
        elif event.kind == "done" and "backup" in self.tabs:
            self.tabs["backup"].refresh()

    # --- actions ---------------------------------------------------------------------------------------
    def guard(self, action: Callable[[], Any]) -> Any:
        """Run a user action; a UserError becomes a dialog with its one-line reason."""
        try:
            return action()
        except UserError as e:
            self.app.training.say(f"cannot do that: {e}", error=True)  # not the message of an earlier action
            self.refresh_status()
            self.show_message("Cannot do that", str(e))
            return None

    def show_message(self, title: str, message: str, error: bool = True) -> MessageDialog:
        if self.last_dialog is not None and self.last_dialog.winfo_exists():
            self.last_dialog.destroy()
        self.last_dialog = MessageDialog(self, title, message, error)
        return self.last_dialog

    def start_training(self) -> None:
        self.guard(self.app.start)
        self.refresh_status()

    def stop_training(self) -> None:
        self.app.stop()
        self.refresh_status()

    def export_config(self, path: str | None = None) -> None:
        path = path or filedialog.asksaveasfilename(defaultextension=".json", filetypes=[("JSON", "*.json")],
                                                    initialfile="config.json")
        if path:
            written = self.guard(lambda: self.app.export(path))
            if written:
                self.set_status(f"config exported to {written}; run it with "
                                f"{EXPORT_COMMAND} --config-path {written}")

    def load_config(self, path: str | None = None) -> None:
        path = path or filedialog.askopenfilename(filetypes=[("JSON", "*.json")])
        if path:
            self.guard(lambda: self.app.load(path))
            self.refresh()

    def open_tensorboard(self) -> None:
        self.set_status("starting tensorboard…")
        self.update_idletasks()
        url = self.guard(self.app.open_tensorboard)
        if url:  # else the line already says why not
            self.set_status(f"tensorboard serves {url}")

    def on_close(self) -> None:
        if self.app.training.running:  # stop cleanly (a backup is written), then close
            self._closing = True
            self.app.stop()
            self.set_status("stopping training before closing…")
        else:
            self.destroy()

    def destroy(self) -> None:
        self.app.tensorboard.stop()
        for tab in self.tabs.values():
            close = getattr(tab, "close", None)
            if close is not None:
                close()
        if self._poll_job is not None:
            self.after_cancel(self._poll_job)
            self._poll_job = None
        super().destroy()
