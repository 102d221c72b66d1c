"""The window under Xvfb: it starts, every tab renders, typed values flow through the config with
errors beside their fields, the E2V elements tab configures a dataset folder, export and load."""
from __future__ import annotations

import json

from modules.config.e2v_dataset_config import load_dataset_config
from modules.config.loading import load_train_config
from modules.ui.controllers.app_controller import APP_NAME
from modules.ui.controllers.layout import TAB_NAMES
from modules.ui.views.screenshots import pump_until as pump
from tests.ui.conftest import write_e2v_folder


def field(ui, tab, key):
    return next(form.rows[key] for form in ui.tab(tab).forms if key in form.rows)


def test_the_app_starts_and_every_tab_renders(make_ui):
    ui = make_ui()
    assert APP_NAME in ui.title()
    for name in TAB_NAMES:
        ui.show_tab(name)
        ui.update()
        assert ui.tabview.get() == name
        assert ui.tabs[name].body.winfo_children(), f"tab {name} is empty"
    assert tuple(ui.tabs) == TAB_NAMES
    keys = {key for tab in ui.tabs.values() for form in tab.forms for key in form.rows}
    assert set(ui.app.config.specs) - {"model_type", "training_method", "dataset_config"} <= keys
    # a fresh config has no base model and no data: Start waits for them and says so (it used to start and fail)
    assert ui.bottom_bar.start_button.cget("state") == "disabled"
    assert ui.bottom_bar.status_text.startswith("cannot start: config key 'base_model_name' is empty")
    assert ui.bottom_bar.stop_button.cget("state") == "disabled"
    assert ui.tabs["concepts"].list_view.empty.cget("text").startswith("(none yet: add a concept folder")


def test_a_bad_value_is_shown_beside_its_field_and_blocks_start(make_ui, tmp_path):
    from tests.fixtures.wan_configs import TRANSFORMER_1_3B, write_config_folder

    ui = make_ui()
    ui.app.config.set("base_model_name", str(write_config_folder(tmp_path / "wan", TRANSFORMER_1_3B)))
    ui.app.concepts.add(path=str(tmp_path))
    epochs = field(ui, "training", "epochs")
    epochs.input.var.set("ten")
    ui.update()
    assert epochs.error_text == "must be a whole number"
    assert ui.bottom_bar.start_button.cget("state") == "disabled"
    assert ui.bottom_bar.status_text.startswith("cannot start: config key 'epochs'")
    ui.bottom_bar.start_button.invoke()  # disabled: nothing happens, nothing crashes
    assert not ui.app.training.running
    epochs.input.var.set("12")
    ui.update()
    assert epochs.error_text == "" and ui.app.config.value("epochs") == 12
    assert ui.bottom_bar.start_button.cget("state") == "normal"


def test_dropdowns_switches_and_lists_write_typed_values(make_ui):
    ui = make_ui()
    field(ui, "training", "learning_rate_scheduler").input.widget._dropdown_callback("COSINE")
    field(ui, "general", "tensorboard").input.widget.toggle()
    ui.show_tab("LoRA")
    targets = field(ui, "LoRA", "lora_target_modules").input.widget
    targets.focus_set()
    ui.update()
    targets.delete("1.0", "end")
    targets.insert("1.0", "attn1.to_q\nattn1.to_v")
    targets._textbox.event_generate("<KeyRelease>")  # what typing sends to the inner Tk text widget
    ui.update()
    data = ui.app.config.data
    assert (data["learning_rate_scheduler"], data["tensorboard"]) == ("COSINE", False)
    assert data["lora_target_modules"] == ["attn1.to_q", "attn1.to_v"]


def test_a_worker_error_is_shown_in_a_dialog_and_the_ui_returns_to_idle(make_ui, tmp_path):
    ui = make_ui()
    ui.app.concepts.add(path=str(tmp_path))
    base = tmp_path / "wan"  # passes the start-up check (a folder with model_index.json), fails in the worker
    base.mkdir()
    (base / "model_index.json").write_text("{}")
    ui.app.config.set("base_model_name", str(base))
    ui.app.config.set("workspace_dir", str(tmp_path / "workspace"))
    ui.update()
    ui.bottom_bar.start_button.invoke()
    pump(ui, lambda: not ui.app.training.running, 60, "the worker to finish")
    pump(ui, lambda: ui.last_dialog is not None, 5, "the error dialog")
    assert "transformer" in ui.last_dialog.message and "config.json" in ui.last_dialog.message
    assert ui.bottom_bar.start_button.cget("state") == "normal"
    ui.last_dialog.ok.invoke()


