"""The console logging of every command-line script, set up in one place (scripts/_bootstrap.run_main).

Log lines go through `tqdm.write`, which clears the progress bars, prints the line and draws the bars again: a
skipped clip's warning during caching lands on its own line above the bar instead of glued onto it."""
from __future__ import annotations

import logging
import sys

from tqdm import tqdm

FORMAT = "%(levelname)s %(name)s: %(message)s"
# Libraries whose INFO/WARNING chatter (HTTP, hub, loading notices) is not the user's business
QUIET_LOGGERS = ("httpx", "urllib3", "huggingface_hub", "diffusers", "transformers")


class TqdmLogHandler(logging.Handler):
    """A stderr handler that writes around tqdm's bars."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # noqa: BLE001  (logging's rule: a failed log line never ends the program)
            self.handleError(record)


def setup_console_logging(level: int = logging.INFO) -> logging.Handler:
    """Install the console handler on the root logger (once: a second call replaces the first)."""
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, TqdmLogHandler)]:
        root.removeHandler(old)
    handler = TqdmLogHandler()
    handler.setFormatter(logging.Formatter(FORMAT))
    root.addHandler(handler)
    root.setLevel(level)
    for noisy in QUIET_LOGGERS:
        logging.getLogger(noisy).setLevel(logging.ERROR)
    return handler
