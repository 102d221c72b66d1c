"""Validation loss: VALIDATION concepts are never trained on, measured at fixed σ and noise, per concept and
overall, into the log and tensorboard; cached like the training data; shared by torchrun ranks."""
from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from modules.config.train_config import ConceptConfig, TrainConfig
from modules.synthetic.synthetic_data import write_video_dataset
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.enum import ConceptType
from modules.util.errors import UserError
from tests.conftest import REPO_ROOT, TORCHRUN, train_config_dict
from tests.run_paths import run_dir
from tests.script_runner import run_script


@pytest.fixture(scope="module")
def two_concepts(tmp_path_factory):
    """A training concept and a held-out one (other clips)."""
    root = tmp_path_factory.mktemp("concepts")
    train = write_video_dataset(root / "train", count=2, frames=9, height=32, width=32, seed=1)
    held_out = write_video_dataset(root / "held_out", count=3, frames=9, height=32, width=32, seed=2)
    return train, held_out


def concepts(train, held_out, **held_out_options) -> list[dict]:
    return [{"path": str(train)}, {"path": str(held_out), "type": "VALIDATION", **held_out_options}]


def make_trainer(tiny_model, two_concepts, work, variant="t2v", **overrides) -> GenericTrainer:
    config = train_config_dict(tiny_model(variant), two_concepts[0], work, concepts=concepts(*two_concepts),
                               **overrides)
    return GenericTrainer(TrainConfig.from_dict(config))


def test_concept_type_loads_and_defaults_to_standard():
    assert ConceptConfig.from_dict({"path": "x"}).type == ConceptType.STANDARD  # old configs load unchanged
    assert ConceptConfig.from_dict({"path": "x", "type": "VALIDATION"}).type == ConceptType.VALIDATION
    assert ConceptConfig.from_dict({"path": "some/folder"}).display_name() == "folder"
    with pytest.raises(Exception, match="concepts\\[0\\].type"):
        TrainConfig.from_dict({"concepts": [{"path": "x", "type": "VALID"}]})


def test_validation_samples_are_never_trained_and_an_unchanged_model_measures_the_same(tiny_model, two_concepts,
                                                                                       tmp_path):
    trainer = make_trainer(tiny_model, two_concepts, tmp_path / "a")
    trainer.start()
    trained = {str(item.sample.media_path.parent) for item in trainer.data.items}
    assert trained == {str(two_concepts[0])}
    assert [item.group for item in trainer.validation_data.items] == ["held_out"] * 3
    calls = trainer.validation_data.encoder_calls
    first, second = trainer.validate(), trainer.validate()
    assert first == second  # the same σ values and noise every time
    assert trainer.validation_data.encoder_calls == calls  # cached: no encoder runs after the first time
    assert set(first.per_concept) == {"held_out"} and first.overall == first.per_concept["held_out"] > 0

    other_run = make_trainer(tiny_model, two_concepts, tmp_path / "b", seed=7)  # another seed, another run
    other_run.start()
    assert other_run.validate() == first  # an untrained LoRA (B = 0) is the base model: the same number


