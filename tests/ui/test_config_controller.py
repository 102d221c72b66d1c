"""The config controller: fields generated from metadata, typed bindings, errors per field, presets,
export / load round trip. No display needed."""
from __future__ import annotations

import json

import pytest

from modules.config.loading import load_train_config
from modules.config.train_config import ConceptConfig, TrainConfig
from modules.optimizer.registry import OPTIMIZERS
from modules.ui.controllers.app_controller import AppController
from modules.ui.controllers.config_controller import ConfigController
from modules.ui.controllers.fields import (
    BOOL,
    CHOICE,
    FLOAT,
    INT,
    INT_LIST,
    JSON,
    PATH,
    RESOLUTION,
    TEXT,
    TEXT_LIST,
    FieldError,
    format_value,
    parse_text,
)
from modules.ui.controllers.layout import TABS, placed_keys, sections_of
from modules.util.base_config import ConfigError
from modules.util.errors import UserError


@pytest.fixture
def config(tmp_path) -> ConfigController:
    return ConfigController(tmp_path / "presets")


# --- fields from metadata -------------------------------------------------------------------------
def test_widget_kinds_come_from_the_field_types(config):
    kinds = {key: spec.kind for key, spec in config.specs.items()}
    assert kinds["optimizer"] == CHOICE and config.specs["optimizer"].choices == tuple(OPTIMIZERS)
    assert kinds["tensorboard"] == BOOL
    assert kinds["epochs"] == INT and kinds["learning_rate"] == FLOAT
    assert kinds["lora_blocks"] == INT_LIST and kinds["lora_target_modules"] == TEXT_LIST
    assert kinds["resolution"] == RESOLUTION and kinds["frames"] == JSON  # one value or a list of them
    assert kinds["base_model_name"] == PATH and config.specs["base_model_name"].path_mode == "dir"
    assert kinds["train_device"] == TEXT
    assert config.specs["e2v.e2v_type"].choices == ("auto", "dual", "vae", "clip")  # read from the doc
    assert config.specs["epochs"].doc == "Passes over the data."


def test_every_config_field_is_reachable_from_a_tab(config):
    layout_keys = {k for tab in TABS for section in tab.sections for k in section.keys}
    assert layout_keys <= set(config.specs), "the layout names a field that does not exist"
    shown = placed_keys() | {k for s in sections_of("general", config.specs) for k in s.keys}
    assert set(config.specs) | {"concepts", "samples"} <= shown


def test_a_field_no_tab_places_lands_in_the_other_section():
    sections = sections_of("general", ["epochs", "brand_new_option"])
    assert sections[-1].title == "Other" and sections[-1].keys == ("brand_new_option",)


@pytest.mark.parametrize("kind, text, value", [
    (INT, " 12 ", 12), (FLOAT, "1e-4", 1e-4), (INT_LIST, "480, 832", [480, 832]), (INT_LIST, "[16,32]", [16, 32]),
    (TEXT_LIST, "attn1.to_q\nattn1.to_k, ffn.net.2", ["attn1.to_q", "attn1.to_k", "ffn.net.2"]),
])
def test_text_parses_to_typed_values(config, kind, text, value):
    spec = next(s for s in config.specs.values() if s.kind == kind)
    assert parse_text(spec, text) == value


@pytest.mark.parametrize("key, text", [("epochs", "ten"), ("learning_rate", "fast"), ("resolution", "832 by 480"),
                                       ("learning_rate", "nan")])
def test_text_that_does_not_parse_is_a_field_error(config, key, text):
    with pytest.raises(FieldError):
        parse_text(config.specs[key], text)


def test_formatted_values_parse_back_exactly(config):
    data = TrainConfig().to_dict()
    for key, spec in config.specs.items():
        value = config.value(key)
        if spec.kind in (INT, FLOAT, INT_LIST, TEXT_LIST, BOOL):
            assert parse_text(spec, format_value(spec, value)) == value, key
    assert data == config.data


