"""What the GUI shows is what is true, decided in the controllers (no display): errors marked on the tab that holds
their field, fields the chosen base cannot use hidden, a missing concept folder flagged as it is typed."""
from __future__ import annotations

import json

import pytest

from modules.ui.controllers.app_controller import AppController
from tests.fixtures.wan_configs import TRANSFORMER_14B, TRANSFORMER_1_3B, write_config_folder


@pytest.fixture
def app(tmp_path) -> AppController:
    return AppController(tmp_path / "presets")


def two_expert_folder(folder):
    """A Wan 2.2 A14B-shaped folder of configs: model_index.json names transformer_2 and its folder is there."""
    write_config_folder(folder, TRANSFORMER_1_3B)
    (folder / "model_index.json").write_text(json.dumps({
        "_class_name": "WanPipeline", "transformer": ["diffusers", "WanTransformer3DModel"],
        "transformer_2": ["diffusers", "WanTransformer3DModel"], "boundary_ratio": 0.875}))
    (folder / "transformer_2").mkdir()
    (folder / "transformer_2" / "config.json").write_text(json.dumps(TRANSFORMER_1_3B))
    return folder


def vace_folder(folder):
    return write_config_folder(folder, {**TRANSFORMER_1_3B, "_class_name": "WanVACETransformer3DModel",
                                        "vace_layers": [0, 5, 10], "vace_in_channels": 96})


# --- errors marked on their tab --------------------------------------------------------------------
def test_each_error_is_counted_on_the_tab_that_holds_its_field(app, tmp_path):
    app.config.set("epochs", "ten")  # training tab
    app.config.set("learning_rate", "-")  # training tab
    app.config.set("lora_rank", "x")  # LoRA tab
    app.concepts.set(app.concepts.add(path=str(tmp_path)), "balancing", "many")  # a concept row's field: the concepts tab
    app.config.set("e2v.reference_dropout_probability", "2")  # nested key: the pathways tab
    assert app.error_tabs() == {"training": 2, "LoRA": 1, "concepts": 1, "pathways": 1}
    app.config.set("epochs", "10")
    app.config.set("learning_rate", "0.0001")
    assert app.error_tabs() == {"LoRA": 1, "concepts": 1, "pathways": 1}


def test_every_field_maps_to_the_tab_that_shows_it(app):
    from modules.ui.controllers.layout import SPECIAL, TOP_BAR, sections_of, tab_of

    for key in app.config.specs:
        tab = tab_of(key)
        if key in TOP_BAR:
            assert tab == "", key
        elif key in SPECIAL:
            assert tab == SPECIAL[key], key
        else:
            assert key in {k for section in sections_of(tab, app.config.specs) for k in section.keys}, (key, tab)


def test_an_e2v_dataset_problem_marks_the_tab_of_its_field(app, tmp_path):
    app.set_dataset_path(str(tmp_path / "dataset.json"))
    app.dataset.set("processors.vae.resolution", "[0, 0]")
    assert app.error_tabs().get("pathways") == 1


# --- fields a base cannot use --------------------------------------------------------------------------
EXPERT_FIELDS = ("transformer_2_override", "learning_rate_high_noise", "expert_step_share", "train_expert")
VACE_FIELDS = ("vace_train_blocks", "vace_context_scale")


def test_expert_and_vace_fields_show_only_on_bases_that_use_them(app, tmp_path):
    shows = app.config.shows
    assert all(shows(k) for k in EXPERT_FIELDS + VACE_FIELDS)  # no base yet: nothing to decide from
    app.config.set("base_model_name", str(write_config_folder(tmp_path / "t2v", TRANSFORMER_1_3B)))
    assert not any(shows(k) for k in EXPERT_FIELDS + VACE_FIELDS)
    app.config.set("base_model_name", str(two_expert_folder(tmp_path / "a14b")))
    assert all(shows(k) for k in EXPERT_FIELDS) and not any(shows(k) for k in VACE_FIELDS)
    app.config.set("base_model_name", str(vace_folder(tmp_path / "vace")))
    assert all(shows(k) for k in VACE_FIELDS) and not any(shows(k) for k in EXPERT_FIELDS)


def test_a_value_set_for_another_base_stays_shown_with_an_error_that_blocks_start(app, tmp_path):
    app.config.set("expert_step_share", "0.7")
    app.config.set("vace_context_scale", "0.5")
    assert app.config.errors == {}  # the keys are fine until the base says otherwise
    app.config.set("base_model_name", str(write_config_folder(tmp_path / "t2v", TRANSFORMER_1_3B)))
    assert app.config.shows("expert_step_share") and app.config.shows("vace_context_scale")
    assert app.config.error("expert_step_share") == (
        "is 0.7, but it applies to two-expert bases (Wan 2.2 A14B); this base has one transformer: clear it")
    assert app.config.error("vace_context_scale").endswith("applies to VACE bases; this base is not one: clear it")
    assert app.error_tabs() == {"training": 2} and not app.can_start()[0]
    app.config.set("expert_step_share", "0.0")
    app.config.set("vace_context_scale", "1.0")
    assert app.config.errors == {} and not app.config.shows("expert_step_share")


