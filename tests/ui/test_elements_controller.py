"""The E2V element table and dataset document: add / remove / reorder / edit, validation, the live
preview of which files match, loading the seeds' files and saving atomically. No display needed."""
from __future__ import annotations

import json

import pytest

from modules.config.e2v_dataset_config import load_dataset_config
from modules.ui.controllers.e2v_dataset import DATASET_SPECS, DatasetController
from modules.ui.controllers.elements_controller import COLUMNS, scan_dataset
from modules.ui.controllers.layout import DATASET_SECTIONS
from modules.util.base_config import ConfigError
from tests.conftest import REPO_ROOT
from tests.ui.conftest import write_e2v_folder

SEEDS = REPO_ROOT / "tests" / "fixtures" / "e2v"


@pytest.fixture
def dataset(tmp_path) -> DatasetController:
    controller = DatasetController()
    controller.set("data_root", str(write_e2v_folder(tmp_path / "data")))
    return controller


def problems_at(dataset, row):
    return {p.field: p.message for p in dataset.problems() if p.row == row}


def names(dataset):
    return [r["name"] for r in dataset.elements.rows]


# --- structure -----------------------------------------------------------------------------------
def test_a_new_dataset_is_a2s_three_elements_and_valid(dataset):
    assert names(dataset) == ["main_subject", "object", "background"]
    assert [dataset.elements.value(i, "vae.repeat") for i in range(3)] == [1, 4, 4]
    assert dataset.problems() == []


def test_add_appends_a_row_with_a_free_name_and_position(dataset):
    index = dataset.elements.add()
    row = dataset.elements.rows[index]
    assert index == 3 and row["name"] == "element_4" and row["vae"]["position"] == 3
    assert dataset.problems() == [] and dataset.dirty


def test_remove_drops_the_row(dataset):
    dataset.elements.remove(1)
    assert names(dataset) == ["main_subject", "background"]


def test_move_reorders_rows_and_positions_follow_only_on_request(dataset):
    assert dataset.elements.move(2, -2) == 0
    assert names(dataset) == ["background", "main_subject", "object"]
    assert [dataset.elements.value(i, "vae.position") for i in range(3)] == [2, 0, 1]
    assert dataset.elements.move(0, -1) == 0  # clamped at the top
    dataset.elements.renumber()
    assert [dataset.elements.value(i, "vae.position") for i in range(3)] == [0, 1, 2]


def test_edits_write_the_seed_json_form(dataset):
    elements = dataset.elements
    elements.set(1, "suffixes", "_toy.png, _object.png")
    elements.set(1, "required", True)
    elements.set(1, "vae.repeat", "2")
    elements.set(1, "vae.preprocess", "letterbox")
    elements.set(2, "clip", "off")
    elements.set(0, "clip", "default")
    assert elements.rows[1] == {"name": "object", "suffixes": ["_toy.png", "_object.png"], "required": True,
                                "vae": {"repeat": 2, "position": 1, "preprocess": "letterbox"},
                                "clip": {"preprocess": "pad_white"}}
    assert elements.rows[2]["clip"] is False
    assert elements.rows[0]["clip"] == {}
    elements.set(1, "vae.preprocess", "default")
    assert "preprocess" not in elements.rows[1]["vae"]
    assert elements.display(1, "suffixes") == "_toy.png, _object.png"


# --- validation ------------------------------------------------------------------------------------
def test_duplicate_names_are_flagged_on_the_second_row(dataset):
    dataset.elements.set(1, "name", "main_subject")
    assert "names must be unique" in problems_at(dataset, 1)["name"]
    assert problems_at(dataset, 0) == {}


def test_duplicate_positions_are_flagged(dataset):
    dataset.elements.set(2, "vae.position", "1")
    assert problems_at(dataset, 2)["vae.position"] == "1 is also the position of 'object'"


def test_empty_suffixes_are_flagged(dataset):
    dataset.elements.set(0, "suffixes", " , ")
    assert problems_at(dataset, 0)["suffixes"].startswith("is empty")


