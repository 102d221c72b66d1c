"""customtkinter, imported so that it leaves ~/.fonts alone when its fonts are already there.

On Linux every `import customtkinter` copies its three font files into ~/.fonts with `shutil.copy`
(customtkinter/windows/widgets/font/__init__.py → FontManager.load_font), which truncates and rewrites each file in
place. A Tk window that has those fonts mapped (an open WanTrainer GUI, a test's window) then dies of SIGBUS inside
Tk. So the import runs with a copy that skips a font already there with the same bytes, and writes any other one
beside it and renames it over (modules/util/atomic.py): a process that has the old file mapped keeps reading it."""
from __future__ import annotations

import filecmp
import os
import shutil
import sys
from types import ModuleType


def _copy_keeping_same_files(src: str, dst: str, *, follow_symlinks: bool = True) -> str:
    from modules.util.atomic import atomic_path

    target = os.path.join(dst, os.path.basename(src)) if os.path.isdir(dst) else dst
    if os.path.isfile(target) and filecmp.cmp(src, target, shallow=False):
        return target
    with atomic_path(target) as temp:
        shutil.copyfile(src, temp)
    return target


def import_customtkinter() -> ModuleType:
    """customtkinter (imported once per process; later `import customtkinter` statements get this module)."""
    if "customtkinter" in sys.modules:
        return sys.modules["customtkinter"]
    copy = shutil.copy
    shutil.copy = _copy_keeping_same_files  # what FontManager.load_font calls, for the length of the import only
    try:
        import customtkinter
    finally:
        shutil.copy = copy
    return customtkinter
