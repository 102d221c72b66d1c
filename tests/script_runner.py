"""A script of scripts/ run in the test process, as `subprocess.run([python, script, *args])` would run it, without a
new interpreter's ~8 CPU-seconds of torch, diffusers and transformers imports. For tests whose claim is what the
script does, not how a fresh process starts: each script keeps at least one test that runs it as a real process."""
from __future__ import annotations

import contextlib
import io
import logging
import runpy
import signal
import subprocess
import sys

from tests.conftest import REPO_ROOT

SCRIPTS = REPO_ROOT / "scripts"


def run_script(script: str, *args: str) -> subprocess.CompletedProcess:
    """scripts/<script> with `args` as its command line: its exit code, stdout and stderr (log lines included).
    The process-wide state a script sets (argv, import path, signal handlers, the root logger) is put back after."""
    argv, path = sys.argv[:], sys.path[:]
    handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    root = logging.getLogger()
    root_handlers, root_level = root.handlers[:], root.level
    stdout, stderr = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    command = [str(SCRIPTS / script), *map(str, args)]
    sys.argv = command[:]
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                runpy.run_path(str(SCRIPTS / script), run_name="__main__")
            except SystemExit as exit_:
                code = exit_.code
    finally:
        sys.argv, sys.path[:] = argv, path
        for number, handler in handlers.items():
            signal.signal(number, handler)
        root.handlers[:] = root_handlers
        root.setLevel(root_level)
    if isinstance(code, str):  # sys.exit("message"): printed to stderr, exit code 1
        stderr.write(code + "\n")
        code = 1
    return subprocess.CompletedProcess([sys.executable, *command], code or 0, stdout.getvalue(), stderr.getvalue())
