"""Round 5, "a run that never saves its model": a sample is a by-product. Whatever goes wrong in one (here the
write of its workflow, as a lone surrogate in the prompt made it fail) is one warning and counted, and the run still
saves (the end-of-run sample included, so a resume cannot meet the same crash); a prompt that cannot be written as
UTF-8 is refused at start-up naming the key; and each step is sampled once (#50 row 4)."""
from __future__ import annotations

import json
import logging

import pytest

from modules.config.train_config import SampleConfig, TrainConfig
from modules.util.base_config import ConfigError
from modules.util.sample_record import read_records
from tests.conftest import train_config_dict
from tests.faults.test_fault_suite import make_trainer, messages, one_thread  # noqa: F401  (autouse fixture)
from tests.run_paths import run_dir

SAMPLE = {"prompt": "a red circle", "frames": 5, "height": 32, "width": 32, "steps": 2, "seed": 1}


def test_a_prompt_that_cannot_be_written_as_utf8_is_refused_at_start_up_naming_the_key(tiny_model, video_dataset,
                                                                                       tmp_path):
    values = train_config_dict(tiny_model("t2v"), video_dataset, tmp_path,
                               samples=[SAMPLE, {**SAMPLE, "negative_prompt": "bad \udc80 text"}])
    with pytest.raises(ConfigError) as error:  # old code: accepted; the end-of-run sample then crashed every time
        TrainConfig.from_dict(values)
    assert str(error.value).startswith("config key 'samples[1].negative_prompt' holds '\\udc80' at character 4")
    with pytest.raises(ConfigError, match=r"^config key 'sample.prompt' holds"):
        SampleConfig.from_dict({"prompt": json.loads('"\\udc80"')}, "sample")  # valid JSON, no UTF-8


def test_a_failing_end_of_run_sample_is_reported_and_the_model_is_saved(tiny_model, video_dataset, tmp_path,
                                                                        monkeypatch, caplog):
    import modules.modelSampler.WanModelSampler as sampler_module

    def unwritable(video, workflow):  # what a lone surrogate in the prompt did: the workflow's JSON write failed
        "x\udc80".encode("utf-8")

    monkeypatch.setattr(sampler_module, "write_workflow", unwritable)
    trainer = make_trainer(tiny_model("t2v"), video_dataset, tmp_path, max_steps=2, sample_at_end=True,
                           samples=[SAMPLE])
    trainer.start()
    trainer.train()
    with caplog.at_level(logging.WARNING):
        paths = trainer.end()  # old code: UnicodeEncodeError, no model
    assert paths and paths[0].is_file()
    warnings = messages(caplog.records)
    assert any(m.startswith("sample 0 skipped at step 2: UnicodeEncodeError") for m in warnings), warnings
    assert any(m.startswith("every preview sample (1) was skipped: sample 0: UnicodeEncodeError") for m in warnings)


def test_each_step_is_sampled_once_and_a_resume_does_not_sample_it_again(tiny_model, video_dataset, tmp_path,
                                                                         monkeypatch):
    from modules.modelSampler.WanModelSampler import WanModelSampler

    made = []
    original = WanModelSampler.sample_to_record
    monkeypatch.setattr(WanModelSampler, "sample_to_record",
                        lambda self, sample, output, **kw: made.append(kw["step"]) or original(self, sample, output,
                                                                                               **kw))
    trainer = make_trainer(tiny_model("t2v"), video_dataset, tmp_path, max_steps=2, sample_after=2,
                           sample_after_unit="STEP", sample_at_end=True, samples=[SAMPLE])
    trainer.start()
    trainer.train()
    trainer.end()
    assert made == [2]  # old code: [2, 2], the second overwriting the first
    assert [r.step for r in read_records(run_dir(tmp_path / "workspace") / "samples")] == [2]
    trainer.sample()  # asked again at the same step (a resume at the end, the GUI's "sample now")
    assert made == [2]


def test_the_sidecar_names_the_sampler_scheduler_and_the_shift_it_ran_at(tiny_model, video_dataset, tmp_path):
    trainer = make_trainer(tiny_model("t2v"), video_dataset, tmp_path, max_steps=1, sample_at_end=True,
                           samples=[SAMPLE, {**SAMPLE, "sampler": "euler", "scheduler": "beta", "shift": 5.0}])
    trainer.start()
    trainer.train()
    trainer.end()
    sidecars = sorted((run_dir(tmp_path / "workspace") / "samples").glob("*.json"))
    found = [json.loads(path.read_text()) for path in sidecars if not path.name.endswith(".workflow.json")]
    assert [(s["sampler"], s["scheduler"], s["shift"]) for s in found] == [("uni_pc", "simple", 8.0),
                                                                             ("euler", "beta", 5.0)]