# --- a missing concept folder ---------------------------------------------------------------------------
def test_a_missing_concept_folder_is_flagged_as_it_is_typed_and_blocks_start(app, tmp_path):
    app.config.set("base_model_name", str(write_config_folder(tmp_path / "t2v", TRANSFORMER_1_3B)))
    (tmp_path / "clips").mkdir()
    row = app.concepts.add(path=str(tmp_path / "clips"))
    assert app.concepts.error(row, "path") == "" and app.can_start() == (True, "")
    for typed in (str(tmp_path / "cl"), str(tmp_path / "clipz")):  # each keystroke is checked
        app.concepts.set(row, "path", typed)
        assert app.concepts.error(row, "path") == f"'{typed}' does not exist: give a folder of clips or a .jsonl manifest"
        assert app.error_tabs() == {"concepts": 1}
        assert app.can_start() == (False, f"config key 'concepts[0].path': {app.concepts.error(row, 'path')}")
    app.concepts.set(row, "enabled", False)  # a disabled concept is not read: the tab says there is none to train on
    assert app.concepts.error(row, "path") == "" and app.error_tabs() == {"concepts": 1}
    assert app.can_start()[1].startswith("no training data")
    app.concepts.set(row, "enabled", True)
    app.concepts.set(row, "path", str(tmp_path / "clips"))
    assert app.concepts.error(row, "path") == "" and app.can_start() == (True, "")


# --- AUTO's memory choices ---------------------------------------------------------------------------
def test_the_memory_switches_show_what_auto_chose_marked_as_auto(app, tmp_path):
    """The 14B T2V at 832x480 does not fit 24 GiB as set: AUTO's plan turns memory savers on, and the fields show its
    values (not the defaults it replaces) with a note; the config itself keeps the defaults (AUTO decides anew at
    start, for the GPU it runs on)."""
    from modules.ui.controllers.vram_controller import VramEstimate

    app.config.set("base_model_name", str(write_config_folder(tmp_path / "t2v14b", TRANSFORMER_14B)))
    app.concepts.add(path=str(tmp_path))
    app.config.set("checkpointing.policy", "AUTO")
    vram = VramEstimate(app.config, gpu_gib=24.0)
    assert "AUTO:" in vram.wait()
    chosen = app.config.auto_choices
    assert chosen and set(chosen) <= {"vae_tiling", "text_encoder_caching_device", "activation_offload", "ffn_chunks",
                                      "checkpointing.policy", "checkpointing.kept_blocks", "base_weight_format",
                                      "blocks_to_swap"}
    for key, value in chosen.items():
        assert app.config.value(key) == app.config.defaults[key] != value  # not written into the config
        assert app.config.display(key) == (value if isinstance(value, bool) else str(value))
        assert app.config.auto_note(key).startswith("chosen by AUTO for 24 GiB")
    assert app.config.auto_note("lora_rank") == ""
    app.config.set("memory_preset", "MANUAL")  # the keys exactly as set: no AUTO marks
    vram.wait()
    assert app.config.auto_choices == {} and app.config.display("activation_offload") is False


# --- one format for resolutions ------------------------------------------------------------------------
def test_every_resolution_field_reads_and_writes_width_x_height(app, tmp_path):
    from modules.ui.controllers.fields import RESOLUTION

    app.config.set("resolution", "832x480, 1280x720")
    assert app.config.value("resolution") == [[480, 832], [720, 1280]]  # the config's own [height, width]
    assert app.config.display("resolution") == "832x480, 1280x720"
    app.config.set("resolution", "[480, 832]")  # the config file's form is still understood
    assert app.config.display("resolution") == "832x480" and app.config.spec("resolution").label == "Resolution (W x H)"
    app.set_dataset_path(str(tmp_path / "dataset.json"))
    assert app.dataset.display("target_resolution") == "832x480"
    app.dataset.set("processors.clip.resolution", "224x224")
    assert app.dataset.spec("processors.clip.resolution").kind == RESOLUTION
    row = app.concepts.add(path=str(tmp_path))
    app.concepts.set(row, "resolution", "640x352")
    assert app.concepts.rows[row]["resolution"] == [352, 640] and app.concepts.display(row, "resolution") == "640x352"


def test_the_sample_viewer_and_the_sample_list_write_sizes_as_the_fields_do(tmp_path):
    from modules.ui.controllers.sample_gallery import record_title
    from modules.util.sample_record import SampleRecord

    from modules.ui.views.sampling_tab import sample_summary

    record = SampleRecord(video=tmp_path / "s.mp4", contact_sheet=tmp_path / "s.png", step=3, prompt="p", frames=17,
                          height=480, width=832, steps=2, cfg_scale=5.0, seed=1)
    assert "· 832x480, 17 frames ·" in record_title(record)
    assert sample_summary({"prompt": "p", "frames": 17, "height": 480, "width": 832}) == "p — 832x480, 17 frames"
