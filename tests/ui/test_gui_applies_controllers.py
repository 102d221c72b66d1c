"""Only what applies is shown (without a display): sample-row inputs follow the base's family, the LoRA tab and the
frozen-base fields follow the training method, the adapter's options its type, the pathways tab the E2V layout and
the base; one control per choice; a sample's size is one field written 832x480; sampler and scheduler are choices."""
from __future__ import annotations

import pytest

from modules.config.sampling_choices import SAMPLE_SAMPLERS, SAMPLE_SCHEDULERS
from modules.ui.controllers.app_controller import AppController
from modules.ui.controllers.fields import CHOICE, NOT_SET
from tests.fixtures.wan_configs import TRANSFORMER_1_3B, write_config_folder
from tests.ui.test_gui_truth_controllers import vace_folder

INPUTS = ("image", "last_image", "elements", "control_video", "control_mask", "driving_video", "vace_scale",
          "image_guidance_scale", "e2v_posterior")


def i2v_folder(folder):
    return write_config_folder(folder, {**TRANSFORMER_1_3B, "in_channels": 36, "image_dim": 1280})


def animate2_folder(folder):
    transformer = {key: value for key, value in TRANSFORMER_1_3B.items() if key not in ("in_channels", "out_channels")}
    return write_config_folder(folder, {**transformer, "_class_name": "WanAnimate2Transformer3DModel", "in_dim": 36,
                                        "out_dim": 16, "use_img_emb": True})


@pytest.fixture
def app(tmp_path):
    return AppController(tmp_path / "presets")


def shown_inputs(app, index=0):
    return {name for name in INPUTS if app.samples.shows(index, name)}


@pytest.mark.parametrize("make_base, e2v, expected", [
    (lambda p: write_config_folder(p, TRANSFORMER_1_3B), False, set()),
    (i2v_folder, False, {"image", "last_image"}),
    (animate2_folder, False, {"image", "driving_video"}),
    (vace_folder, False, {"control_video", "control_mask", "vace_scale", "elements"}),
    (lambda p: write_config_folder(p, TRANSFORMER_1_3B), True, {"elements", "e2v_posterior"}),
])
def test_a_sample_row_shows_the_inputs_its_base_follows(app, tmp_path, make_base, e2v, expected):
    app.samples.add(prompt="a cat")
    assert shown_inputs(app) == set(INPUTS)  # no base read yet: everything
    app.config.set("base_model_name", str(make_base(tmp_path / "base")))
    if e2v:
        app.config.set("dataset_config", str(tmp_path / "e2v.json"))
    assert shown_inputs(app) == expected


def test_an_input_set_for_another_base_stays_shown_until_cleared(app, tmp_path):
    app.samples.add(prompt="a cat", image="cat.png")
    app.config.set("base_model_name", str(write_config_folder(tmp_path / "t2v", TRANSFORMER_1_3B)))
    assert shown_inputs(app) == {"image"}
    app.samples.set(0, "image", "")
    assert shown_inputs(app) == set()


def test_the_lora_tab_and_frozen_base_fields_follow_the_training_method(app):
    config = app.config
    assert config.shows_tab("LoRA") and config.shows("blocks_to_swap") and config.shows("lora_rank")
    config.set("training_method", "FINE_TUNE")  # OneTrainer hides the LoRA tab for fine-tunes
    assert not config.shows_tab("LoRA")
    assert not any(config.shows(key) for key in ("blocks_to_swap", "base_weight_format", "lora_rank",
                                                 "embedding.placeholder"))
    config.set("training_method", "EMBEDDING")  # the embedding only
    assert config.shows_tab("LoRA") and config.shows("embedding.placeholder") and not config.shows("lora_rank")


def test_the_adapters_options_follow_its_type(app):
    config = app.config
    assert config.shows("lora_decompose") and not config.shows("lokr_factor") and config.shows("lora_plus_ratio")
    config.set("peft_type", "LOKR")
    assert config.shows("lokr_factor") and not config.shows("lora_decompose") and not config.shows("lora_plus_ratio")


