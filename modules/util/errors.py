"""User-facing errors.

A `UserError` is something the user can fix (a bad config key, a missing file). The CLI prints its
message as one line and exits non-zero, without a traceback. Everything else is a bug and keeps its
traceback.
"""
from __future__ import annotations

import re

_CONFIG_KEY = re.compile(r"config key '([^']+)'")


class UserError(Exception):
    """An error the user can fix; its message is one line naming the key or file and what to do."""

    key: str = ""  # the config key it is about ("samples[0].driving_video"), where the raiser knows it

    @classmethod
    def about(cls, key: str, message: str) -> "UserError":
        """An error about config key `key` (the GUI shows it beside that field)."""
        error = cls(message)
        error.key = key
        return error


def key_of(error: UserError) -> str:
    """The config key an error is about: the one it was raised `about`, else the first `config key '...'` its
    message names ("" when none)."""
    if error.key:
        return error.key
    found = _CONFIG_KEY.search(str(error))
    return found.group(1) if found else ""
