"""User-facing errors.

A `UserError` is something the user can fix (a bad config key, a missing file). The CLI prints its
message as one line and exits non-zero, without a traceback. Everything else is a bug and keeps its
traceback.
"""


class UserError(Exception):
    """An error the user can fix; its message is one line naming the key or file and what to do."""
