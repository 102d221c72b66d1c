"""The TensorBoard server the GUI starts ends with the GUI: on close (`stop`), when the process ends by an
exception (atexit) and when it is killed outright (Linux: the parent-death signal). A stand-in server (Python's
http.server) takes TensorBoard's place: what is tested is the launcher's hold on its child."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from modules.ui.controllers.tensorboard_launcher import TensorboardLauncher
from tests.conftest import REPO_ROOT


def http_server(logdir: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(logdir)]


def gone(pid: int, timeout: float = 10.0) -> bool:
    """Whether process `pid` has ended (reaped, or a zombie waiting for a parent that is not us)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


# A GUI process in miniature: it starts the server, prints its pid, then ends as the test says.
CHILD = """
import os, sys, time
sys.path.insert(0, {root!r})
from tests.ui.test_tensorboard_launcher import http_server
from modules.ui.controllers.tensorboard_launcher import TensorboardLauncher
launcher = TensorboardLauncher(open_browser=lambda url: None, command=http_server)
launcher.open({logdir!r})
print(launcher.process.pid, flush=True)
if {how!r} == "exception":
    raise RuntimeError("the GUI crashed")
time.sleep(60)
"""


def test_stop_ends_the_server_and_a_second_open_of_the_same_folder_reuses_it(tmp_path):
    opened = []
    launcher = TensorboardLauncher(open_browser=opened.append, command=http_server)
    url = launcher.open(tmp_path)
    process = launcher.process
    assert launcher.open(tmp_path) == url and launcher.process is process and opened == [url, url]
    launcher.stop()
    assert launcher.process is None and process.poll() is not None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and the parent-death signal are Linux's")
@pytest.mark.parametrize("how", ["exception", "killed"])
def test_the_server_ends_with_the_process_that_started_it(tmp_path, how):
    code = CHILD.format(root=str(REPO_ROOT), logdir=str(tmp_path), how=how)
    child = subprocess.Popen([sys.executable, "-c", code], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    try:
        server_pid = int(child.stdout.readline())
        if how == "killed":  # open() returned once it served: it lives while the GUI does
            assert not gone(server_pid, timeout=0.2)
            os.kill(child.pid, signal.SIGKILL)  # no atexit, no finally: only the kernel can tell the server
        child.wait(30)
        assert gone(server_pid), f"the server {server_pid} outlived the GUI ({how})"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
