"""Errors raised by the data path."""

from os import PathLike

from modules.util.errors import UserError

# Reason categories, used by `SkipCounter.summary()` to group skipped files.
MISSING_FILE = "missing file"
UNREADABLE_VIDEO = "unreadable video"
UNREADABLE_IMAGE = "unreadable image"
BAD_NPZ = "bad npz"
BAD_MANIFEST = "bad manifest"
UNSUPPORTED_FILE = "unsupported file"
TOO_FEW_FRAMES = "too few frames"
CHANGED_FILE = "changed file"
TOO_MANY_PIXELS = "too many pixels"
BAD_DRIVING = "bad driving video or reference image"  # Animate-2's inputs beside a clip


class DataError(UserError):
    """A data file that cannot be used: names the file and why, in one line."""

    def __init__(self, path: str | PathLike, reason: str, category: str = UNREADABLE_VIDEO):
        self.path = str(path)
        self.reason = reason
        self.category = category
        super().__init__(self.path, reason)

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}".replace("\n", " ")


class CachingStopped(Exception):
    """A stop was requested while `prepare()` encoded the dataset. Entries already written stay valid (each
    is written atomically), so the next run reuses them and encodes only the rest."""

    def __init__(self, done: int, total: int):
        self.done, self.total = done, total
        super().__init__(f"caching stopped after {done} of {total} samples; the cached ones are kept and "
                         "the next run encodes only the rest")
