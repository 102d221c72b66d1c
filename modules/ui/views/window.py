"""What the tabs and bars ask of the main window: a Protocol, so they do not import `main_window` (which builds
them) and the views form no import circle."""
from __future__ import annotations

from typing import Any, Callable, Protocol

from modules.ui.controllers.app_controller import AppController


class Window(Protocol):
    app: AppController
    tabview: Any  # the CTkTabview holding the tabs

    def guard(self, action: Callable[[], Any]) -> Any: ...  # a UserError becomes a dialog

    def refresh(self) -> None: ...  # every widget from the controllers

    def schedule_refresh(self, _what: Any = None) -> None: ...  # refresh once the current event is handled

    def refresh_status(self) -> None: ...  # the bottom bar and the run's tabs

    def set_status(self, text: str) -> None: ...

    def start_training(self) -> None: ...

    def stop_training(self) -> None: ...

    def export_config(self, path: str | None = None) -> None: ...

    def load_config(self, path: str | None = None) -> None: ...

    def open_tensorboard(self) -> None: ...