def test_validation_is_exactly_constant_while_the_model_does_not_change_and_moves_when_it_does(
        tiny_model, two_concepts, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def scalars(trainer, tag):
        events = EventAccumulator(str(run_dir(tmp_path / trainer / "workspace") / "tensorboard"))
        events.Reload()
        return [(event.step, event.value) for event in events.Scalars(tag)]

    common = dict(tensorboard=True, epochs=2, validate_after=1, validate_after_unit="STEP", weight_decay=0.0)
    still = train_config_dict(tiny_model("t2v"), two_concepts[0], tmp_path / "still",
                              concepts=[{"path": str(two_concepts[0]), "loss_weight": 0.0},  # zero gradients
                                        {"path": str(two_concepts[1]), "type": "VALIDATION", "name": "held"}],
                              **common)
    trainer = GenericTrainer(TrainConfig.from_dict(still))
    trainer.start()
    trainer.train()
    trainer.end()
    values = scalars("still", "loss/validation/held")
    assert [step for step, _ in values] == [1, 2, 3, 4]  # 2 samples, 2 epochs, a validation after every step
    assert len({value for _, value in values}) == 1
    assert scalars("still", "loss/validation") == values  # one concept: the overall loss is its loss

    moving = train_config_dict(tiny_model("t2v"), two_concepts[0], tmp_path / "moving",
                               concepts=concepts(*two_concepts), learning_rate=1e-2, **common)
    trainer = GenericTrainer(TrainConfig.from_dict(moving))
    trainer.start()
    trainer.train()
    trainer.end()
    values = [value for _, value in scalars("moving", "loss/validation/held_out")]
    assert len(values) == 4 and len(set(values)) == 4  # training on the other concept changes it
    assert values[0] == pytest.approx(scalars("still", "loss/validation")[0][1], rel=0.2)
    log = next((run_dir(tmp_path / "moving" / "workspace") / "logs").iterdir()).read_text()
    assert "validation loss at step 4: " in log


def test_epoch_schedule_and_concept_loss_weight_do_not_scale_the_measurement(tiny_model, two_concepts, tmp_path):
    base = make_trainer(tiny_model, two_concepts, tmp_path / "a")
    base.start()
    weighted = GenericTrainer(TrainConfig.from_dict(train_config_dict(
        tiny_model("t2v"), two_concepts[0], tmp_path / "b",
        concepts=concepts(*two_concepts, loss_weight=5.0, repeats=4))))
    weighted.start()
    assert len(weighted.validation_data.items) == 3  # repeats do not apply: each sample is measured once
    assert weighted.validate() == base.validate()


def test_two_expert_models_measure_each_sigma_on_its_expert(tiny_model, two_concepts, tmp_path):
    trainer = make_trainer(tiny_model, two_concepts, tmp_path / "both", variant="a14b", validation_sigma_count=8)
    trainer.start()
    points = trainer.setup.validation_points(8)
    boundary = trainer.model.conditioning.boundary_sigma
    assert [round(s, 4) for s, _ in points] == [round((i + 0.5) / 8, 4) for i in range(8)]
    assert all(expert == (0 if sigma >= boundary else 1) for sigma, expert in points)
    assert trainer.validate().overall > 0

    high = make_trainer(tiny_model, two_concepts, tmp_path / "high", variant="a14b", train_expert="HIGH")
    high.start()
    sigmas = [sigma for sigma, expert in high.setup.validation_points(4) if expert == 0]
    assert len(sigmas) == 4 and min(sigmas) > boundary  # only the trained expert's range


def test_no_validation_concept_means_no_validation_and_only_validation_concepts_is_an_error(
        tiny_model, two_concepts, tmp_path):
    plain = GenericTrainer(TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), two_concepts[0], tmp_path / "a")))
    plain.start()
    assert plain.validation is None
    only = train_config_dict(tiny_model("t2v"), two_concepts[0], tmp_path / "b",
                             concepts=[{"path": str(two_concepts[1]), "type": "VALIDATION"}])
    with pytest.raises(UserError, match="no enabled concept to train on"):
        GenericTrainer(TrainConfig.from_dict(only)).start()


@pytest.mark.slow
def test_two_ranks_share_the_validation_and_report_what_one_process_reports(tiny_model, two_concepts, tmp_path):
    """3 validation samples on 2 gloo ranks (one rank measures 2, the other 1 plus an uncounted pass)."""
    def run(args, name, batch_size):
        config = train_config_dict(tiny_model("t2v"), two_concepts[0], tmp_path / name,
                                   concepts=concepts(*two_concepts), max_steps=1, batch_size=batch_size,
                                   validate_after=1, validate_after_unit="STEP", backup_before_save=False)
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(config))
        if args is None:  # one process: in this one (the ranks are real processes)
            result = run_script("train.py", "--config-path", str(path))
        else:
            result = subprocess.run([*args, str(REPO_ROOT / "scripts" / "train.py"), "--config-path", str(path)],
                                    capture_output=True, text=True, timeout=600,
                                    env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert result.returncode == 0, result.stderr[-3000:]
        log = next((run_dir(tmp_path / name / "workspace") / "logs").iterdir()).read_text()
        return float(re.search(r"validation loss at step 1: (\S+)", log).group(1))

    one = run(None, "one", 2)
    two = run(TORCHRUN, "two", 1)
    assert one == pytest.approx(two, rel=1e-5)


def test_e2v_datasets_of_type_validation_are_measured_not_trained(tiny_model, tmp_path):
    from modules.synthetic.synthetic_data import e2v_dataset_json, write_e2v_dataset
    from tests.conftest import e2v_on_t2v_config

    config = e2v_on_t2v_config(tiny_model, tmp_path, validate_after=1, validate_after_unit="STEP", max_steps=2)
    held_out = write_e2v_dataset(tmp_path / "held_out", count=2, frames=17, height=32, width=32, seed=5)
    datasets = json.loads(open(config["dataset_config"]).read())
    extra = e2v_dataset_json(held_out, 32, 32, 17)["datasets"][0]
    datasets["datasets"].append({**extra, "type": "VALIDATION"})
    with open(config["dataset_config"], "w") as f:
        json.dump(datasets, f)
    trainer = GenericTrainer(TrainConfig.from_dict(config))
    trainer.start()
    assert {item.source["video_path"].rsplit("/", 2)[-2] for item in trainer.data.items} == {"data"}
    assert len(trainer.validation_data.items) == 2
    first = trainer.validate()
    assert set(first.per_concept) == {"held_out"} and trainer.validate() == first
    trainer.train()
    assert trainer.validate() != first  # trained on the other dataset
