"""The scripts answer `--help` and a config error before the heavy imports (issue #25: a one-line config error
took 35-49 s, 25 of them importing the trainer; `sample.py --help` 13-15 s). Checked by what a run imported,
not by the clock (benchmarks/cli_startup.py measures the seconds), and the help texts read as sentences.

A config error imports no torch either (issue #25: "a config error in under 3 s", and torch alone takes 2-7 s):
the config's optimizer and adapter registries, its device and attention checks, and the start-up checks of paths
and E2V datasets all run without it."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

# Runs a script as `python scripts/X.py ARGS` would, then reports its exit code and which heavy packages it imported.
PROBE = """
import json, runpy, sys
sys.path.insert(0, "scripts")
sys.argv = [sys.argv[1], *sys.argv[2:]]
code = 0
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as e:
    code = e.code
heavy = ("torch", "diffusers", "transformers", "modules.trainer.GenericTrainer", "modules.model.WanModel")
print(json.dumps({"code": code, "imported": [name for name in heavy if name in sys.modules]}))
"""

HEAVY = ["torch", "diffusers", "transformers", "modules.trainer.GenericTrainer", "modules.model.WanModel"]


def probe(script: str, *args: str) -> tuple[dict, str]:
    result = subprocess.run([sys.executable, "-c", PROBE, f"scripts/{script}", *args], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=120)
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stdout + result.stderr

@pytest.mark.parametrize("script", ["train.py", "sample.py", "evaluate.py", "merge_lora.py"])
def test_help_imports_no_torch(script):
    report, _ = probe(script, "--help")
    assert report == {"code": 0, "imported": []}

def config_error(tmp_path, config: dict, *args: str) -> str:
    """Runs train.py on `config`; it must fail with one line and import none of HEAVY. Returns that line."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    report, output = probe("train.py", "--config-path", str(path), *args)
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert report["code"] == 1 and len(errors) == 1, output
    assert report["imported"] == [], f"a config error imported {report['imported']}"
    return errors[0]

def ready_config(tmp_path, **overrides) -> dict:
    """A config whose paths pass the start-up checks (a model folder needs only its model_index.json there)."""
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "model" / "model_index.json").write_text("{}")
    return {"base_model_name": str(tmp_path / "model"), "workspace_dir": str(tmp_path / "ws"),
            "cache_dir": str(tmp_path / "cache"), "output_model_destination": str(tmp_path / "out.safetensors"),
            **overrides}

def test_an_unknown_key_is_answered_without_torch(tmp_path):
    line = config_error(tmp_path, {"base_model_name": str(tmp_path), "epohcs": 1})
    assert line == "error: unknown config key 'epohcs'; did you mean 'epochs'?"

@pytest.mark.parametrize(("config", "args", "named"), [
    ({"epochs": 0}, (), "config key 'epochs' must be at least 1"),
    ({}, ("--config-value", "optimizer_options.PRODIGY.d0=0"), "optimizer_options.PRODIGY.d0"),
    ({"peft_type": "LOKR", "lora_plus_ratio": 16}, (), "config key 'lora_plus_ratio' applies to adapters"),
    ({"peft_type": "LOHA", "lora_decompose": True}, (), "config key 'lora_decompose'"),
    ({"optimizer": "ADAMW_SCHEDULE_FREE", "ema": "GPU"}, (), "config key 'ema'"),
    ({"attention_backend": "FLASH", "train_device": "cpu"}, (), "config key 'attention_backend' is FLASH"),
    # chosen backends whose check needs no device: train_device auto does not ask torch for a GPU
    ({"attention_backend": "NATIVE", "sample_attention_backend": "FLEX", "random_crop": 0.9}, (),
     "config key 'random_crop'"),
])
def test_a_bad_value_is_answered_without_torch(tmp_path, config, args, named):
    """Values the optimizer and adapter registries and the attention table check, through every layer."""
    assert named in config_error(tmp_path, ready_config(tmp_path, **config), "--preset-path", "#wan2.1 t2v 1.3B lora", *args)

