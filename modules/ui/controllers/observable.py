"""A minimal observer: controllers tell the views that something changed (on the Tk thread only)."""
from __future__ import annotations

from typing import Any, Callable


class Observable:
    def __init__(self) -> None:
        self._listeners: list[Callable[[Any], None]] = []

    def subscribe(self, listener: Callable[[Any], None]) -> Callable[[], None]:
        """Call `listener(what)` after every change (`what` is a key, or None for "everything")."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def notify(self, what: Any = None) -> None:
        for listener in list(self._listeners):
            listener(what)
