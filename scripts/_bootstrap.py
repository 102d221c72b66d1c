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


def one_cpu_thread() -> None:
    """torch on one CPU thread, unless OMP_NUM_THREADS says otherwise: the runs on tiny models (the demo, the tiny VAE)
    gain nothing from a second thread, and on a busy machine its OpenMP workers spin while they wait
    (benchmarks/demo_threads.py). Must run before torch is imported: OpenMP sizes its pool once."""
    if "torch" in sys.modules:
        raise RuntimeError("one_cpu_thread() must run before torch is imported")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", os.environ["OMP_NUM_THREADS"])


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
