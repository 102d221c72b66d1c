"""A tiny-model training driven from the window under Xvfb: Start and Stop (a backup, then idle), and
an exported config that reproduces the GUI's run from the CLI (the same LoRA file, byte for byte)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT
from modules.ui.views.screenshots import pump_until as pump


@pytest.fixture(scope="module")
def tiny_videos(tmp_path_factory):
    from modules.synthetic.synthetic_data import write_video_dataset

    return write_video_dataset(tmp_path_factory.mktemp("gui-videos"), count=2, frames=9, height=32, width=32)


def configure(ui, model_dir, data_dir, work, epochs):
    """Fill the form the way a user would: through the config controller's typed bindings."""
    config = ui.app.config
    for key, text in (("base_model_name", str(model_dir)), ("resolution", "32, 32"), ("frames", "9"),
                      ("epochs", str(epochs)), ("lora_rank", "4"), ("lora_alpha", "4"), ("learning_rate", "0.001"),
                      ("workspace_dir", str(work / "workspace")), ("cache_dir", str(work / "cache")),
                      ("output_model_destination", str(work / "output" / "lora.safetensors"))):
        config.set(key, text)
    for key in ("tensorboard", "sample_at_end"):
        config.set(key, False)
    config.set("checkpointing.policy", "NONE")
    ui.app.concepts.add(path=str(data_dir))
    ui.update()
    assert ui.app.problems() == []


def test_training_is_started_and_stopped_from_the_gui(make_ui, tiny_model, tiny_videos, tmp_path):
    ui = make_ui()
    configure(ui, tiny_model("t2v"), tiny_videos, tmp_path, epochs=500)
    bar = ui.bottom_bar
    bar.start_button.invoke()
    ui.update()
    assert bar.start_button.cget("state") == "disabled" and bar.load_button.cget("state") == "disabled"
    pump(ui, lambda: ui.app.training.state.step >= 1, 180, "the first training step")
    assert bar.stop_button.cget("state") == "normal"
    assert bar.step_label.cget("text").startswith("step ") and re.fullmatch(r"loss \d+\.\d{4}", bar.loss_label.cget("text"))
    bar.stop_button.invoke()
    pump(ui, lambda: not ui.app.training.running, 120, "the stop")
    state = ui.app.training.state
    assert state.backup_path and os.path.isdir(state.backup_path)
    assert "backup written" in bar.status_text
    assert bar.start_button.cget("state") == "normal" and bar.stop_button.cget("state") == "disabled"
    assert ui.last_dialog is None  # a stop is not an error
    assert "step-" in ui.tab("backup").latest.cget("text")


def test_the_exported_config_reproduces_the_gui_run_from_the_cli(make_ui, tiny_model, tiny_videos, tmp_path,
                                                                   monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")  # the LoRA header's creation date
    ui = make_ui()
    configure(ui, tiny_model("t2v"), tiny_videos, tmp_path, epochs=1)
    ui.export_config(str(tmp_path / "config.json"))
    ui.bottom_bar.start_button.invoke()
    pump(ui, lambda: not ui.app.training.running, 240, "the GUI run")
    assert ui.last_dialog is None, ui.last_dialog and ui.last_dialog.message
    lora = tmp_path / "output" / "lora.safetensors"
    assert ui.app.training.state.outputs == [str(lora)]
    gui_bytes = lora.read_bytes()

    for folder in ("workspace", "cache", "output"):  # the CLI starts from nothing, like a new machine
        shutil.rmtree(tmp_path / folder)
    result = subprocess.run([sys.executable, "scripts/train.py", "--config-path", str(tmp_path / "config.json")],
                            cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert lora.read_bytes() == gui_bytes  # same LoRA bytes: weights bit for bit, header included
