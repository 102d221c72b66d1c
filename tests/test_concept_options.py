"""Per-concept options: a concept's own value wins, an unset one (null) is the run's."""
from __future__ import annotations

import pytest

from modules.config.train_config import ConceptConfig, TrainConfig
from modules.dataLoader.concept_options import OVERRIDABLE, concept_options
from modules.util.base_config import ConfigError
from modules.util.enum import FrameSampleStrategy

RUN = dict(fps=16.0, frames=[33, 17], resolution=[480, 832], frame_sample_strategy="UNIFORM", frame_stride=8,
           frame_windows=3, max_frames=161, caption_dropout_probability=0.1)
OWN = dict(fps=8.0, frames=81, resolution=[[256, 256], [512, 512]], frame_sample_strategy="SLIDE", frame_stride=17,
           frame_windows=5, max_frames=41, caption_dropout_probability=0.5)


def resolved(concept: dict) -> tuple:
    config = TrainConfig.from_dict({**RUN, "concepts": [{"path": "clips", **concept}]})
    return config, concept_options(config.concepts[0], config)


def test_unset_concept_keys_are_the_runs():
    _, options = resolved({})
    assert options.fps == 16.0 and options.lengths == (17, 33) and options.resolutions == ((480, 832),)
    assert options.windows.strategy == FrameSampleStrategy.UNIFORM and options.windows.stride == 8
    assert options.windows.count == 3 and options.windows.max_frames == 161 and options.caption_dropout == 0.1
    assert options.caption("a cat") == "a cat" and options.loss_weight == 1.0


@pytest.mark.parametrize("key", OVERRIDABLE)
def test_each_concept_key_overrides_the_runs(key):
    _, base = resolved({})
    _, own = resolved({key: OWN[key]})
    changed = {name for name in ("fps", "lengths", "resolutions", "caption_dropout")
               if getattr(own, name) != getattr(base, name)}
    changed |= {f"windows.{name}" for name in ("strategy", "stride", "count", "max_frames")
                if getattr(own.windows, name) != getattr(base.windows, name)}
    expected = {"fps": "fps", "frames": "lengths", "resolution": "resolutions", "frame_sample_strategy":
                "windows.strategy", "frame_stride": "windows.stride", "frame_windows": "windows.count",
                "max_frames": "windows.max_frames", "caption_dropout_probability": "caption_dropout"}[key]
    assert changed == {expected}


def test_caption_prefix_and_suffix_frame_the_caption():
    _, options = resolved({"caption_prefix": "sks, ", "caption_suffix": ", film grain"})
    assert options.caption("a cat") == "sks, a cat, film grain"


def test_old_configs_load_unchanged_and_bad_concept_values_name_their_key():
    concept = ConceptConfig.from_dict({"path": "clips", "repeats": 2})
    assert concept.balancing == 2 and concept.balancing_strategy.name == "REPEATS"
    assert all(getattr(concept, key) is None for key in OVERRIDABLE)
    config = TrainConfig.from_dict({})
    assert config.frames == 81 and config.frame_sample_strategy == FrameSampleStrategy.HEAD
    for bad, key in (({"frames": 18}, "concepts[0].frames"), ({"resolution": [100, 100]}, "concepts[0].resolution"),
                     ({"frame_windows": 0}, "concepts[0].frame_windows"), ({"fps": -2}, "concepts[0].fps"),
                     ({"max_frames": 40}, "concepts[0].max_frames")):
        with pytest.raises(ConfigError, match=key.replace("[", "\\[").replace("]", "\\]")):
            TrainConfig.from_dict({"concepts": [{"path": "clips", **bad}]})


def test_prompt_sources(tiny_model, tmp_path):
    import json

    from modules.dataLoader.item_plan import ItemPlanner
    from modules.dataLoader.skips import SkipCounter
    from modules.synthetic.synthetic_data import write_video_dataset
    from modules.trainer.preflight import check_paths
    from modules.util.errors import UserError
    from tests.conftest import train_config_dict

    folder = write_video_dataset(tmp_path / "clips", count=2, frames=9, height=32, width=32)
    (tmp_path / "trigger.txt").write_text("sks dog running\n", encoding="utf-8")
    manifest = tmp_path / "clips.jsonl"
    manifest.write_text("".join(json.dumps({"path": str(p), "prompt": "plain", "short": f"short {p.stem}"}) + "\n"
                                for p in sorted(folder.glob("*.mp4"))), encoding="utf-8")
    concepts = [{"path": str(folder), "prompt_source": "CONCEPT", "prompt_path": str(tmp_path / "trigger.txt"),
                 "caption_prefix": "photo, "},
                {"path": str(manifest), "prompt_source": "FIELD", "prompt_field": "short"},
                {"path": str(manifest)}]
    config = TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), folder, tmp_path / "run", concepts=concepts))
    planner = ItemPlanner(16.0, [255, 255, 255], None)
    captions = [[item.caption for item in planner.plan(c, concept_options(c, config), SkipCounter())]
                for c in config.concepts]
    assert captions == [["photo, sks dog running"] * 2, ["short 000", "short 001"], ["plain", "plain"]]

    with pytest.raises(ConfigError, match=r"concepts\[0\].prompt_path' is empty"):
        TrainConfig.from_dict({"concepts": [{"path": "x", "prompt_source": "CONCEPT"}]})
    with pytest.raises(ConfigError, match="FIELD, which reads a .jsonl"):
        TrainConfig.from_dict({"concepts": [{"path": "folder", "prompt_source": "FIELD"}]})
    missing = dict(concepts[0], prompt_path=str(tmp_path / "nope.txt"))
    bad = TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), folder, tmp_path / "run", concepts=[missing]))
    with pytest.raises(UserError, match=r"concepts\[0\].prompt_path"):
        check_paths(bad)


def test_a_repeated_resolution_trains_once_as_a_repeated_length_does():
    """Regression: resolution [[64, 64], [64, 64]] trained every item twice (frames [17, 17] did not)."""
    config = TrainConfig.from_dict({"resolution": [[64, 64], [32, 48], [64, 64]], "frames": [17, 17]})
    options = concept_options(ConceptConfig(path="clips"), config)
    assert options.resolutions == ((64, 64), (32, 48)) and options.lengths == (17,)
    concept = ConceptConfig.from_dict({"path": "clips", "resolution": [[32, 32], [32, 32]]}, "concepts[0]")
    assert concept_options(concept, config).resolutions == ((32, 32),)
