"""Counting and reporting samples skipped while loading data (and captions the text encoder cuts)."""

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


@dataclass(frozen=True)
class TruncatedCaption:
    """A caption longer than the text encoder takes: the sample trains on its first `kept` tokens."""

    name: str
    kept: int
    total: int


class SkipCounter:
    """Records skipped samples (and truncated captions, which still train), logs one warning line each,
    and summarizes them per reason."""

    def __init__(self) -> None:
        self._entries: list[SkippedSample] = []
        self._truncated: list[TruncatedCaption] = []
        self._lock = threading.Lock()

    def record(self, path: str | os.PathLike, category: str, message: str) -> None:
        """Record a skipped file and log one warning line about it."""
        entry = SkippedSample(str(path), category, " ".join(str(message).split()))
        with self._lock:
            self._entries.append(entry)
        logger.warning("skipping %s (%s): %s", entry.path, entry.category, entry.message)

    def add(self, entries: list[SkippedSample]) -> None:
        """Entries recorded (and logged) elsewhere, e.g. by start-up's data verdict: counted here, not logged again."""
        with self._lock:
            self._entries.extend(entries)

    def record_error(self, error: DataError) -> None:
        """Record a `DataError` under its category."""
        self.record(error.path, error.category, error.reason)

    def record_truncated_caption(self, name: str | os.PathLike, kept: int, total: int) -> None:
        """Record a caption cut to `kept` of its `total` tokens (it still trains) and log one line about it."""
        entry = TruncatedCaption(str(name), kept, total)
        with self._lock:
            self._truncated.append(entry)
        logger.warning("caption of %s is cut to %d of its %d tokens (the text encoder's limit)",
                       entry.name, entry.kept, entry.total)

    @property
    def truncated_captions(self) -> list[TruncatedCaption]:
        """A copy of the recorded truncated captions, in recording order."""
        with self._lock:
            return list(self._truncated)

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
        """E.g. "skipped 3 samples: 2 unreadable video, 1 too few frames; 1 caption cut to 512 tokens"."""
        return self._skipped_summary() + self._truncated_summary()

    def _skipped_summary(self) -> str:
        total = len(self)
        if total == 0:
            return "skipped 0 samples"
        noun = "sample" if total == 1 else "samples"
        parts = ", ".join(f"{count} {category}" for category, count in self.counts().items())
        return f"skipped {total} {noun}: {parts}"

    def _truncated_summary(self) -> str:
        truncated = self.truncated_captions
        if not truncated:
            return ""
        noun = "caption" if len(truncated) == 1 else "captions"
        return f"; {len(truncated)} {noun} cut to {max(t.kept for t in truncated)} tokens"