def test_the_pathways_tab_shows_the_layouts_and_the_bases_own_options(app, tmp_path):
    config = app.config
    config.set("base_model_name", str(i2v_folder(tmp_path / "i2v")))  # A2's layout on an I2V base
    assert config.shows("e2v.target_layout") and config.shows("e2v.loss_on_reference_frames")
    assert not config.shows("e2v.reference_dropout_probability")  # SkyReels-V3 only
    assert not config.shows("e2v.export_i2v")  # E2V on a T2V base only
    config.set("e2v.reference_layout", "skyreels_v3")
    assert config.shows("e2v.reference_dropout_probability") and not config.shows("e2v.target_layout")
    config.set("e2v.reference_layout", "a2")
    config.set("base_model_name", str(write_config_folder(tmp_path / "t2v", TRANSFORMER_1_3B)))
    assert config.shows("e2v.export_i2v")


def test_one_control_for_the_frozen_bases_format(app):
    config = app.config
    assert config.shows("base_weight_format") and "fp8_base_weights" not in config.specs  # one control: no old flag
    assert not config.shows("fp8_scale")
    config.set("base_weight_format", "FP8")
    assert config.shows("fp8_scale")


def test_a_samples_size_is_one_field_written_width_x_height(app):
    app.samples.add(prompt="a cat")
    samples = app.samples
    assert "height" not in samples.specs and "width" not in samples.specs
    assert samples.display(0, "size") == "256x256"
    samples.set(0, "size", "832x480")
    assert (samples.rows[0]["width"], samples.rows[0]["height"]) == (832, 480) and samples.error(0, "size") == ""
    samples.set(0, "size", "832 by 480")
    assert samples.error(0, "size").startswith("must be width x height") and samples.display(0, "size") == "832 by 480"
    assert not app.can_start()[0]
    samples.set(0, "size", "830x480")  # the config's own check: a multiple of 16
    assert "multiple of 16" in samples.error(0, "size")
    samples.set(0, "size", "1280x720")
    assert samples.error(0, "size") == "" and samples.display(0, "size") == "1280x720"


def test_sampler_and_scheduler_are_choices(app):
    samples, config = app.samples, app.config
    assert (samples.specs["sampler"].kind, samples.specs["sampler"].choices) == (CHOICE, SAMPLE_SAMPLERS)
    assert (samples.specs["scheduler"].kind, samples.specs["scheduler"].choices) == (CHOICE, SAMPLE_SCHEDULERS)
    spec = config.spec("sample_overrides.sampler")
    assert spec.kind == CHOICE and spec.choices == SAMPLE_SAMPLERS and spec.optional
    assert config.display("sample_overrides.sampler") == NOT_SET
    config.set("sample_overrides.sampler", "diffusers_unipc")
    assert config.value("sample_overrides.sampler") == "diffusers_unipc"
    config.set("sample_overrides.sampler", NOT_SET)
    assert config.value("sample_overrides.sampler") is None


def test_the_vram_estimate_stays_while_an_unrelated_field_has_an_error(app, tmp_path):
    """It vanished while any field had an error (a typo in the learning rate hid the memory figure)."""
    app.vram.detect, app.vram.gpu_gib = False, 24.0
    app.config.set("base_model_name", str(write_config_folder(tmp_path / "t2v", TRANSFORMER_1_3B)))
    before = app.vram.wait(120)
    assert before.startswith("VRAM ≈")
    app.config.set("learning_rate", "fast")  # an error in a field the estimate does not need
    app.samples.add(prompt="a cat")
    app.samples.set(0, "size", "830x480")  # and one in a sample row
    after = app.vram.wait(120)
    assert after.splitlines()[0] == before.splitlines()[0] + " (fields with errors counted at their defaults)"
    app.config.set("learning_rate", "0.0001")
    app.samples.remove(0)
    assert app.vram.wait(120) == before
