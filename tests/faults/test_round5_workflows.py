"""#50 rows 12-15: a training sample's ComfyUI workflow names the file that holds that step's weights, under its real
name, or there is none and the log says why: an intermediate sample names its step's snapshot (or gets no workflow
when none exists), a re-run's end sample names the numbered output, and neither a fine-tune (a diffusers folder
ComfyUI's UNETLoader cannot load) nor a DIFFUSERS_LORA file (ComfyUI maps none of its keys for Wan) gets a workflow
that would render other weights."""
from __future__ import annotations

import json
import logging
from pathlib import Path

from tests.faults.test_fault_suite import make_trainer, one_thread  # noqa: F401  (autouse fixture)
from tests.run_paths import run_dir

SAMPLE = {"prompt": "a red circle", "frames": 5, "height": 32, "width": 32, "steps": 2, "seed": 1}


def workflows(workspace: Path) -> dict[str, dict]:
    folder = run_dir(workspace) / "samples"
    return {path.name: json.loads(path.read_text()) for path in sorted(folder.glob("*.workflow.json"))}


def lora_names(workflow: dict) -> list[str]:
    return [node["inputs"]["lora_name"] for node in workflow.values() if node["class_type"] == "LoraLoaderModelOnly"]


def train(tiny_model, video_dataset, work: Path, **overrides):
    trainer = make_trainer(tiny_model("t2v"), video_dataset, work, samples=[SAMPLE], **overrides)
    trainer.start()
    trainer.train()
    trainer.end()
    return trainer


def test_an_intermediate_sample_names_its_steps_snapshot_or_gets_no_workflow(tiny_model, video_dataset, tmp_path,
                                                                            caplog):
    every_step = dict(max_steps=2, sample_after=1, sample_after_unit="STEP", sample_at_end=True)
    with caplog.at_level(logging.INFO):
        train(tiny_model, video_dataset, tmp_path / "plain", **every_step)
    found = workflows(tmp_path / "plain" / "workspace")
    # old code: step 1's workflow named the final lora.safetensors, which holds step 2's weights
    assert list(found) == ["step-00000002-0.workflow.json"]
    assert lora_names(found["step-00000002-0.workflow.json"]) == ["lora.safetensors"]
    assert "samples get no ComfyUI workflow: no file holds the weights of step 1" in caplog.text
    train(tiny_model, video_dataset, tmp_path / "saved", save_every=1, save_every_unit="STEP", **every_step)
    found = workflows(tmp_path / "saved" / "workspace")
    assert lora_names(found["step-00000001-0.workflow.json"]) == ["lora-step000001.safetensors"]
    assert (run_dir(tmp_path / "saved" / "workspace") / "save" / "lora-step000001.safetensors").is_file()


def test_a_rerun_names_the_numbered_output_it_writes(tiny_model, video_dataset, tmp_path):
    for _ in range(2):
        trainer = train(tiny_model, video_dataset, tmp_path, max_steps=1, sample_at_end=True)
    assert trainer.output_paths[0].name == "lora-2.safetensors"
    (workflow,) = workflows(tmp_path / "workspace").values()
    assert lora_names(workflow) == ["lora-2.safetensors"]  # old code: lora.safetensors, the first run's


def test_a_fine_tune_gets_no_workflow_naming_its_folder(tiny_model, video_dataset, tmp_path, caplog):
    trainer = make_trainer(tiny_model("t2v"), video_dataset, tmp_path, samples=[SAMPLE], training_method="FINE_TUNE",
                           output_model_format="DIFFUSERS", output_model_destination=str(tmp_path / "out" / "model"))
    trainer.start()
    with caplog.at_level(logging.INFO):
        assert trainer.sample()  # the sample itself is written
    trainer.close()
    assert workflows(tmp_path / "workspace") == {}  # old code: UNETLoader 'model', which ComfyUI rejects
    assert "samples get no ComfyUI workflow: a fine-tune is written as a diffusers folder" in caplog.text


def test_a_diffusers_lora_gets_no_workflow_that_would_render_the_base(tiny_model, video_dataset, tmp_path, caplog):
    trainer = make_trainer(tiny_model("t2v"), video_dataset, tmp_path, samples=[SAMPLE],
                           output_model_format="DIFFUSERS_LORA")
    trainer.start()
    with caplog.at_level(logging.INFO):
        assert trainer.sample()
    trainer.close()
    assert workflows(tmp_path / "workspace") == {}  # old code: a workflow whose LoRA loads 0 keys in ComfyUI
    assert "ComfyUI's LoRA loader maps none of a DIFFUSERS_LORA file's keys" in caplog.text


def test_the_config_docs_and_the_comfyui_page_agree_on_the_sample_only_order():
    from modules.config.train_config import BaseLoRAConfig
    from tests.conftest import REPO_ROOT

    text = BaseLoRAConfig.__dataclass_fields__["sample_only"].metadata["doc"]
    assert "before the trained LoRA" in text and "after the trained LoRA" not in text
    page = (REPO_ROOT / "docs" / "comfyui_samples.md").read_text(encoding="utf-8")
    assert "then the `sample_only` ones at their strengths, then the trained LoRA" in page
    assert "before the trained LoRA" in (REPO_ROOT / "docs" / "config.md").read_text(encoding="utf-8")