def test_a_suffix_without_an_image_extension_is_flagged(dataset):
    dataset.elements.set(0, "suffixes", "_person")
    assert "image extension" in problems_at(dataset, 0)["suffixes"]


def test_a_suffix_shared_by_two_elements_is_flagged(dataset):
    dataset.elements.set(1, "suffixes", "_object.png, _person.PNG")
    assert "also a suffix of element 'main_subject'" in problems_at(dataset, 1)["suffixes"]


def test_unknown_preprocess_names_are_flagged(dataset):
    dataset.elements.rows[0]["vae"]["preprocess"] = "stretch"
    dataset.elements.rows[1]["clip"] = {"preprocess": "crop"}
    assert problems_at(dataset, 0)["vae.preprocess"].startswith("must be one of pad_white")
    assert problems_at(dataset, 1)["clip"].startswith("must be one of pad_white")


@pytest.mark.parametrize("text, message", [("0", "must be at least 1, got 0"), ("two", "must be a whole number")])
def test_repeat_must_be_a_whole_number_of_at_least_one(dataset, text, message):
    dataset.elements.set(1, "vae.repeat", text)
    assert problems_at(dataset, 1)["vae.repeat"] == message
    assert dataset.elements.display(1, "vae.repeat") == text


def test_all_problems_are_reported_at_once(dataset):
    dataset.elements.set(0, "name", "")
    dataset.elements.set(1, "vae.repeat", "0")
    dataset.elements.set(2, "vae.position", "0")
    assert {(p.row, p.field) for p in dataset.problems()} >= {(0, "name"), (1, "vae.repeat"), (2, "vae.position")}


def test_the_typed_dataset_config_has_the_last_word(dataset):
    dataset.set("max_frames", "5")  # P = 1 + 4 + 4 = 9 reference frames do not fit 5
    problem = next(p for p in dataset.problems() if p.path == "max_frames")
    assert "add up to P = 9" in problem.message
    assert dataset.error("max_frames") == problem.message


def test_an_empty_table_is_a_problem(dataset):
    for _ in range(3):
        dataset.elements.remove(0)
    assert [p.path for p in dataset.problems()] == ["elements"]


def test_processor_fields_are_generated_from_the_typed_config_and_placed_in_tabs():
    assert DATASET_SPECS["processors.vae.frame_conditioning"].choices == ("full", "index", "prefix",
                                                                         "first_and_last", "random")
    assert DATASET_SPECS["processors.vae.resolution"].optional
    placed = {k for sections in DATASET_SECTIONS.values() for s in sections for k in s.keys}
    assert placed == set(DATASET_SPECS)
    assert set(COLUMNS) == {"name", "suffixes", "required", "vae.position", "vae.repeat", "vae.preprocess", "clip"}


def test_a_bad_processor_value_is_shown_beside_its_field(dataset):
    dataset.set("processors.clip.resolution", "512")
    assert dataset.error("processors.clip.resolution").startswith("must be [height, width]")
    dataset.set("processors.clip.resolution", "512, 512")
    dataset.set("processors.vae.resolution", "1 by 2")
    assert dataset.error("processors.vae.resolution") == "must be width x height, e.g. 832x480 (several: 832x480, 1280x720)"


# --- preview ---------------------------------------------------------------------------------------
def test_preview_shows_which_file_each_element_matches(dataset):
    preview = dataset.elements.preview()
    assert [s.video for s in preview.samples] == ["000.mp4", "001.mp4", "002.mp4"]
    assert preview.samples[1].files == {"main_subject": "001_person.png", "object": None,
                                        "background": "001_background.png"}
    assert preview.samples[2].files["background"] == "002_background.PNG"  # extension case-insensitive
    assert preview.counts == {"main_subject": 3, "object": 2, "background": 3}
    assert preview.complete == 3 and not preview.samples[2].caption
    assert preview.summary().startswith("3 of 3 samples complete · 1 without caption")


def test_preview_counts_samples_missing_a_required_element_as_incomplete(dataset):
    dataset.elements.set(1, "required", True)
    preview = dataset.elements.preview()
    assert preview.complete == 2
    assert "required element 'object' not found" in preview.samples[1].skipped


