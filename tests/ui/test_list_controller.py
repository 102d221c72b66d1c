"""Concept and sample list editors: rows from the record classes' metadata, errors per row."""
from __future__ import annotations

from modules.config.train_config import ConceptConfig
from modules.ui.controllers.app_controller import AppController


def make(tmp_path) -> AppController:
    return AppController(tmp_path / "presets")


def test_rows_are_added_with_the_records_defaults(tmp_path):
    app = make(tmp_path)
    assert app.concepts.add(path="clips/a") == 0
    assert app.config.data["concepts"] == [ConceptConfig(path="clips/a").to_dict()]
    assert set(app.samples.specs) >= {"prompt", "negative_prompt", "frames", "size", "seed"}  # size: 832x480


def test_rows_move_duplicate_and_remove(tmp_path):
    app = make(tmp_path)
    for path in ("a", "b", "c"):
        app.concepts.add(path=path)
    assert app.concepts.move(2, -5) == 0
    assert [r["path"] for r in app.concepts.rows] == ["c", "a", "b"]
    app.concepts.duplicate(1)
    app.concepts.remove(0)
    assert [r["path"] for r in app.concepts.rows] == ["a", "a", "b"]


def test_a_bad_cell_is_reported_on_its_row_and_blocks_start(tmp_path):
    app = make(tmp_path)
    app.concepts.add(path="clips")
    app.concepts.set(0, "balancing", "many")
    assert app.concepts.error(0, "balancing") == "must be a number"
    assert app.concepts.display(0, "balancing") == "many"
    app.concepts.set(0, "balancing", "0")
    assert app.concepts.error(0, "balancing") == "must be greater than 0, got 0.0"
    app.concepts.set(0, "path", "")
    assert app.concepts.error(0, "path").startswith("is empty")
    ok, reason = app.can_start()
    assert not ok and "concepts[0]" in reason


def test_sample_rows_use_the_sample_checks(tmp_path):
    app = make(tmp_path)
    app.samples.add(prompt="a fox")
    app.samples.set(0, "frames", "16")
    assert app.samples.error(0, "frames").startswith("must be of the form 4k+1")
    app.samples.set(0, "frames", "17")
    assert app.config.is_valid


def test_a_concept_file_replaces_the_list_until_cleared(tmp_path):
    app = make(tmp_path)
    app.concepts.add(path="clips")
    app.concepts.set_concept_file("my_concepts.json")
    assert app.config.data["concepts"] == "my_concepts.json" and len(app.concepts) == 0
    app.concepts.set_concept_file("")
    assert [r["path"] for r in app.concepts.rows] == ["clips"]


def test_a_concept_row_can_be_made_a_validation_concept(tmp_path):
    app = make(tmp_path)
    app.concepts.add(path="clips/held_out")
    assert app.concepts.specs["type"].choices == ("STANDARD", "VALIDATION")
    app.concepts.set(0, "type", "VALIDATION")
    assert app.config.data["concepts"][0]["type"] == "VALIDATION"


def test_base_lora_rows_use_their_record_and_the_lightning_preset_fills_them(tmp_path):
    from modules.config.train_config import BaseLoRAConfig

    app = make(tmp_path)
    app.base_loras.add(path="loras/lightning.safetensors")
    assert app.config.data["base_loras"] == [BaseLoRAConfig(path="loras/lightning.safetensors").to_dict()]
    app.base_loras.set(0, "path", "")
    assert app.base_loras.error(0, "path").startswith("is empty")
    shipped = AppController()  # the shipped presets
    shipped.config.apply_preset("#wan2.1 t2v 14B lora on lightning")
    app = shipped
    assert [row["strength"] for row in app.config.data["base_loras"]] == [1.0]
    assert app.config.value("sample_overrides.steps") == 4 and app.config.value("sample_overrides.cfg_scale") == 1.0
