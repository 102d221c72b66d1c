"""One way to write a frame size for people: width x height, "832x480" (as ComfyUI's and diffusers' width/height
arguments and the docs' tables read). The config files keep their JSON `[height, width]`; every GUI field, label and
message that shows a size goes through here, so no screen shows "480x832" beside "832x480"."""
from __future__ import annotations

import re
from typing import Any

_SIZE = re.compile(r"^\s*(\d+)\s*[x×X]\s*(\d+)\s*$")


def size_text(height: int, width: int) -> str:
    return f"{width}x{height}"


def clip_text(frames: Any, height: Any, width: Any) -> str:
    """A clip's shape: "832x480, 81 frames"."""
    return f"{size_text(height, width)}, {frames} frames"


def resolution_text(value: Any) -> str:
    """A config resolution ([height, width], or a list of them) as "832x480" or "832x480, 1280x720"; a value that is
    neither is shown as JSON would be."""
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return size_text(*value)
    if isinstance(value, list) and value and all(isinstance(v, list) and len(v) == 2 for v in value):
        return ", ".join(size_text(*pair) for pair in value)
    return str(value)


def parse_resolution_text(text: str) -> list[int] | list[list[int]] | None:
    """"832x480" -> [480, 832]; "832x480, 1280x720" -> [[480, 832], [720, 1280]]; None when `text` is not written as
    sizes (the caller then reads it as the config's JSON)."""
    parts = [p for p in re.split(r"[,;]", text) if p.strip()]
    found = [_SIZE.match(p) for p in parts]
    if not parts or not all(found):
        return None
    pairs = [[int(m.group(2)), int(m.group(1))] for m in found]
    return pairs[0] if len(pairs) == 1 else pairs
