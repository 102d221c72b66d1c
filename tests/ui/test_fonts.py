"""customtkinter copies its fonts into ~/.fonts on every import, rewriting them in place, and a Tk window with them
mapped dies of SIGBUS (modules/ui/views/ctk_fonts.py): the GUI leaves fonts that are there and unchanged alone, and
the tests never share the user's font folder."""
from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

FONTS = ["CustomTkinter_shapes_font.otf", "Roboto-Medium.ttf", "Roboto-Regular.ttf"]


def _start_the_gui_code(home: Path) -> None:
    """What `scripts/train_ui.py` imports before its window opens, in a process whose HOME is `home`."""
    subprocess.run([sys.executable, "-c", "import modules.ui.views.main_window"], cwd=REPO_ROOT, check=True,
                   env={**os.environ, "HOME": str(home)}, timeout=300)


def test_the_gui_leaves_fonts_that_are_there_alone_and_replaces_a_changed_one_whole(tmp_path):
    pytest.importorskip("tkinter", reason="this Python has no Tk (install python3-tk): the GUI cannot import")
    home = tmp_path / "home"
    home.mkdir()
    _start_the_gui_code(home)  # the first start copies them
    folder = home / ".fonts"
    assert sorted(p.name for p in folder.iterdir()) == FONTS
    changed = folder / "Roboto-Medium.ttf"
    shipped = changed.read_bytes()
    changed.write_bytes(b"an older font")
    before = {name: (folder / name).stat() for name in FONTS}
    with open(changed, "rb") as held:  # as a window that has it mapped
        _start_the_gui_code(home)
        assert held.read() == b"an older font"  # not truncated under the reader: replaced by a new file
    after = {name: (folder / name).stat() for name in FONTS}
    for name in FONTS:
        if name != changed.name:  # unchanged: not written at all (before: rewritten in place on every start)
            assert (after[name].st_ino, after[name].st_mtime_ns) == (before[name].st_ino, before[name].st_mtime_ns)
    assert changed.read_bytes() == shipped and after[changed.name].st_ino != before[changed.name].st_ino


def test_the_tests_run_with_their_own_home():
    # tests/conftest.py: a fresh HOME per test process (each xdist worker), inherited by the programs tests start
    assert Path.home() != Path(pwd.getpwuid(os.getuid()).pw_dir)
    assert Path.home().name.startswith("wantrainer-tests-home-") and Path.home().is_dir()