def test_a_path_error_is_answered_without_torch(tmp_path):
    line = config_error(tmp_path, {"base_model_name": str(tmp_path / "missing")})
    assert "config key 'base_model_name'" in line and "does not exist" in line

def test_an_e2v_dataset_error_is_answered_without_torch(tmp_path):
    dataset = tmp_path / "dataset.json"
    dataset.write_text(json.dumps({"datasets": [{"data_root": str(tmp_path), "elements": [], "bogus": 1}]}))
    assert "datasets[0].bogus" in config_error(tmp_path, ready_config(tmp_path, dataset_config=str(dataset)))

def test_an_e2v_frame_budget_error_is_answered_without_torch(tmp_path):
    """The check of the layout's frame counts (docs/e2v.md §6) against the dataset's frames."""
    from modules.synthetic.synthetic_data import e2v_dataset_json

    dataset = tmp_path / "dataset.json"
    dataset.write_text(json.dumps(e2v_dataset_json(tmp_path, frames=9)))  # 9 reference frames need 13
    line = config_error(tmp_path, ready_config(tmp_path, dataset_config=str(dataset)))
    assert "needs at least 13 frames but at most 9 are allowed" in line

def test_a_good_config_goes_on_to_the_trainer(tmp_path):
    """The start-up checks pass on to the trainer (which then finds the model folder incomplete): the probes
    above do see heavy imports when a run gets that far."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(ready_config(tmp_path, concepts=[{"path": str(tmp_path)}])))
    report, output = probe("train.py", "--config-path", str(path))
    assert report["code"] == 1 and "modules.trainer.GenericTrainer" in report["imported"], output

@pytest.mark.parametrize("script", ["train.py", "sample.py", "evaluate.py", "merge_lora.py", "convert_model.py",
                                    "estimate_vram.py", "preview_e2v.py", "dataset_stats.py", "make_tiny_model.py"])
def test_the_help_text_is_whole_sentences(script):
    text = subprocess.run([sys.executable, f"scripts/{script}", "--help"], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120).stdout
    options = text.index("\noptions:")
    description = text[:options].split("\n\n", 1)[1].strip()
    assert description[0].isupper(), description[:80]  # not mid-sentence
    assert not description.endswith((":", ",")), description[-80:]  # nor left hanging

@pytest.mark.parametrize(("args", "named"), [(("--output", "x.avi"), "--output"),
                                             (("--output", "x.mp4", "--frames", "10"), "sample.frames")])
def test_a_sample_option_error_is_answered_without_torch(tmp_path, args, named):
    """sample.py checks the sample's values and the output format before importing the model code."""
    report, output = probe("sample.py", "--model", str(tmp_path), "--prompt", "a cat", *args)
    assert report == {"code": 1, "imported": []} and named in output, output


@pytest.mark.parametrize(("case", "named"), [
    ("no_prompts_file", "--prompts"), ("bad_frames", "--frames"), ("bad_seeds", "--seeds"),
    ("compare_base_alone", "--compare-base"), ("missing_embedding", "--embedding"),
])
def test_an_evaluate_option_error_is_answered_without_torch(tmp_path, case, named):
    """evaluate.py checks its prompts file, sample settings and paths before importing the model code."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a red circle\n")
    args = {"no_prompts_file": ["--prompts", str(tmp_path / "missing.txt")],
            "bad_frames": ["--prompts", str(prompts), "--frames", "10"],
            "bad_seeds": ["--prompts", str(prompts), "--seeds", "0"],
            "compare_base_alone": ["--prompts", str(prompts), "--compare-base"],
            "missing_embedding": ["--prompts", str(prompts), "--embedding", str(tmp_path / "sks.safetensors")]}[case]
    report, output = probe("evaluate.py", "--model", str(tmp_path), "--output", str(tmp_path / "report"), *args)
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert report == {"code": 1, "imported": []} and len(errors) == 1 and named in errors[0], output
