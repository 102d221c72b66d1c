"""The TensorBoard button: serve the run's tensorboard folder on a free localhost port and open the browser.

One server per app, and it never outlives the app: the window stops it when it closes, `scripts/train_ui.py`
stops it when the main loop ends by an exception, an `atexit` hook stops it when the interpreter exits any other
way, and on Linux the kernel sends it SIGTERM when the GUI process dies without running any of these (SIGKILL).
"""
from __future__ import annotations

import atexit
import ctypes
import socket
import subprocess
import sys
import time
import urllib.request
import webbrowser
from pathlib import Path
from typing import Callable

from modules.util.errors import UserError

START_TIMEOUT_S = 60.0
_PR_SET_PDEATHSIG = 1
_SIGTERM = 15


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def tensorboard_command(logdir: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1",
            "--port", str(port)]


def _end_with_parent() -> None:
    """In the child, before exec (Linux): SIGTERM when the thread that started it dies. The window starts the
    server on its main thread, so that is the GUI's death, SIGKILL included."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, _SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # no prctl: the atexit hook and the window's close remain
        pass


class TensorboardLauncher:
    def __init__(self, open_browser=webbrowser.open,
                 command: Callable[[Path, int], list[str]] = tensorboard_command):
        self.open_browser = open_browser
        self.command = command
        self.process: subprocess.Popen | None = None
        self.logdir: Path | None = None
        self.url = ""
        atexit.register(self.stop)  # an exception or sys.exit that skips the window's close

    def open(self, logdir: str | Path) -> str:
        """Serve `logdir` (restarting the server for another folder), open the browser; returns the URL."""
        logdir = Path(logdir)
        if not logdir.is_dir():
            raise UserError(f"no tensorboard logs yet in '{logdir}': start a run with tensorboard on first")
        if self.process is None or self.process.poll() is not None or logdir != self.logdir:
            self.stop()
            port = free_port()
            self.process = subprocess.Popen(
                self.command(logdir, port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                preexec_fn=_end_with_parent if sys.platform.startswith("linux") else None)
            self.logdir, self.url = logdir, f"http://127.0.0.1:{port}/"
            self._wait_until_serving()
        self.open_browser(self.url)
        return self.url

    def _wait_until_serving(self) -> None:
        end = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < end:
            if self.process.poll() is not None:
                raise UserError(f"tensorboard exited at start (code {self.process.returncode}): run "
                                f"'tensorboard --logdir {self.logdir}' in a terminal to see why")
            try:
                with urllib.request.urlopen(self.url, timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise UserError(f"tensorboard did not answer on {self.url} within {START_TIMEOUT_S:.0f} s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None
