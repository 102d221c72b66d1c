"""Every error that needs no model is shown beside its field before Start, from the start-up check the command line
runs (trainer/preflight.start_up_problems), whatever it finds (wired generically: each problem's key is a field):
a base LoRA that is not there or not a LoRA, an Animate-2 sample without its image and driving video, a base model folder that is not there. They used to show
only after Start, in a "Training failed" dialog, with Start green."""
from __future__ import annotations

from modules.ui.controllers.app_controller import AppController
from tests.fixtures.wan_configs import TRANSFORMER_1_3B, write_config_folder
from tests.ui.test_gui_applies_controllers import animate2_folder


def startable(app, tmp_path, base):
    app.config.set("base_model_name", str(base))
    (tmp_path / "clips").mkdir(exist_ok=True)
    app.concepts.add(path=str(tmp_path / "clips"))
    app.config.set("workspace_dir", str(tmp_path / "ws"))
    app.config.set("output_model_destination", str(tmp_path / "out" / "lora.safetensors"))
    assert app.can_start() == (True, ""), app.can_start()


def test_start_up_problems_show_beside_their_fields_and_block_start(tmp_path):
    app = AppController(tmp_path / "presets")
    startable(app, tmp_path, write_config_folder(tmp_path / "t2v", TRANSFORMER_1_3B))
    app.base_loras.add(path=str(tmp_path / "speed.safetensors"))  # not there
    assert "does not exist" in app.base_loras.error(0, "path")
    assert app.error_tabs() == {"model": 1}
    ok, reason = app.can_start()
    assert not ok and reason.startswith("config key 'base_loras[0].path'")
    assert app.problems() == []  # Export is still allowed: a config for another machine may name its paths
    (tmp_path / "speed.safetensors").write_bytes(b"")
    app.config.recheck_start()  # the window does this every 2 s: the file is there now (but empty: still refused)
    assert app.base_loras.error(0, "path") and "does not exist" not in app.base_loras.error(0, "path")
    app.base_loras.remove(0)
    assert app.can_start() == (True, "")
    app.config.set("base_model_name", str(tmp_path / "gone"))  # a missing base folder marks the model tab
    assert "does not exist" in app.config.error("base_model_name") and app.error_tabs() == {"model": 1}


def test_an_animate2_samples_missing_inputs_are_named_beside_them(tmp_path):
    app = AppController(tmp_path / "presets")
    startable(app, tmp_path, animate2_folder(tmp_path / "animate2"))
    app.samples.add(prompt="a dancer")
    assert "driving_video" in app.samples.error(0, "image") or "driving_video" in app.samples.error(0, "driving_video")
    assert app.error_tabs().get("sampling") and not app.can_start()[0]


def test_a_missing_base_lora_through_the_window(make_ui, tmp_path):
    ui = make_ui()
    startable(ui.app, tmp_path, write_config_folder(tmp_path / "t2v", TRANSFORMER_1_3B))
    model = ui.show_tab("model")
    model.base_loras.add_button.invoke()  # model tab -> Add base LoRA
    ui.update()
    path_row = model.base_loras.cards[0][2].rows["path"]
    path_row.input.var.set(str(tmp_path / "nowhere.safetensors"))
    ui.update()
    assert "does not exist" in path_row.error_text
    assert ui.tab_label("model") == "model ⚠ 1"
    assert ui.bottom_bar.start_button.cget("state") == "disabled"
    assert "cannot start: config key 'base_loras[0].path'" in ui.bottom_bar.status_text
    ui.app.vram.wait(120)
