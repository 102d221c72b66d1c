#!/usr/bin/env python
"""Regenerate every screenshot in docs/images from the real app, under Xvfb, with no network.

    python scripts/make_screenshots.py [--output docs/images] [--workdir DIR] [--steps 40]

It builds a demo in --workdir (a temporary folder unless given): a tiny random Wan I2V model
(modules/synthetic/tiny_model.py, as scripts/make_tiny_model.py writes it), an E2V dataset of synthetic clips and
element images (numpy / opencv) with a held-out VALIDATION dataset, and a config that trains an E2V LoRA on
them, samples every 10 steps and measures the validation loss every 5.
Then it opens the window (TrainUI), loads that config as *Load config…* does, presses Start and lets the run
finish in the window — so the samples tab and the curves tab show a real run's samples and loss — and writes:

    gui-<tab>.png                   every tab after the run (general … visualization, samples, curves)
    gui-running.png                 the samples tab while the run trains (the viewer following it)
    gui-runs.png                    the run browser: the demo run finished, a second one stopped after two steps
    gui-wide-training.png           the training tab of a 1920x1080 window (two columns)
    gui-e2v-elements-errors.png     the element table with two bad rows

The window runs on a private Xvfb server (started here on a free display; `Xvfb` must be installed:
apt-get install xvfb), so the screenshots look the same on every machine, whatever the desktop. Relative
paths are used inside the demo folder, so no machine-specific path shows in the images.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from _bootstrap import REPO_ROOT, OneLineArgumentParser, run_main

SCREEN = "1920x1080x24"
WINDOW = "1280x960"
WIDE_WINDOW = "1920x1080"
SIZE, FRAMES = 48, 17  # the demo's training clips: 48 × 48, 17 frames (tiny: the run takes a minute on a CPU)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = OneLineArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default=str(REPO_ROOT / "docs" / "images"), help="where the PNGs go")
    parser.add_argument("--workdir", help="where the demo (model, data, run) is built; default: a temporary folder, "
                                          "removed afterwards")
    parser.add_argument("--steps", type=int, default=40, help="training steps of the demo run (a multiple of 4: four clips an epoch; samples every 10)")
    parser.add_argument("--use-display", action="store_true",
                        help="draw on $DISPLAY instead of a private Xvfb server (to watch it happen)")
    return parser.parse_args(argv)


# --- the display --------------------------------------------------------------------------------------------------
def start_xvfb() -> subprocess.Popen:
    """Xvfb on a display it picks itself (-displayfd: no race with other servers); sets DISPLAY."""
    if shutil.which("Xvfb") is None:
        raise SystemExit("error: Xvfb is not installed (apt-get install xvfb); or pass --use-display to draw on "
                         "$DISPLAY")
    read, write = os.pipe()
    server = subprocess.Popen(["Xvfb", "-displayfd", str(write), "-screen", "0", SCREEN, "-nolisten", "tcp"],
                              pass_fds=(write,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write)
    with os.fdopen(read) as pipe:
        number = pipe.readline().strip()
    if not number or server.poll() is not None:
        raise SystemExit("error: Xvfb did not start")
    os.environ["DISPLAY"] = f":{number}"
    return server


# --- the demo -----------------------------------------------------------------------------------------------------
def build_demo(root: Path, steps: int) -> Path:
    """The demo folder (model, dataset, dataset JSON, config); returns the config's path. Paths inside are
    relative to `root`, where the window runs."""
    from modules.synthetic.synthetic_data import e2v_dataset_json, write_e2v_dataset
    from modules.synthetic.tiny_model import write_tiny_model

    model = root / "models" / "wan-tiny-i2v"
    if not (model / "model_index.json").is_file():
        write_tiny_model("i2v", model)
    data = write_e2v_dataset(root / "datasets" / "e2v_demo", count=4, frames=FRAMES, height=SIZE, width=SIZE)
    write_e2v_dataset(root / "datasets" / "e2v_held_out", count=2, frames=FRAMES, height=SIZE, width=SIZE, seed=1)
    dataset = e2v_dataset_json(Path("datasets/e2v_demo"), SIZE, SIZE, FRAMES)
    held_out = json.loads(json.dumps(dataset["datasets"][0]))  # never trained on: the curves' validation loss
    held_out.update(data_root="datasets/e2v_held_out", type="VALIDATION")
    dataset["datasets"].append(held_out)
    (root / "e2v_dataset.json").write_text(json.dumps(dataset, indent=2), encoding="utf-8")
    elements = [f"datasets/e2v_demo/001_{name}.png" for name in ("subject", "object", "background")]
    prompt = (data / "001.txt").read_text(encoding="utf-8")
    config = {
        "model_type": "WAN_2_1", "training_method": "LORA", "base_model_name": "models/wan-tiny-i2v",
        "dataset_config": "e2v_dataset.json", "concepts": [], "resolution": [SIZE, SIZE], "frames": FRAMES,
        "epochs": steps // 4, "learning_rate": 2e-3, "learning_rate_scheduler": "COSINE",
        "learning_rate_warmup_steps": 5, "lora_rank": 8, "lora_alpha": 8,
        "validate_after": 5, "validate_after_unit": "STEP",
        "checkpointing": {"policy": "NONE"}, "workspace_dir": "workspace", "cache_dir": "workspace/cache",
        "output_model_destination": "output/e2v_demo_lora.safetensors", "tensorboard": True,
        "sample_after": 10, "sample_after_unit": "STEP", "sample_at_end": False,
        "samples": [
            {"prompt": prompt, "elements": elements, "frames": 25, "height": SIZE, "width": SIZE, "steps": 4,
             "cfg_scale": 1.0, "seed": 42},
            {"prompt": "a blue square moving left to right over teal", "elements": elements[:1], "frames": 9,
             "height": SIZE, "width": SIZE, "steps": 4, "cfg_scale": 1.0, "seed": 7},
        ],
    }
    path = root / "demo_config.json"
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return path


# --- the window ---------------------------------------------------------------------------------------------------
def check_run(ui) -> None:
    settle_events(ui)
    if ui.app.training.state.error:
        raise SystemExit(f"error: the demo run failed: {ui.app.training.state.error}")


def settle_events(ui) -> None:
    for _ in range(10):
        ui.update()
        time.sleep(0.02)


def take_screenshots(config: Path, output: Path) -> list[Path]:
    from modules.ui.controllers.app_controller import AppController
    from modules.ui.views.main_window import TAB_CLASSES, TrainUI
    from modules.ui.views.screenshots import capture_tabs, capture_window, pump_until, scroll_to, settle

    written = []
    ui = TrainUI(AppController())
    try:
        ui.geometry(WINDOW)
        ui.update()
        ui.load_config(str(config))
        if ui.app.problems():
            raise SystemExit(f"error: the demo config has problems: {ui.app.problems()}")
        ui.show_tab("samples")
        ui.bottom_bar.start_button.invoke()
        pump_until(ui, lambda: (len(ui.app.gallery) >= 2 and ui.app.training.state.step >= 12)
             or not ui.app.training.running, 600, "the first samples of the demo run")
        check_run(ui)
        settle(ui, 1.0)
        written.append(capture_window(ui, output / "gui-running.png"))
        pump_until(ui, lambda: not ui.app.training.running, 900, "the end of the demo run")
        check_run(ui)
        finished = ui.app.training.state.run_name
        time.sleep(1.1)  # a second run of the same config: another name (runs are named by the second they start)
        ui.bottom_bar.start_button.invoke()  # ...stopped after two steps: the runs tab shows both states
        pump_until(ui, lambda: ui.app.training.state.step >= 2 or not ui.app.training.running, 600,
                   "the second demo run")
        ui.bottom_bar.stop_button.invoke()
        pump_until(ui, lambda: not ui.app.training.running, 600, "the stop of the second demo run")
        check_run(ui)
        ui.app.select_run(finished)  # the finished run's samples and curves, as a click in the runs tab shows them
        ui.refresh()
        samples = ui.tab("samples")
        samples.gallery.select_index(0)
        samples.refresh()
        written += capture_tabs(ui, output, [cls.name for cls in TAB_CLASSES])
        ui.geometry(WIDE_WINDOW)  # a 1920 px window: the forms in two columns
        ui.show_tab("training")
        settle(ui, 1.0)
        written.append(capture_window(ui, output / "gui-wide-training.png"))
        ui.geometry(WINDOW)
        settle(ui)

        elements = ui.app.dataset.elements  # two mistakes a user makes in the table, shown on their rows
        elements.set(1, "vae.repeat", "0")
        elements.set(2, "vae.position", "1")
        ui.refresh()
        elements_tab = ui.show_tab("E2V elements")
        settle(ui)
        scroll_to(elements_tab, elements_tab.table, above=260)  # the dataset's last fields, then the table
        written.append(capture_window(ui, output / "gui-e2v-elements-errors.png"))
    finally:
        ui.destroy()
    return written


def main() -> int:
    args = parse_args()
    output = Path(args.output).resolve()
    output.mkdir(parents=True, exist_ok=True)
    server = None if args.use_display else start_xvfb()
    workdir = Path(args.workdir).resolve() if args.workdir else Path(tempfile.mkdtemp(prefix="wan-screenshots-"))
    workdir.mkdir(parents=True, exist_ok=True)
    previous = Path.cwd()
    try:
        config = build_demo(workdir, args.steps)
        os.chdir(workdir)  # the config's relative paths, and what the fields show
        for path in take_screenshots(config.relative_to(workdir), output):
            print(f"wrote {path}")
    except TimeoutError as e:
        raise SystemExit(f"error: {e}") from None
    finally:
        os.chdir(previous)
        if server is not None:
            server.terminate()
            server.wait(10)
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    run_main(main)
