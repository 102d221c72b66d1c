#!/usr/bin/env python
"""Start the WanTrainer GUI: python scripts/train_ui.py [--config-path CFG.json] [--preset-path P]"""
from __future__ import annotations

import argparse
import sys

from _bootstrap import run_main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config-path", help="a training config JSON to open (as scripts/train.py reads it)")
    parser.add_argument("--preset-path", help="a preset file or the name of a shipped preset to start from")
    parser.add_argument("--screenshots", metavar="DIR",
                        help="write a PNG of every tab to DIR and exit (needs an X display; used for docs/images)")
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    try:
        import tkinter
    except ImportError:
        print("error: this Python has no Tk (tkinter): install it (Debian/Ubuntu: apt-get install python3-tk), "
              "or train without the GUI: scripts/train.py --config-path", file=sys.stderr)
        return 1
    try:
        from modules.ui.views.main_window import TrainUI

        ui = TrainUI()
    except tkinter.TclError as e:
        print(f"error: cannot open a window ({e}): the GUI needs a desktop session (DISPLAY); "
              "on a machine without one use scripts/train.py --config-path", file=sys.stderr)
        return 1
    if args.config_path or args.preset_path:
        ui.guard(lambda: ui.app.config.load_file(args.config_path, args.preset_path))
        if args.preset_path:
            from modules.config.loading import resolve_preset

            ui.app.config.preset_name = ui.guard(lambda: resolve_preset(args.preset_path).stem) or ""
        ui.guard(ui.app.load_dataset_from_config)
        ui.refresh()
    if args.screenshots:
        from modules.ui.views.screenshots import capture_tabs

        ui.geometry("1280x960")
        for path in capture_tabs(ui, args.screenshots):
            print(f"wrote {path}")
        ui.destroy()
        return 0
    try:
        ui.mainloop()
    finally:  # an exception out of the main loop must not leave the TensorBoard server running
        ui.app.tensorboard.stop()
    return 0


if __name__ == "__main__":
    run_main(main)