# --- bindings and errors -------------------------------------------------------------------------------
def test_a_bad_value_is_reported_beside_its_field_and_blocks_start(config):
    config.set("epochs", "ten")
    assert config.error("epochs") == "must be a whole number"
    assert config.display("epochs") == "ten"  # the user's text stays in the field
    assert config.value("epochs") == 10  # the config keeps the last good value
    assert not config.is_valid
    with pytest.raises(ConfigError, match="epochs"):
        config.build()
    config.set("epochs", "3")
    assert config.error("epochs") == "" and config.is_valid and config.build().epochs == 3


def test_the_strict_config_check_runs_on_every_change_and_names_each_field(config):
    config.set("frames", "10")
    config.set("lora_rank", "0")
    config.set("e2v.e2v_type", "dual")
    assert config.error("frames").startswith("must be of the form 4k+1")
    assert config.error("lora_rank") == "must be at least 1, got 0"
    assert config.error("e2v.e2v_type") == ""
    assert len(config.problems()) == 2


def test_cross_field_errors_are_shown_on_the_field_they_name(config):
    config.set("min_sigma", "0.8")
    config.set("max_sigma", "0.5")
    assert "max_sigma" in config.error("min_sigma")


def test_switching_the_training_method_switches_an_output_format_that_no_longer_fits(config):
    config.set("training_method", "FINE_TUNE")
    assert config.value("output_model_format") == "DIFFUSERS"
    assert config.value("output_model_destination") == "output/lora"
    assert config.is_valid
    config.set("training_method", "LORA")
    assert config.value("output_model_format") == "COMFY_LORA"  # the default, which loads everywhere
    assert config.value("output_model_destination") == "output/lora.safetensors"
    config.set("training_method", "FINE_TUNE")
    config.set("training_method", "EMBEDDING")  # an embedding is one .safetensors file too
    assert config.value("output_model_destination") == "output/lora.safetensors"


def test_a_choice_outside_its_list_is_an_error(config):
    config.set("optimizer", "SGD")
    assert config.error("optimizer").startswith("must be one of ADAMW")


def test_listeners_hear_about_every_change(config):
    heard = []
    config.subscribe(heard.append)
    config.set("epochs", "2")
    config.load_dict({"epochs": 4})
    assert heard == ["epochs", None]