def test_the_first_suffix_in_list_order_wins(dataset, tmp_path):
    (tmp_path / "data" / "000_subject.png").write_bytes(b"x")
    dataset.elements.set(0, "suffixes", "_subject.png, _person.png")
    assert dataset.elements.preview().samples[0].files["main_subject"] == "000_subject.png"
    dataset.elements.set(0, "suffixes", "_person.png, _subject.png")
    assert dataset.elements.preview().samples[0].files["main_subject"] == "000_person.png"


def test_preview_falls_back_to_its_own_scan_while_rows_do_not_parse(dataset):
    dataset.elements.set(0, "suffixes", "_person")  # not a valid suffix for the typed config
    dataset.elements.rows[0]["suffixes"] = ["_person.png"]
    dataset.elements.rows[1]["vae"] = "oops"
    preview = dataset.elements.preview()
    assert preview.counts["main_subject"] == 3 and not preview.error


def test_own_scan_and_the_loaders_discovery_agree(dataset):
    mine = scan_dataset(dataset.data_root_path(), dataset.elements.rows)
    assert [(s.video, s.files, s.complete) for s in mine.samples] == [
        (s.video, s.files, s.complete) for s in dataset.elements.preview().samples]


def test_preview_names_a_missing_folder(dataset, tmp_path):
    dataset.set("data_root", str(tmp_path / "nowhere"))
    assert "does not exist" in dataset.elements.preview().summary()
    dataset.set("data_root", "")
    assert "choose the dataset folder" in dataset.elements.preview().summary()


# --- files -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["seed_000_nested.json", "seed_002_nested.json", "seed_001_flat.json"])
def test_the_seeds_files_load_into_the_table(name):
    dataset = DatasetController()
    dataset.load(SEEDS / name)
    assert names(dataset)[0] == "main_subject"
    assert dataset.elements.value(1, "vae.repeat") == 4
    assert dataset.problems() == []


def test_save_writes_the_document_atomically_and_it_loads_back_unchanged(dataset, tmp_path):
    dataset.elements.set(2, "clip", "off")
    path = dataset.save(tmp_path / "e2v.json")
    assert not dataset.dirty and not list(tmp_path.glob(".e2v*"))
    assert json.loads(path.read_text()) == dataset.document
    assert load_dataset_config(path).datasets[0].elements[2].clip is False
    again = DatasetController()
    again.load(path)
    assert again.document == dataset.document


def test_save_is_refused_while_there_are_problems(dataset, tmp_path):
    dataset.elements.set(0, "name", "")
    with pytest.raises(ConfigError, match=r"elements\[0\]\.name"):
        dataset.save(tmp_path / "e2v.json")
    assert not (tmp_path / "e2v.json").exists()


def test_a_file_without_datasets_is_refused(tmp_path):
    (tmp_path / "bad.json").write_text(json.dumps({"elements": []}))
    with pytest.raises(ConfigError, match="'datasets' list"):
        DatasetController().load(tmp_path / "bad.json")


def test_several_datasets_are_edited_one_at_a_time(dataset):
    dataset.add_dataset()
    assert dataset.index == 1 and len(dataset.datasets) == 2
    dataset.elements.remove(0)
    dataset.select(0)
    assert names(dataset) == ["main_subject", "object", "background"]
    problems = dataset.problems()  # the second dataset's empty data_root is named with its index
    assert [p.path for p in problems] == ["datasets[1].data_root"]
    dataset.remove_dataset(1)
    assert dataset.problems() == []


def test_visualization_processors_are_edited_as_rows(dataset):
    index = dataset.add_visualization()
    dataset.set_visualization(index, "data", "input_latents, nonsense")
    assert "nonsense" in dataset.visualization_error(index)
    dataset.set_visualization(index, "data", "input_latents, predicted_latents")
    dataset.set_visualization(index, "format", "png")
    dataset.set_visualization(index, "frames", "")
    assert dataset.visualization_rows[index] == {"type": "vae_decode", "data": ["input_latents", "predicted_latents"],
                                                 "format": "png"}
    assert dataset.problems() == []
    dataset.remove_visualization(index)
    assert dataset.visualization_rows == []
