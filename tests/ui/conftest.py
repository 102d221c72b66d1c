"""GUI tests. Controller tests need no display; widget tests (the `ui` fixture) run on a private Xvfb
server started on a free display, and are skipped, with the reason, only when Xvfb is not installed."""
from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest


def _x_server_answers(number: int, timeout: float) -> bool:
    """Whether display `number` accepts an X11 connection, tried the way Xlib does (the abstract
    socket first: it is shared by every process of the network namespace, /tmp may not be)."""
    hello = b"l\0\x0b\0\0\0\0\0\0\0\0\0"  # little-endian, protocol 11.0, no authorization
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for address in (f"\0/tmp/.X11-unix/X{number}", f"/tmp/.X11-unix/X{number}"):
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                    probe.settimeout(2)
                    probe.connect(address)
                    probe.sendall(hello)
                    return probe.recv(1) == b"\x01"
            except OSError:
                continue
        time.sleep(0.05)
    return False


def _display_is_free(number: int) -> bool:
    if os.path.exists(f"/tmp/.X{number}-lock") or os.path.exists(f"/tmp/.X11-unix/X{number}"):
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(f"\0/tmp/.X11-unix/X{number}")  # taken by a server in another mount namespace?
        except OSError:
            return False
    return True


@pytest.fixture(scope="session")
def xvfb_display():
    """Start Xvfb on a free display (checked in /tmp and in the abstract socket namespace, since other
    sessions may share the machine) and point DISPLAY at it."""
    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb is not installed (apt-get install xvfb — .ci/run does): widget tests need an X display")
    try:
        import tkinter  # noqa: F401
    except ImportError:
        pytest.skip("tkinter is not available in this Python (install python3-tk): widget tests need Tk")
    candidates = [n for n in random.Random(os.getpid()).sample(range(100, 1000), 40) if _display_is_free(n)]
    server = None
    for number in candidates[:5]:
        server = subprocess.Popen(["Xvfb", f":{number}", "-screen", "0", "1400x1000x24", "-nolisten", "tcp"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if _x_server_answers(number, 15) and server.poll() is None:
            break
        server.kill()
        server.wait()
        server = None
    if server is None:
        pytest.fail("could not start Xvfb on a free display")
    previous = os.environ.get("DISPLAY")
    os.environ["DISPLAY"] = f":{number}"
    yield os.environ["DISPLAY"]
    if previous is None:
        os.environ.pop("DISPLAY", None)
    else:
        os.environ["DISPLAY"] = previous
    server.terminate()
    try:
        server.wait(5)
    except subprocess.TimeoutExpired:
        server.kill()


@pytest.fixture
def make_ui(xvfb_display, tmp_path):
    """make_ui(app=None) -> a TrainUI on the Xvfb display (presets in a temp folder); destroyed after the test."""
    from modules.ui.controllers.app_controller import AppController
    from modules.ui.views.main_window import TrainUI

    made = []

    def make(app: AppController | None = None) -> TrainUI:
        if app is None:
            preset_dir = tmp_path / "presets"
            preset_dir.mkdir(exist_ok=True)
            app = AppController(preset_dir)
        ui = TrainUI(app)
        ui.update()
        made.append(ui)
        return ui

    yield make
    for ui in made:
        if ui.app.training.running:
            ui.app.training.stop()
            ui.app.training.wait(60)
        try:
            ui.destroy()
        except Exception:  # noqa: BLE001 - already closed by the test
            pass


def write_e2v_folder(folder: Path, count: int = 3) -> Path:
    """An E2V dataset folder: NNN.mp4 (empty: the preview only looks at names), NNN.txt, element PNGs.
    Sample 000 has every element, 001 lacks the object, 002 has no caption and an upper-case .PNG."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    image = Image.new("RGB", (8, 8), (200, 30, 30))
    for i in range(count):
        base = f"{i:03d}"
        (folder / f"{base}.mp4").write_bytes(b"")
        if i != 2:
            (folder / f"{base}.txt").write_text(f"clip {i}")
        image.save(folder / f"{base}_person.png")
        if i != 1:
            image.save(folder / f"{base}_object.png")
        image.save(folder / (f"{base}_background.PNG" if i == 2 else f"{base}_background.png"), format="PNG")
    return folder