# --- files ---------------------------------------------------------------------------------------
def test_export_writes_what_the_cli_loads_and_it_loads_back_unchanged(config, tmp_path):
    config.set("base_model_name", "models/tiny")
    config.set("learning_rate", "3e-4")
    config.set("resolution", "256, 448")
    config.set("lora_target_modules", "attn1.to_q\nattn1.to_k")
    config.set("e2v.target_layout", "joint")
    config.set_list("concepts", [{"path": "data/clips", "repeats": 2}])
    path = config.export(tmp_path / "config.json")

    cli = load_train_config(path)
    assert cli == config.build()
    again = ConfigController(tmp_path / "presets")
    again.load_file(path)
    assert again.data == config.data
    again.export(tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == path.read_bytes()


def test_export_refuses_an_invalid_config(config, tmp_path):
    config.set("batch_size", "0")
    with pytest.raises(ConfigError, match="batch_size"):
        config.export(tmp_path / "config.json")
    assert not (tmp_path / "config.json").exists()


def test_loading_a_bad_file_names_the_key(config, tmp_path):
    (tmp_path / "bad.json").write_text(json.dumps({"epohcs": 3}))
    with pytest.raises(ConfigError, match="did you mean 'epochs'"):
        config.load_file(tmp_path / "bad.json")


# --- presets ---------------------------------------------------------------------------------------
def test_shipped_presets_are_listed_first(tmp_path):
    from modules.config.loading import PRESET_DIR

    presets = ConfigController(PRESET_DIR).list_presets()
    assert presets and all(p.shipped for p in presets)
    assert "#wan2.1 t2v 1.3B lora" in [p.name for p in presets]


def test_a_preset_sets_options_and_keeps_the_users_data():
    from modules.config.loading import PRESET_DIR

    config = ConfigController(PRESET_DIR)
    config.set_list("concepts", [{"path": "my/clips"}])
    config.set("epochs", "77")
    config.apply_preset("#wan2.2 ti2v 5B lora")
    assert config.value("model_type") == "WAN_2_2" and config.value("fps") == 24.0
    assert config.value("epochs") == 10  # back to the default: a preset starts from the defaults
    assert config.data["concepts"] == [ConceptConfig(path="my/clips").to_dict()]


def test_a_saved_user_preset_holds_only_the_changes_and_applies_back(config):
    config.set("lora_rank", "8")
    config.set("learning_rate", "0.0002")
    config.set_list("concepts", [{"path": "my/clips"}])
    path = config.save_preset("my rank 8")
    assert json.loads(path.read_text()) == {"learning_rate": 0.0002, "lora_rank": 8}
    assert [p.name for p in config.list_presets()] == ["my rank 8"]
    other = ConfigController(config.preset_dir)
    other.apply_preset("my rank 8")
    assert other.value("lora_rank") == 8 and other.value("learning_rate") == 0.0002


@pytest.mark.parametrize("name", ["", "#mine", "a/b", "../up"])
def test_unusable_preset_names_are_refused(config, name):
    with pytest.raises(UserError):
        config.save_preset(name)


# --- the detected variant ----------------------------------------------------------------------------
def write_fake_checkpoint(folder, z_dim=16, experts=False):
    (folder / "transformer").mkdir(parents=True)
    (folder / "vae").mkdir()
    index = {"_class_name": "WanPipeline", "transformer": ["diffusers", "WanTransformer3DModel"]}
    if experts:
        (folder / "transformer_2").mkdir()
        index.update(transformer_2=["diffusers", "WanTransformer3DModel"], boundary_ratio=0.875)
    (folder / "model_index.json").write_text(json.dumps(index))
    (folder / "transformer" / "config.json").write_text(json.dumps({"in_channels": 16, "out_channels": 16}))
    (folder / "vae" / "config.json").write_text(json.dumps({"z_dim": z_dim}))
    return folder


def test_the_model_type_is_the_checkpoints(config, tmp_path):
    """The model-type control follows detection: it shows the checkpoint's type and a config or preset that says
    otherwise becomes AUTO (it was a decorative control that contradicted detection in red and blocked nothing)."""
    config.set("model_type", "WAN_2_1")
    config.set("base_model_name", str(write_fake_checkpoint(tmp_path / "a14b", experts=True)))
    text, ok = config.detected_variant()
    assert ok and text.startswith("a14b_t2v") and "two experts" in text
    assert config.value("model_type") == "AUTO" and config.display("model_type") == "WAN_2_2"
    config.set("model_type", "WAN_2_1")  # not a choice while the checkpoint says
    assert config.value("model_type") == "AUTO"
    config.set("model_type", "WAN_2_2")  # agreeing is fine
    assert config.value("model_type") == "WAN_2_2" and not config.errors
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"config_version": 4, "model_type": "WAN_2_1",
                                "base_model_name": str(tmp_path / "a14b")}))
    config.load_file(path)
    assert config.value("model_type") == "AUTO" and config.display("model_type") == "WAN_2_2" and not config.errors
    config.set("base_model_name", "")  # no checkpoint: the control is a choice again
    config.set("model_type", "WAN_2_1")
    assert config.value("model_type") == "WAN_2_1" and config.detected_model_type() == ""


