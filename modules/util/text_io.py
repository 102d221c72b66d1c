"""Decoding text files users write with any editor: a byte-order mark says the encoding.

Notepad saves UTF-8 with a BOM or UTF-16; without a BOM the text is UTF-8. Callers decide what to do
when bytes without a BOM are not UTF-8 (captions fall back to latin-1 with a warning; JSON is an error).
"""
from __future__ import annotations

import codecs

# Longest first: the UTF-32 LE mark starts with the UTF-16 LE one.
_BOMS = [(codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"), (codecs.BOM_UTF8, "utf-8"),
         (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be")]


def bom_encoding(data: bytes) -> tuple[str | None, int]:
    """(encoding named by a leading BOM, length of the BOM); (None, 0) without one."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return encoding, len(bom)
    return None, 0


def decode_text(data: bytes) -> str:
    """Text of a file: the BOM's encoding (BOM removed), else UTF-8. Raises UnicodeDecodeError when the
    bytes are not valid in that encoding."""
    encoding, skip = bom_encoding(data)
    return data[skip:].decode(encoding or "utf-8")
