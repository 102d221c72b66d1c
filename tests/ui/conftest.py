"""GUI tests. Controller tests need no display; widget tests (the `ui` fixture) run on a private Xvfb
server started on a free display, and are skipped, with the reason, only when Xvfb is not installed."""
from __future__ import annotations

import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Callable

import pytest


@pytest.fixture(scope="session")
def xvfb_display():
    """Start Xvfb on a display number it picks itself (-displayfd) and point DISPLAY at it."""
    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb is not installed (apt-get install xvfb — .ci/run does): widget tests need an X display")
    try:
        import tkinter  # noqa: F401
    except ImportError:
        pytest.skip("tkinter is not available in this Python (install python3-tk): widget tests need Tk")
    read_fd, write_fd = os.pipe()
    server = subprocess.Popen(["Xvfb", "-displayfd", str(write_fd), "-screen", "0", "1400x1000x24", "-nolisten", "tcp"],
                              pass_fds=(write_fd,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write_fd)
    try:
        ready, _, _ = select.select([read_fd], [], [], 20)
        number = os.read(read_fd, 64).decode().strip() if ready else ""
    finally:
        os.close(read_fd)
    if not number:
        server.kill()
        pytest.fail("Xvfb did not report a display within 20 s")
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


def pump(ui, until: Callable[[], bool], timeout: float, what: str) -> None:
    """Run the Tk event loop until `until()` holds (the worker thread reports through `after` polls)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ui.update()
        if until():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


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