def test_a_preset_never_changes_the_users_model_data_or_folders(tmp_path):
    """Picking a shipped 14B preset used to put its model path (a folder that exists nowhere here) in place of the
    user's; it sets training settings only."""
    import shutil

    from modules.config.loading import PRESET_DIR

    (tmp_path / "presets").mkdir()
    for name in ("#wan2.2 animate-2 14B lora", "#wan2.1 t2v 1.3B finetune"):
        shutil.copy(PRESET_DIR / f"{name}.json", tmp_path / "presets")
    config = ConfigController(tmp_path / "presets")
    base = str(write_fake_checkpoint(tmp_path / "t2v"))
    config.set("base_model_name", base)
    config.set("workspace_dir", str(tmp_path / "ws"))
    config.set("output_model_destination", str(tmp_path / "mine.safetensors"))
    config.set_list("concepts", [{"path": "my/clips"}])
    config.set_list("samples", [{"prompt": "a cat"}])
    config.apply_preset("#wan2.2 animate-2 14B lora")
    assert config.value("base_model_name") == base and config.display("model_type") == "WAN_2_1"  # the checkpoint's
    assert config.value("workspace_dir") == str(tmp_path / "ws")
    assert config.value("output_model_destination") == str(tmp_path / "mine.safetensors")
    assert [row["prompt"] for row in config.data["samples"]] == ["a cat"] and config.data["concepts"][0]["path"]
    assert config.value("lora_rank") == 32 and config.value("frames") == 33  # the preset's training settings
    config.apply_preset("#wan2.1 t2v 1.3B finetune")  # a fine-tune writes a folder: the user's name, no suffix
    assert config.value("output_model_destination") == str(tmp_path / "mine")
    assert config.value("base_model_name") == base and not config.errors
    saved = json.loads(config.save_preset("mine").read_text())
    assert not {"base_model_name", "workspace_dir", "output_model_destination", "samples"} & set(saved)


def test_a_missing_model_folder_is_described_not_raised(config, tmp_path):
    config.set("base_model_name", str(tmp_path / "nowhere"))
    text, ok = config.detected_variant()
    assert "does not exist" in text and not ok


# --- the app as a whole ------------------------------------------------------------------------------
def test_start_waits_for_a_base_model_and_data_and_says_which(tmp_path):
    """A fresh config is valid but has neither: Start stays disabled with the reason (it used to start and fail)."""
    from tests.fixtures.wan_configs import TRANSFORMER_1_3B, write_config_folder

    app = AppController(tmp_path / "presets")
    assert app.can_start() == (False, app.missing_for_start())
    assert app.missing_for_start().startswith("config key 'base_model_name' is empty")
    app.config.set("base_model_name", str(tmp_path / "nowhere"))
    assert "base_model_name" in app.can_start()[1] and "does not exist" in app.can_start()[1]
    app.config.set("base_model_name", str(write_config_folder(tmp_path / "wan", TRANSFORMER_1_3B)))
    assert app.can_start() == (False, "no training data: add a concept in the concepts tab, or set an E2V dataset "
                                      "JSON in the E2V elements tab")
    app.concepts.add(path=str(tmp_path))
    assert app.can_start() == (True, "")
    app.concepts.set(0, "enabled", False)
    assert not app.can_start()[0]
    app.concepts.set_concept_file(str(tmp_path / "concepts.json"))  # the CLI's check: the file must be there
    assert app.can_start() == (False, f"concept file '{tmp_path / 'concepts.json'}' does not exist: check the path")
    (tmp_path / "concepts.json").write_text(json.dumps([{"path": str(tmp_path)}]), encoding="utf-8")
    app.config.set("seed", 1)  # any edit checks again (the window also does every 2 s)
    assert app.can_start() == (True, "")


def test_the_empty_concept_list_points_to_the_e2v_tab(tmp_path):
    app = AppController(tmp_path / "presets")
    assert "E2V elements tab" in app.concepts.empty_note() and app.concepts.empty_note().startswith("(none yet")
    app.config.set("dataset_config", str(tmp_path / "e2v.json"))
    note = app.concepts.empty_note()
    assert "trains on the E2V dataset set in the E2V elements tab" in note and "not used" in note


def test_start_is_blocked_with_the_first_problem_named(tmp_path):
    app = AppController(tmp_path / "presets")
    app.config.set("frames", "8")
    ok, reason = app.can_start()
    assert not ok and "frames" in reason
    with pytest.raises(UserError, match="frames"):
        app.start()
    assert not app.training.running
