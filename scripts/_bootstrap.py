"""Shared start-up of the command-line scripts: import path, logging, one-line user errors."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Callable, NoReturn

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a hub: weights come from local folders
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # e.g. its torchvision notice on every start


class OneLineArgumentParser(argparse.ArgumentParser):
    """Bad command-line arguments end with one line and exit code 1, like every other user error."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message} (see --help)", file=sys.stderr)
        sys.exit(1)


def run_main(main: Callable[[], int | None]) -> None:
    """Run `main`; a UserError ends the process with its one-line message and exit code 1."""
    from modules.util.console_log import setup_console_logging
    from modules.util.errors import UserError

    setup_console_logging()
    try:
        code = main()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(code or 0)