def test_an_e2v_dataset_folder_is_configured_in_the_elements_tab(make_ui, tmp_path):
    data = write_e2v_folder(tmp_path / "e2v")
    ui = make_ui()
    tab = ui.show_tab("E2V elements")
    tab.path_var.set(str(tmp_path / "e2v.json"))
    field(ui, "E2V elements", "data_root").input.var.set(str(data))
    ui.update()
    assert tab.preview_summary.cget("text").startswith("3 of 3 samples complete")
    assert [m.cget("text") for m, _ in tab.row_labels] == ["3/3", "2/3", "3/3"]

    tab.add_button.invoke()  # add
    ui.update()
    assert len(tab.cells) == 4
    name = tab.cells[3][0]
    name.var.set("object")  # duplicate name: shown on the row, Start blocked
    ui.update()
    assert "names must be unique" in tab.row_labels[3][1].cget("text")
    assert ui.bottom_bar.start_button.cget("state") == "disabled"
    assert "E2V dataset" in ui.bottom_bar.status_text

    tab.row_buttons[3]["✕"].invoke()  # remove
    ui.update()
    assert len(tab.cells) == 3 and tab.row_labels[2][1].cget("text") == ""

    tab.row_buttons[0]["↓"].invoke()  # reorder
    ui.update()
    assert [r["name"] for r in ui.app.dataset.elements.rows] == ["object", "main_subject", "background"]

    tab.cells[0][1].var.set("_object.png, _toy.png")  # suffixes of the (now first) object row
    ui.update()
    tab._save()
    ui.update()
    saved = load_dataset_config(tmp_path / "e2v.json")
    assert [e.name for e in saved.datasets[0].elements] == ["object", "main_subject", "background"]
    assert saved.datasets[0].elements[0].suffixes == ["_object.png", "_toy.png"]
    assert ui.app.config.value("dataset_config") == str(tmp_path / "e2v.json")
    assert "saved in" in tab.file_state.cget("text")


def test_export_writes_a_config_the_cli_loads_and_load_brings_it_back(make_ui, tmp_path):
    ui = make_ui()
    ui.app.config.set("lora_rank", "8")
    ui.app.concepts.add(path="clips")
    ui.update()
    ui.export_config(str(tmp_path / "config.json"))
    assert "config exported" in ui.bottom_bar.status_text
    exported = (tmp_path / "config.json").read_bytes()
    assert load_train_config(tmp_path / "config.json").lora_rank == 8

    other = make_ui()
    other.load_config(str(tmp_path / "config.json"))
    assert field(other, "LoRA", "lora_rank").input.var.get() == "8"
    other.export_config(str(tmp_path / "again.json"))
    assert (tmp_path / "again.json").read_bytes() == exported
    assert json.loads(exported)["concepts"][0]["path"] == "clips"


def test_the_training_tab_shows_only_the_chosen_optimizers_options(make_ui):
    ui = make_ui()
    ui.show_tab("training")
    ui.update()

    def visible(key: str) -> bool:
        row = field(ui, "training", key)
        return row.visible and row.label.winfo_ismapped()

    assert visible("optimizer_options.ADAMW.beta1") and not visible("optimizer_options.PRODIGY.d_coef")
    field(ui, "training", "optimizer").input.widget._dropdown_callback("PRODIGY")
    ui.update()
    assert ui.app.config.value("optimizer") == "PRODIGY"
    assert visible("optimizer_options.PRODIGY.d_coef") and not visible("optimizer_options.ADAMW.beta1")
    prodigy = field(ui, "training", "optimizer_options.PRODIGY.d_coef")
    prodigy.input.var.set("0.5")
    ui.update()
    assert ui.app.config.build().optimizer_options.PRODIGY.d_coef == 0.5


def test_loss_and_schedule_options_show_only_where_they_apply(make_ui):
    ui = make_ui()
    ui.show_tab("training")
    ui.update()

    def visible(key: str) -> bool:
        return field(ui, "training", key).visible

    assert not visible("huber_c") and not visible("learning_rate_cycles") and not visible("learning_rate_min_factor")
    field(ui, "training", "loss_type").input.widget._dropdown_callback("PSEUDO_HUBER")
    field(ui, "training", "learning_rate_scheduler").input.widget._dropdown_callback("COSINE_WITH_RESTARTS")
    ui.update()
    assert visible("huber_c") and visible("huber_schedule") and visible("learning_rate_cycles")
    assert visible("learning_rate_min_factor")


def test_each_sigma_distribution_shows_its_own_parameters(make_ui):
    ui = make_ui()
    ui.show_tab("training")
    distribution = field(ui, "training", "timestep_distribution").input.widget
    for name, own in [("UNIFORM", set()), ("LOGIT_NORMAL", {"logit_mean", "logit_std"}), ("SIGMOID", {"sigmoid_scale"}),
                      ("HEAVY_TAIL", {"mode_scale"}), ("COSMAP", set())]:
        distribution._dropdown_callback(name)
        ui.update()
        shown = {key for key in ("logit_mean", "logit_std", "sigmoid_scale", "mode_scale")
                 if field(ui, "training", key).visible}
        assert shown == own, name


