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
    assert [r.visible for r in rows] == [False, False, False]
    assert not row_of(ui, "model", "transformer_2_override").visible
    ui.app.config.set("base_model_name", str(two_expert_folder(tmp_path / "a14b")))
    ui.update()
    assert [r.visible for r in rows] == [True, True, False]
    assert row_of(ui, "model", "transformer_2_override").visible


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
