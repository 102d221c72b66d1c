"""The scripts answer `--help` and a config error before the heavy imports (issue #25: a one-line config error
took 35-49 s, 25 of them importing the trainer; `sample.py --help` 13-15 s). Checked by what a run imported,
not by the clock (benchmarks/cli_startup.py measures the seconds), and the help texts read as sentences."""
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

def probe(script: str, *args: str) -> tuple[dict, str]:
    result = subprocess.run([sys.executable, "-c", PROBE, f"scripts/{script}", *args], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=120)
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stdout + result.stderr

@pytest.mark.parametrize("script", ["train.py", "sample.py", "evaluate.py", "merge_lora.py"])
def test_help_imports_no_torch(script):
    report, _ = probe(script, "--help")
    assert report == {"code": 0, "imported": []}

def test_a_config_error_comes_before_the_trainer_and_diffusers(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"base_model_name": str(tmp_path), "epohcs": 1}))
    report, output = probe("train.py", "--config-path", str(config))
    assert "unknown config key 'epohcs'; did you mean 'epochs'?" in output
    assert report["code"] == 1
    assert not {"diffusers", "modules.trainer.GenericTrainer", "modules.model.WanModel"} & set(report["imported"])

def test_a_path_error_comes_before_the_trainer_and_diffusers(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"base_model_name": str(tmp_path / "missing")}))
    report, output = probe("train.py", "--config-path", str(config))
    assert "base_model_name" in output and report["code"] == 1
    assert not {"diffusers", "modules.trainer.GenericTrainer"} & set(report["imported"])

def test_an_e2v_dataset_error_comes_before_the_trainer(tmp_path, tiny_model):
    dataset = tmp_path / "dataset.json"
    dataset.write_text(json.dumps({"datasets": [{"data_root": str(tmp_path), "elements": [], "bogus": 1}]}))
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"base_model_name": str(tiny_model("t2v")), "dataset_config": str(dataset),
                                  "workspace_dir": str(tmp_path / "ws"), "cache_dir": str(tmp_path / "cache"),
                                  "output_model_destination": str(tmp_path / "out.safetensors")}))
    report, output = probe("train.py", "--config-path", str(config))
    assert "bogus" in output and report["code"] == 1, output
    assert not {"diffusers", "modules.trainer.GenericTrainer"} & set(report["imported"])

@pytest.mark.parametrize("script", ["train.py", "sample.py", "evaluate.py", "merge_lora.py", "convert_model.py",
                                    "estimate_vram.py", "preview_e2v.py", "dataset_stats.py", "make_tiny_model.py"])
def test_the_help_text_is_whole_sentences(script):
    text = subprocess.run([sys.executable, f"scripts/{script}", "--help"], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120).stdout
    options = text.index("\noptions:")
    description = text[:options].split("\n\n", 1)[1].strip()
    assert description[0].isupper(), description[:80]  # not mid-sentence
    assert not description.endswith((":", ",")), description[-80:]  # nor left hanging
