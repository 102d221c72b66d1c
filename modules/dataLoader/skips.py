"""Counting and reporting samples skipped while loading data."""

import logging
import os
import threading
from collections import Counter
from dataclasses import dataclass

from modules.dataLoader.errors import DataError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SkippedSample:
    """One skipped file: its path, a reason category (e.g. "unreadable video") and a message."""

    path: str
    category: str
    message: str


class SkipCounter:
    """Records skipped samples, logs one warning line each, and summarizes them per reason."""

    def __init__(self) -> None:
        self._entries: list[SkippedSample] = []
        self._lock = threading.Lock()

    def record(self, path: str | os.PathLike, category: str, message: str) -> None:
        """Record a skipped file and log one warning line about it."""
        entry = SkippedSample(str(path), category, " ".join(str(message).split()))
        with self._lock:
            self._entries.append(entry)
        logger.warning("skipping %s (%s): %s", entry.path, entry.category, entry.message)

    def record_error(self, error: DataError) -> None:
        """Record a `DataError` under its category."""
        self.record(error.path, error.category, error.reason)

    @property
    def entries(self) -> list[SkippedSample]:
        """A copy of the recorded entries, in recording order."""
        with self._lock:
            return list(self._entries)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def counts(self) -> dict[str, int]:
        """Number of skipped samples per category, most frequent first (ties by name)."""
        counter = Counter(entry.category for entry in self.entries)
        return dict(sorted(counter.items(), key=lambda item: (-item[1], item[0])))

    def summary(self) -> str:
        """E.g. "skipped 3 samples: 2 unreadable video, 1 too few frames"."""
        total = len(self)
        if total == 0:
            return "skipped 0 samples"
        noun = "sample" if total == 1 else "samples"
        parts = ", ".join(f"{count} {category}" for category, count in self.counts().items())
        return f"skipped {total} {noun}: {parts}"