def test_the_concepts_tab_counts_each_concepts_clips(make_ui, tiny_model, tmp_path):
    from modules.synthetic.synthetic_data import write_video_dataset

    clips = write_video_dataset(tmp_path / "clips", count=2, frames=9, height=32, width=32)
    ui = make_ui()
    ui.app.config.set("base_model_name", str(tiny_model("t2v")))
    ui.app.config.set("cache_dir", str(tmp_path / "cache"))
    ui.app.config.set("frames", "9")
    ui.app.config.set("resolution", "32, 32")
    ui.app.concepts.add(path=str(clips), frame_sample_strategy="SLIDE", frame_stride=4)
    ui.show_tab("concepts")
    tab = ui.tabs["concepts"]
    tab.stats_button.invoke()
    pump(ui, lambda: tab.stats_button.cget("state") == "normal" and tab.stats_box.get("1.0", "end").strip(),
         60, "the concept statistics")
    text = tab.stats_box.get("1.0", "end")
    assert "clips (standard" in text and "2 files, 2 usable samples" in text and "9 frames: 2" in text
    assert text.strip().endswith("2 training items per epoch")


def test_the_vram_estimate_is_shown_beside_start(make_ui, tmp_path):
    from tests.fixtures.wan_configs import TRANSFORMER_1_3B, write_config_folder

    ui = make_ui()
    ui.app.vram.detect = False
    ui.app.config.set("base_model_name", str(write_config_folder(tmp_path / "wan", TRANSFORMER_1_3B)))
    ui.app.vram.gpu_gib = 2.0  # over it even after AUTO's plan: the estimate's longest text, with a suggestion
    label = ui.bottom_bar.vram_label
    pump(ui, lambda: label.cget("text").startswith("VRAM ≈"), 60, f"the VRAM estimate ({ui.app.vram.text()!r})")
    assert "GiB" in label.cget("text") and "over 2 GiB: " in label.cget("text")
    assert "\nRAM ≈ " in label.cget("text")  # the host RAM estimate on the line under it
    ui.update()
    # whole at the default window width (beside the step counters it had no room and was cut off to nothing)
    assert ui.winfo_width() == 1280
    left = label.winfo_rootx() - ui.winfo_rootx()
    assert label.winfo_width() >= label.winfo_reqwidth() and left >= 0 and left + label.winfo_width() <= 1280
    start = ui.bottom_bar.start_button
    assert label.winfo_rooty() >= start.winfo_rooty() + start.winfo_height()  # below the buttons, not under them


def test_the_tensorboard_button_serves_the_runs_logs_on_localhost(make_ui, tmp_path):
    import urllib.request

    from torch.utils.tensorboard import SummaryWriter

    workspace = tmp_path / "workspace"
    with SummaryWriter(str(workspace / "tensorboard")) as writer:
        writer.add_scalar("loss", 0.5, 1)
    ui = make_ui()
    opened = []
    ui.app.tensorboard.open_browser = opened.append
    ui.app.config.set("workspace_dir", str(workspace))
    try:
        ui.bottom_bar.tensorboard_button.invoke()
        assert opened and opened[0].startswith("http://127.0.0.1:")
        with urllib.request.urlopen(opened[0], timeout=10) as response:
            assert response.status == 200
        assert ui.bottom_bar.status_text.startswith("tensorboard serves http://127.0.0.1:")
    finally:
        ui.app.tensorboard.stop()
    assert ui.app.tensorboard.process is None


def test_the_tensorboard_button_without_logs_says_so(make_ui, tmp_path):
    ui = make_ui()
    ui.app.config.set("workspace_dir", str(tmp_path / "fresh"))
    ui.bottom_bar.tensorboard_button.invoke()
    assert "no tensorboard logs yet" in ui.last_dialog.message
    assert "no tensorboard logs yet" in ui.bottom_bar.status_text  # not wiped by the "starting" message's end


def test_the_model_tab_edits_the_base_loras_and_the_sampling_tab_the_overrides(make_ui):
    ui = make_ui()
    ui.show_tab("model")
    tab = ui.tabs["model"]
    tab.base_loras.add_button.invoke()
    ui.update()
    assert len(tab.base_loras.cards) == 1 and ui.app.config.data["base_loras"][0]["expert"] == "BOTH"
    assert tab.field_errors() == {"base_loras[0].path": tab.base_loras.field_errors()["base_loras[0].path"]}
    steps = field(ui, "sampling", "sample_overrides.steps")
    steps.input.var.set("4")
    ui.update()
    assert ui.app.config.value("sample_overrides.steps") == 4
