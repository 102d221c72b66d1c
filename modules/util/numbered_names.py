"""The names tried, in order, for something a later run must not replace (run folders, logs, final models):
`<stem><suffix>`, then `<stem>-2<suffix>`, `<stem>-3<suffix>`, ..."""
from __future__ import annotations

from collections.abc import Iterator


def numbered_names(stem: str, suffix: str = "", limit: int = 100000) -> Iterator[str]:
    """`stem + suffix`, then the numbered ones up to `stem-<limit - 1> + suffix`."""
    yield stem + suffix
    for number in range(2, limit):
        yield f"{stem}-{number}{suffix}"
