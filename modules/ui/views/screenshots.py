"""Screenshots of the main window's tabs (docs/images), taken from the X display with Pillow."""
from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

if TYPE_CHECKING:
    from modules.ui.views.main_window import TrainUI


def settle(ui: "TrainUI", seconds: float = 0.4) -> None:
    """Let Tk process the redraws customtkinter schedules after a change."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        ui.update()
        time.sleep(0.05)


def pump_until(ui: "TrainUI", until: Callable[[], bool], timeout: float, what: str) -> None:
    """Run the Tk event loop until `until()` holds (the training worker reports through `after` polls);
    TimeoutError naming `what` after `timeout` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ui.update()
        if until():
            return
        time.sleep(0.02)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


def capture_window(ui: "TrainUI", path: str | os.PathLike) -> Path:
    from PIL import Image, ImageGrab

    settle(ui)
    x, y = ui.winfo_rootx(), ui.winfo_rooty()
    image = ImageGrab.grab(bbox=(x, y, x + ui.winfo_width(), y + ui.winfo_height()),
                           xdisplay=os.environ.get("DISPLAY"))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # A 128-colour palette keeps UI screenshots sharp at a third of the size.
    image.convert("RGB").quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
    return path


def tab_file_name(tab: str) -> str:
    return "gui-" + re.sub(r"[^a-z0-9]+", "-", tab.lower()).strip("-") + ".png"


def capture_tabs(ui: "TrainUI", out_dir: str | os.PathLike, tabs: Iterable[str] | None = None) -> list[Path]:
    """One PNG per tab (gui-<tab>.png) in `out_dir`."""
    written = []
    from modules.ui.views.main_window import TAB_CLASSES

    for name in tabs or [cls.name for cls in TAB_CLASSES]:
        ui.show_tab(name)
        written.append(capture_window(ui, Path(out_dir) / tab_file_name(name)))
    return written


def scroll_to(tab, widget, above: int = 60) -> None:
    """Scroll `tab`'s body so that `widget` is near the top of the view (`above` pixels of context over it)."""
    tab.ui.update_idletasks()
    canvas = tab.body._parent_canvas  # customtkinter's scrollable frame draws its content on this canvas
    height = max(1, tab.body.winfo_height())
    canvas.yview_moveto(max(0.0, (widget.winfo_y() - above) / height))
