"""Recognising why a write failed, whichever library did the writing.

Python's own writers raise `OSError` with an errno; safetensors' Rust writer raises `SafetensorError`
whose text holds the OS message ("No space left on device (os error 28)"); torch's zip writer raises
`RuntimeError` with the same text. Every writer's failure goes through `write_failure` so a full disk,
a read-only filesystem or a missing permission reads the same wherever it happens.
"""
from __future__ import annotations

import errno

_DISK_FULL_ERRNOS = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}
_REASONS = {  # errno -> words for a one-line message
    errno.ENOSPC: "the disk is full",
    getattr(errno, "EDQUOT", errno.ENOSPC): "the disk quota is exceeded",
    errno.EROFS: "the filesystem is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EISDIR: "the path is a folder",
}
_TEXT_MARKERS = {  # what the OS message says inside a non-OSError exception -> errno
    "no space left on device": errno.ENOSPC,
    "os error 28": errno.ENOSPC,
    "disk quota exceeded": getattr(errno, "EDQUOT", errno.ENOSPC),
    "read-only file system": errno.EROFS,
    "os error 30": errno.EROFS,
    "permission denied": errno.EACCES,
    "not a directory": errno.ENOTDIR,
}


def write_errno(error: BaseException) -> int | None:
    """The errno behind a failed write, also when a library wrapped it in its own exception type."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno is not None:
            return error.errno
        text = str(error).lower()
        for marker, number in _TEXT_MARKERS.items():
            if marker in text:
                return number
        error = error.__cause__ or error.__context__
    return None


def is_disk_full(error: BaseException) -> bool:
    return write_errno(error) in _DISK_FULL_ERRNOS


def is_write_failure(error: BaseException) -> bool:
    """An error a user can fix on their side (space, permissions, a wrong path) rather than a bug."""
    return isinstance(error, OSError) or write_errno(error) is not None


def write_failure(error: BaseException) -> str:
    """A few words for a one-line message: 'the disk is full', 'permission denied', or the first line of
    the error itself."""
    number = write_errno(error)
    if number in _REASONS:
        return _REASONS[number]
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
