"""E2V dataset JSON: the seeds' examples load as-is (nested and flat), every validation error names its key."""
from __future__ import annotations

import copy
import json

import pytest

from modules.config.e2v_dataset_config import (
    E2VDatasetFile,
    ElementClipConfig,
    load_dataset_config,
    normalize_flat_form,
    to_json,
)
from modules.util.base_config import ConfigError
from tests.conftest import REPO_ROOT

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "e2v"
SEEDS = ["seed_000_nested.json", "seed_001_flat.json", "seed_002_nested.json"]


def seed(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def minimal(**dataset) -> dict:
    """One dataset with A2's three elements (repeats 1/4/4), overridable per key."""
    base = {
        "data_root": "data",
        "elements": [
            {"name": "subject", "suffixes": ["_person.png", "_mask.png"], "required": True, "vae": {"repeat": 1, "position": 0}},
            {"name": "object", "suffixes": ["_object.png"], "vae": {"repeat": 4, "position": 1}},
            {"name": "background", "suffixes": ["_background.png"], "vae": {"repeat": 4, "position": 2, "preprocess": "center_crop"}},
        ],
    }
    base.update(dataset)
    return {"datasets": [base]}


def error_of(data: dict) -> str:
    with pytest.raises(ConfigError) as error:
        E2VDatasetFile.from_dict(data)
    message = str(error.value)
    assert "\n" not in message
    return message


# --- the seeds ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SEEDS)
def test_seed_examples_load_unchanged_and_round_trip(name, tmp_path):
    config = load_dataset_config(FIXTURES / name)
    text = to_json(config, tmp_path / "out.json")
    assert load_dataset_config(tmp_path / "out.json") == config
    assert E2VDatasetFile.from_dict(json.loads(text)) == config
    assert E2VDatasetFile.from_dict(config.to_dict()) == config
    for flat in ("vae_repeat", "clip_process", "vae_combine", "clip_resolution", '"position": 0,\n        "clip'):
        assert flat not in text


def test_seed_000_values():
    (ds,) = load_dataset_config(FIXTURES / "seed_000_nested.json").datasets
    assert ds.target_resolution == [480, 854] and ds.auto_frame_buckets and ds.max_num_frames == 81
    assert [(e.name, e.required, e.vae.repeat, e.vae.position) for e in ds.elements] == [
        ("main_subject", True, 4, 0), ("secondary", False, 4, 1)]
    assert [ds.clip_preprocess(e) for e in ds.elements] == ["center_crop", "pad_white"]
    assert [ds.vae_preprocess(e) for e in ds.elements] == ["resize", "resize"]
    assert ds.processors.vae.combine == "before" and ds.processors.vae.frame_conditioning == "full"
    assert ds.processors.clip.default_preprocess == "center_crop" and ds.reference_frame_count() == 8
    latent_save, vae_decode = ds.visualization.processors
    assert (latent_save.format, latent_save.frames) == ("pt", [])
    assert (vae_decode.format, vae_decode.frames) == ("png", [0, -1])


def test_seed_001_flat_form_equals_its_nested_spelling():
    flat = seed("seed_001_flat.json")
    nested = copy.deepcopy(flat)
    ds = nested["datasets"][0]
    ds["processors"] = {"vae": {"combine": ds.pop("vae_combine")}, "clip": {"resolution": ds.pop("clip_resolution")}}
    for element in ds["elements"]:
        element["vae"] = {"repeat": element.pop("vae_repeat"), "position": element.pop("position")}
        element["clip"] = {"preprocess": element.pop("clip_process")}
    assert normalize_flat_form(flat) == nested
    assert E2VDatasetFile.from_dict(flat) == E2VDatasetFile.from_dict(nested)

    (loaded,) = load_dataset_config(FIXTURES / "seed_001_flat.json").datasets
    assert [(e.name, e.required, e.vae.repeat, e.vae.position, loaded.clip_preprocess(e)) for e in loaded.elements] == [
        ("main_subject", False, 1, 0, "center_crop"), ("secondary", False, 4, 1, "pad_white"),
        ("environment", False, 4, 2, "letterbox")]
    assert loaded.processors.clip.resolution == [512, 512] and loaded.processors.vae.combine == "before"
    assert loaded.vae_resolution == [480, 704] and loaded.processors.vae.default_preprocess == "pad_white"
    assert [p.format for p in loaded.visualization.processors] == ["pt", "png"]


def test_seed_002_values():
    (ds,) = load_dataset_config(FIXTURES / "seed_002_nested.json").datasets
    assert [e.name for e in ds.layout_order()] == ["main_subject", "secondary", "environment"]
    assert ds.reference_frame_count() == 12 and not ds.visualization.enabled
    assert ds.reference_frame_count({"main_subject": True, "environment": True}) == 8


def test_a_single_flat_dataset_parses_on_its_own():
    from modules.config.e2v_dataset_config import E2VDatasetConfig

    flat = seed("seed_001_flat.json")["datasets"][0]
    nested = normalize_flat_form(seed("seed_001_flat.json"))["datasets"][0]
    assert E2VDatasetConfig.from_dict(flat, "datasets[0]") == E2VDatasetConfig.from_dict(nested, "datasets[0]")
    assert "vae_repeat" in flat["elements"][0] and "clip_resolution" in flat  # the input is not modified


def test_normalize_does_not_mutate_and_is_idempotent():
    flat = seed("seed_001_flat.json")
    before = copy.deepcopy(flat)
    once = normalize_flat_form(flat)
    assert flat == before and normalize_flat_form(once) == once
    assert normalize_flat_form(seed("seed_000_nested.json")) == seed("seed_000_nested.json")


# --- defaults ------------------------------------------------------------------------------------


def test_defaults_are_resolved_on_load():
    data = minimal()
    del data["datasets"][0]["elements"][2]["vae"]["position"]
    data["datasets"][0]["elements"][1]["clip"] = False
    data["datasets"][0]["elements"][0]["clip"] = True
    (ds,) = E2VDatasetFile.from_dict(data).datasets
    assert ds.elements[2].vae.position == 2
    assert ds.processors.vae.resolution == ds.target_resolution == [480, 832]
    assert ds.elements[0].clip == ElementClipConfig() and not ds.elements[1].in_clip
    assert [ds.clip_preprocess(e) for e in ds.elements] == ["pad_white", None, "pad_white"]
    assert [ds.vae_preprocess(e) for e in ds.elements] == ["pad_white", "pad_white", "center_crop"]
    assert (ds.processors.vae.frame_conditioning, ds.processors.vae.frame_index, ds.processors.vae.concatenate_mask) == ("full", 0, True)
    assert (ds.frames, ds.max_frames) == (81, 81)


def test_flat_clip_process_false_leaves_the_element_out_of_clip():
    data = minimal()
    data["datasets"][0]["elements"][1]["clip_process"] = False
    (ds,) = E2VDatasetFile.from_dict(data).datasets
    assert ds.elements[1].clip is False and ds.clip_preprocess(ds.elements[1]) is None


def test_layout_order_follows_positions_not_list_order():
    data = minimal()
    for element, position in zip(data["datasets"][0]["elements"], (2, 0, 1)):
        element["vae"]["position"] = position
    (ds,) = E2VDatasetFile.from_dict(data).datasets
    assert [e.name for e in ds.layout_order()] == ["object", "background", "subject"]


# --- errors, each naming its key ---------------------------------------------------------------------


def test_p_larger_than_fixed_frames():
    message = error_of(minimal(auto_frame_buckets=False, frames=5))
    assert "'datasets[0].frames'" in message and "P = 9" in message


def test_p_larger_than_max_frames_of_auto_buckets():
    assert "'datasets[0].max_frames'" in error_of(minimal(max_frames=5))


def test_p_equal_to_f_is_allowed():
    assert E2VDatasetFile.from_dict(minimal(auto_frame_buckets=False, frames=9)).datasets[0].frames == 9


@pytest.mark.parametrize("key, value", [("frames", 80), ("max_frames", 0), ("frames", 10)])
def test_frames_not_4k_plus_1(key, value):
    assert f"'datasets[0].{key}' must be of the form 4k+1" in error_of(minimal(**{key: value}))


def test_duplicate_positions():
    data = minimal()
    data["datasets"][0]["elements"][1]["vae"]["position"] = 0
    assert "'datasets[0].elements[1].vae.position'" in error_of(data)


def test_duplicate_positions_in_flat_form_name_the_nested_key():
    data = seed("seed_001_flat.json")
    data["datasets"][0]["elements"][2]["position"] = 1
    assert "'datasets[0].elements[2].vae.position'" in error_of(data)


def test_defaulted_position_that_collides_is_reported():
    data = minimal()
    data["datasets"][0]["elements"][0]["vae"]["position"] = 1
    del data["datasets"][0]["elements"][1]["vae"]["position"]
    message = error_of(data)
    assert "'datasets[0].elements[1].vae.position'" in message and "defaulted" in message


@pytest.mark.parametrize("where, key", [
    (("elements", 0, "vae", "preprocess"), "datasets[0].elements[0].vae.preprocess"),
    (("elements", 1, "clip"), "datasets[0].elements[1].clip.preprocess"),
    (("processors", "vae", "default_preprocess"), "datasets[0].processors.vae.default_preprocess"),
    (("processors", "clip", "default_preprocess"), "datasets[0].processors.clip.default_preprocess"),
])
def test_unknown_preprocess_names_the_key_and_suggests(where, key):
    data = minimal(processors={"vae": {}, "clip": {}})
    target = data["datasets"][0]
    for part in where[:-1]:
        target = target[part]
    target[where[-1]] = {"preprocess": "pad_whit"} if where[-1] == "clip" else "pad_whit"
    message = error_of(data)
    assert f"'{key}'" in message and "did you mean 'pad_white'" in message


def test_unknown_flat_clip_process():
    data = seed("seed_001_flat.json")
    data["datasets"][0]["elements"][2]["clip_process"] = "letterbx"
    assert "'datasets[0].elements[2].clip.preprocess'" in error_of(data)


@pytest.mark.parametrize("suffixes, key", [
    ([], "datasets[0].elements[1].suffixes'"),
    (["_object.png", 3], "datasets[0].elements[1].suffixes[1]'"),
    ([""], "datasets[0].elements[1].suffixes[0]'"),
    (["_object"], "datasets[0].elements[1].suffixes[0]'"),
    (["_object.png", "_object.PNG"], "datasets[0].elements[1].suffixes[1]'"),
    ("_object.png", "datasets[0].elements[1].suffixes'"),
    (["_mask.png"], "datasets[0].elements[1].suffixes[0]'"),  # also a suffix of element 0
    (["_MASK.png", "_mask.PNG"], "datasets[0].elements[1].suffixes[1]'"),  # same files as element 0's _mask.png
])
def test_invalid_suffixes(suffixes, key):
    data = minimal()
    data["datasets"][0]["elements"][1]["suffixes"] = suffixes
    assert f"'{key}" in error_of(data)


def test_missing_suffixes_key():
    data = minimal()
    del data["datasets"][0]["elements"][0]["suffixes"]
    assert "'datasets[0].elements[0].suffixes'" in error_of(data)


@pytest.mark.parametrize("elements", [None, []])
def test_missing_elements(elements):
    data = minimal()
    if elements is None:
        del data["datasets"][0]["elements"]
    else:
        data["datasets"][0]["elements"] = elements
    assert "'datasets[0].elements'" in error_of(data)


def test_duplicate_element_names():
    data = minimal()
    data["datasets"][0]["elements"][2]["name"] = "subject"
    assert "'datasets[0].elements[2].name'" in error_of(data)


@pytest.mark.parametrize("where, key, expected", [
    ((), "target_resolutoin", "unknown config key 'datasets[0].target_resolutoin'; did you mean 'datasets[0].target_resolution'?"),
    (("elements", 0), "requird", "unknown config key 'datasets[0].elements[0].requird'; did you mean 'datasets[0].elements[0].required'?"),
    (("elements", 0), "vae_reapeat", "did you mean 'datasets[0].elements[0].vae_repeat'?"),
    (("elements", 0, "vae"), "repeats", "unknown config key 'datasets[0].elements[0].vae.repeats'; did you mean 'datasets[0].elements[0].vae.repeat'?"),
    (("visualization",), "frequncy", "did you mean 'datasets[0].visualization.frequency'?"),
])
def test_unknown_fields_are_named_with_a_suggestion(where, key, expected):
    data = minimal(visualization={})
    target = data["datasets"][0]
    for part in where:
        target = target[part]
    target[key] = 1
    assert expected in error_of(data)


def test_unknown_top_level_key():
    assert "unknown config key 'dataset'; did you mean 'datasets'?" in error_of({"dataset": []})


@pytest.mark.parametrize("data_update", [
    {"processors": {"vae": {"combine": "after"}}},
    {"vae_combine": "after"},
])
def test_combine_other_than_before(data_update):
    assert "'datasets[0].processors.vae.combine' must be 'before'" in error_of(minimal(**data_update))


def test_flat_and_nested_spelling_of_one_key_conflict():
    data = minimal()
    data["datasets"][0]["elements"][0]["vae_repeat"] = 2
    message = error_of(data)
    assert "'datasets[0].elements[0].vae_repeat'" in message and "'datasets[0].elements[0].vae.repeat'" in message
    message = error_of(minimal(clip_resolution=[224, 224], processors={"clip": {"resolution": [512, 512]}}))
    assert "'datasets[0].clip_resolution'" in message


@pytest.mark.parametrize("update, key", [
    ({"processors": {"vae": {"resolution": [480, 480]}}}, "datasets[0].processors.vae.resolution"),
    ({"target_resolution": [480]}, "datasets[0].target_resolution"),
    ({"processors": {"clip": {"resolution": [0, 512]}}}, "datasets[0].processors.clip.resolution"),
    ({"processors": {"vae": {"frame_conditioning": "prefx"}}}, "datasets[0].processors.vae.frame_conditioning"),
    ({"processors": {"vae": {"frame_conditioning": "index", "frame_index": 9}}}, "datasets[0].processors.vae.frame_index"),
    ({"processors": {"vae": {"frame_index": -1}}}, "datasets[0].processors.vae.frame_index"),
    ({"dataset_type": "video"}, "datasets[0].dataset_type"),
    ({"reshape_mode": "bilinear"}, "datasets[0].reshape_mode"),
    ({"data_root": ""}, "datasets[0].data_root"),
    ({"visualization": {"processors": [{"type": "latent_save", "data": ["input_latent"]}]}},
     "datasets[0].visualization.processors[0].data[0]"),
    ({"visualization": {"processors": [{"type": "latent_save", "data": ["input_latents"], "format": "png"}]}},
     "datasets[0].visualization.processors[0].format"),
    ({"visualization": {"processors": [{"type": "save", "data": ["input_latents"]}]}},
     "datasets[0].visualization.processors[0].type"),
    ({"visualization": {"frequency": 0}}, "datasets[0].visualization.frequency"),
])
def test_other_invalid_values(update, key):
    assert f"'{key}'" in error_of(minimal(**update))


@pytest.mark.parametrize("where, value, key", [
    ("repeat", 0, "datasets[0].elements[1].vae.repeat"),
    ("position", -1, "datasets[0].elements[1].vae.position"),
])
def test_invalid_element_vae_values(where, value, key):
    data = minimal()
    data["datasets"][0]["elements"][1]["vae"][where] = value
    assert f"'{key}'" in error_of(data)


def test_clip_block_of_the_wrong_type():
    data = minimal()
    data["datasets"][0]["elements"][1]["clip"] = "pad_white"
    assert "'datasets[0].elements[1].clip' must be an object or true or false" in error_of(data)


def test_empty_dataset_list():
    assert "'datasets' is empty" in error_of({"datasets": []})


# --- files -----------------------------------------------------------------------------------------


def test_missing_file_names_it(tmp_path):
    with pytest.raises(ConfigError, match="dataset config file '.*nope.json' does not exist"):
        load_dataset_config(tmp_path / "nope.json")


def test_bad_json_names_the_file(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{\"datasets\": [")
    with pytest.raises(ConfigError, match="dataset config file '.*bad.json' is not valid JSON"):
        load_dataset_config(path)


def test_non_object_file(tmp_path):
    path = tmp_path / "list.json"
    path.write_text("[]")
    with pytest.raises(ConfigError, match="must hold a JSON object"):
        load_dataset_config(path)


def test_load_error_names_file_and_key(tmp_path):
    data = seed("seed_000_nested.json")
    data["datasets"][0]["elements"][1]["vae"]["position"] = 0
    path = tmp_path / "dup.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as error:
        load_dataset_config(path)
    assert "dup.json" in str(error.value) and "'datasets[0].elements[1].vae.position'" in str(error.value)
