"""What the window shows under Xvfb is true: an error's tab is marked, fields the base cannot use are hidden, a
missing concept folder is flagged beside its field as it is typed, a new status message replaces the old one."""
from __future__ import annotations

from tests.fixtures.wan_configs import TRANSFORMER_1_3B, write_config_folder
from tests.ui.test_gui_truth_controllers import two_expert_folder


def row_of(ui, tab, key):
    return next(form.rows[key] for form in ui.tab(tab).forms if key in form.rows)


def test_a_tab_holding_an_error_is_marked_until_the_error_is_fixed(make_ui, tmp_path):
    ui = make_ui()
    ui.show_tab("general")
    row_of(ui, "training", "epochs").input.var.set("ten")  # typed in a tab that is not in view
    ui.update()
    assert ui.tab_label("training") == "training ⚠ 1" and ui.tab_label("general") == "general"
    ui.app.config.set("lora_rank", "x")
    ui.update()
    assert ui.tab_label("LoRA") == "LoRA ⚠ 1"
    row_of(ui, "training", "epochs").input.var.set("10")
    ui.app.config.set("lora_rank", "16")
    ui.update()
    assert ui.tab_label("training") == "training" and ui.tab_label("LoRA") == "LoRA"


def test_expert_fields_appear_only_for_a_two_expert_base(make_ui, tmp_path):
    ui = make_ui()
    rows = [row_of(ui, "training", k) for k in ("learning_rate_high_noise", "train_expert", "vace_context_scale")]
    ui.app.config.set("base_model_name", str(write_config_folder(tmp_path / "t2v", TRANSFORMER_1_3B)))
    ui.update()
    form = next(f for f in ui.tab("training").forms if "train_expert" in f.rows)
    experts, vace = (next(title for title, keys in form.titles if key in keys)
                     for key in ("train_expert", "vace_context_scale"))
    assert [r.visible for r in rows] == [False, False, False]
    assert not experts.winfo_manager() and not vace.winfo_manager()  # no empty section titles either
    assert not row_of(ui, "model", "transformer_2_override").visible
    ui.app.config.set("base_model_name", str(two_expert_folder(tmp_path / "a14b")))
    ui.update()
    assert [r.visible for r in rows] == [True, True, False]
    assert experts.winfo_manager() == "grid" and not vace.winfo_manager()
    assert row_of(ui, "model", "transformer_2_override").visible
    ui.app.vram.wait(120)  # the estimate's thread must not be inside torch when the test process exits


def test_a_missing_concept_folder_is_shown_beside_its_field_as_it_is_typed(make_ui, tmp_path):
    ui = make_ui()
    (tmp_path / "clips").mkdir()
    ui.app.concepts.add(path=str(tmp_path / "clips"))
    ui.show_tab("concepts")
    ui.update()
    path_row = ui.tab("concepts").list_view.cards[0][2].rows["path"]
    assert path_row.error_text == ""
    path_row.input.var.set(str(tmp_path / "clip"))  # half typed
    ui.update()
    assert path_row.error_text.startswith(f"'{tmp_path / 'clip'}' does not exist")
    assert ui.tab_label("concepts") == "concepts ⚠ 1"
    path_row.input.var.set(str(tmp_path / "clips"))
    ui.update()
    assert path_row.error_text == "" and ui.tab_label("concepts") == "concepts"


def test_an_action_message_replaces_an_old_error_in_the_status_line(make_ui, tmp_path):
    ui = make_ui()
    ui.app.training.say("error: an earlier run failed", error=True)
    ui.load_config(str(tmp_path / "missing.json"))  # refused: no such file
    assert ui.bottom_bar.status_text.startswith("cannot do that:")
    assert "an earlier run failed" not in ui.bottom_bar.status_text
    ui.set_status("preset saved to /tmp/p.json")
    assert ui.bottom_bar.status_text.splitlines()[0] == "preset saved to /tmp/p.json"


def test_the_memory_switches_show_what_auto_chose(make_ui, tmp_path):
    from modules.ui.controllers.fields import BOOL
    from modules.ui.views.screenshots import pump_until
    from tests.fixtures.wan_configs import TRANSFORMER_14B

    ui = make_ui()
    config = ui.app.config
    config.set("base_model_name", str(write_config_folder(tmp_path / "t2v14b", TRANSFORMER_14B)))
    ui.app.concepts.add(path=str(tmp_path))
    config.set("gpu_memory_gib", "24")
    pump_until(ui, lambda: bool(config.auto_choices), 120, "AUTO's plan")
    ui.update()
    switches = [key for key in config.auto_choices if config.spec(key).kind == BOOL]
    assert switches
    for key in switches:
        row = row_of(ui, "training", key)
        assert row.input.var.get() is True and config.value(key) is False  # shown, not written
        assert row.note_text.startswith("chosen by AUTO for 24 GiB")


def test_resolutions_are_shown_as_width_x_height(make_ui):
    ui = make_ui()
    resolution = row_of(ui, "data", "resolution")
    assert resolution.input.var.get() == "832x480" and resolution.label.cget("text") == "Resolution (W x H)"
    resolution.input.var.set("1280x720")
    ui.update()
    assert ui.app.config.value("resolution") == [720, 1280] and resolution.error_text == ""


def test_the_bottom_bar_shows_caching_progress_and_what_a_finished_run_skipped(make_ui):
    from modules.ui.controllers.training_controller import STARTING, Event
    from modules.ui.views.screenshots import pump_until

    ui = make_ui()
    training = ui.app.training
    training.state.phase = STARTING  # as start() leaves it; the events are what a worker would send
    training.queue.put(Event("progress", ("caching (vae)", 1, 4)))
    pump_until(ui, lambda: ui.bottom_bar.step_label.cget("text") == "caching (vae) 1/4", 10, "the caching count")
    assert abs(ui.bottom_bar.progress.get() - 0.25) < 1e-6
    for event in (Event("warning", "every preview sample (1) was skipped: sample 0: bad"),
                  Event("finished", ["out/lora.safetensors"]), Event("done")):
        training.queue.put(event)
    pump_until(ui, lambda: not training.running, 10, "the end")
    assert ui.bottom_bar.status_text.startswith("done: out/lora.safetensors; every preview sample (1) was skipped")
    assert "every preview sample (1) was skipped" in ui.last_dialog.message
