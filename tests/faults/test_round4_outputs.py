"""Tools never overwrite their inputs (merge_lora.py, convert_model.py, the E2V export, sample.py, evaluate.py): an
output that is an input by path, symlink or hard link — or a folder output holding one — is refused in one line
before anything loads, and a merge or conversion that would write NaN/inf writes nothing."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from modules.modelFile.lora_formats import COMFY_LORA, LoRALayer, LoRAWeights
from modules.modelSaver.WanLoRASaver import lora_metadata, save_lora
from modules.util.errors import UserError
from tests.conftest import REPO_ROOT
from tests.test_merge_lora import write_lora

TRANSFORMER_FILE = Path("transformer") / "diffusion_pytorch_model.safetensors"


def script(name: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / name), *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode != 0, result.stdout[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    return lines[0]


@pytest.fixture
def own_model(tiny_model, tmp_path) -> Path:
    """A private copy of the tiny t2v folder: a test that fails on old code may overwrite it."""
    return Path(shutil.copytree(tiny_model("t2v"), tmp_path / "base"))


def digest(path: Path) -> bytes:
    return path.read_bytes()


# ------------------------------------------------------------------------------------------- the helper


def test_same_path_symlink_and_hard_link_are_all_the_same_file(tmp_path):
    from modules.util.path_checks import check_not_an_input

    lora = tmp_path / "lora.safetensors"
    lora.write_bytes(b"x")
    (tmp_path / "link.safetensors").symlink_to(lora)
    os.link(lora, tmp_path / "hard.safetensors")
    for output in (lora, tmp_path / "link.safetensors", tmp_path / "hard.safetensors",
                   tmp_path / "sub" / ".." / "lora.safetensors"):
        with pytest.raises(UserError, match=r"^--output '.*' is the same (path|file) as --lora '.*lora.safetensors'"):
            check_not_an_input("--output", [output], [("--lora", lora)])
    check_not_an_input("--output", [tmp_path / "new.safetensors"], [("--lora", lora)])  # a new file is fine


def test_a_file_inside_an_input_folder_and_a_folder_holding_an_input_are_refused(tmp_path):
    from modules.util.path_checks import check_not_an_input

    model = tmp_path / "model"
    (model / "transformer").mkdir(parents=True)
    (model / TRANSFORMER_FILE).write_bytes(b"w")
    os.link(model / TRANSFORMER_FILE, tmp_path / "elsewhere.safetensors")
    with pytest.raises(UserError, match=r"same file as --model .*\(its file .*diffusion_pytorch_model"):
        check_not_an_input("--output", [tmp_path / "elsewhere.safetensors"], [("--model", model)])
    with pytest.raises(UserError, match=r"is a folder holding --model"):
        check_not_an_input("--output", [tmp_path], [("--model", model)])
    check_not_an_input("--output", [model / "merged.safetensors"], [("--model", model)])  # writes beside, not over


# ------------------------------------------------------------------------------------------- merge_lora.py


@pytest.mark.parametrize("target", ["transformer", "lora", "lora_symlink", "lora_hardlink"])
def test_merge_lora_never_overwrites_its_inputs(own_model, tmp_path, target):
    from modules.modelSaver.merged_model import COMFY, MergeInputs, merge_lora_into_model

    lora = write_lora(own_model, "t2v", tmp_path)
    output = {"transformer": own_model / TRANSFORMER_FILE, "lora": lora,
              "lora_symlink": tmp_path / "symlink.safetensors", "lora_hardlink": tmp_path / "hardlink.safetensors"}[target]
    if target == "lora_symlink":
        output.symlink_to(lora)
    elif target == "lora_hardlink":
        os.link(lora, output)
    before = {p: digest(p) for p in (own_model / TRANSFORMER_FILE, lora)}
    with pytest.raises(UserError, match=f"^--output '{output}' is the same .* would overwrite that input"):
        merge_lora_into_model(MergeInputs(own_model, lora), output, COMFY)
    assert {p: digest(p) for p in before} == before


def test_merge_lora_cli_refuses_the_base_transformer_as_output_in_one_line(own_model, tmp_path):
    lora = write_lora(own_model, "t2v", tmp_path)
    before = digest(own_model / TRANSFORMER_FILE)
    line = one_error_line(script("merge_lora.py", "--model", own_model, "--lora", lora,
                                 "--output", own_model / TRANSFORMER_FILE))
    assert "same file as --model" in line and digest(own_model / TRANSFORMER_FILE) == before


def nan_lora(model_dir: Path, folder: Path) -> Path:
    lora = write_lora(model_dir, "t2v", folder)
    from modules.modelFile.lora_reading import load_lora_file

    weights, _ = load_lora_file(lora)
    module = next(iter(weights.layers))
    layer = weights.layers[module]
    weights.layers[module] = LoRALayer(layer.down, torch.full_like(layer.up, float("nan")), layer.alpha)
    bad = folder / "nan.safetensors"
    save_lora(weights, bad, COMFY_LORA, lora_metadata("wan-2.1-t2v"))
    return bad


def test_merging_a_nan_lora_names_it_and_writes_nothing(tiny_model, tmp_path):
    bad = nan_lora(tiny_model("t2v"), tmp_path)
    output = tmp_path / "merged.safetensors"
    line = one_error_line(script("merge_lora.py", "--model", tiny_model("t2v"), "--lora", bad, "--output", output))
    assert f"LoRA '{bad}' holds NaN or inf" in line and not output.exists()


def test_a_merge_that_overflows_the_output_dtype_writes_nothing(tiny_model, tmp_path):
    from modules.modelSaver.merged_model import DIFFUSERS, MergeInputs, merge_lora_into_model

    big = tmp_path / "big.safetensors"  # finite, but its merge overflows float32: base + 1e38 · (up @ down)
    layer = LoRALayer(torch.full((4, 32), 1e19), torch.full((32, 4), 1e19), 4.0)
    save_lora(LoRAWeights(layers={"blocks.0.attn1.to_q": layer}), big, COMFY_LORA, lora_metadata("wan-2.1-t2v"))
    with pytest.raises(UserError, match=r"merging LoRA '.*big.safetensors' .* gives non-finite values"):
        merge_lora_into_model(MergeInputs(tiny_model("t2v"), big), tmp_path / "merged", DIFFUSERS)
    assert not (tmp_path / "merged").exists()


def test_the_e2v_i2v_export_never_overwrites_the_base(own_model, tmp_path):
    from modules.modelSaver.merged_model import MergeInputs, export_e2v_as_i2v

    lora = write_lora(own_model, "t2v", tmp_path)
    stem = own_model / "transformer" / "diffusion_pytorch_model"  # `<stem>-i2v/` is new, but a link makes it the base
    (own_model / "transformer" / "diffusion_pytorch_model-i2v").symlink_to(own_model)
    with pytest.raises(UserError, match="the I2V export .* is the same path as --model"):
        export_e2v_as_i2v(MergeInputs(own_model, lora), stem)


# ------------------------------------------------------------------------------------------- convert_model.py


def test_convert_model_refuses_its_input_as_output_and_a_nan_input(tiny_model, tmp_path):
    lora = write_lora(tiny_model("t2v"), "t2v", tmp_path)
    before = digest(lora)
    (tmp_path / "link.safetensors").symlink_to(lora)
    for output in (lora, tmp_path / "link.safetensors"):
        line = one_error_line(script("convert_model.py", "--input", lora, "--output", output,
                                     "--format", "DIFFUSERS_LORA"))
        assert "would overwrite that input" in line
    assert digest(lora) == before
    bad = nan_lora(tiny_model("t2v"), tmp_path)
    line = one_error_line(script("convert_model.py", "--input", bad, "--output", tmp_path / "out.safetensors",
                                 "--format", "DIFFUSERS_LORA"))
    assert "holds NaN or inf" in line and not (tmp_path / "out.safetensors").exists()


# ------------------------------------------------------------------------------------------- sample / evaluate


def test_sample_refuses_an_output_that_is_an_input(tiny_model, tmp_path):
    image = tmp_path / "first.png"
    image.write_bytes(b"not really a png")
    line = one_error_line(script("sample.py", "--model", tiny_model("t2v"), "--prompt", "a cat", "--image", image,
                                 "--output", tmp_path / "first.mp4"))  # its frames strip would be first.png
    assert "--output" in line and "--image" in line and image.read_bytes() == b"not really a png"


def test_evaluate_refuses_a_report_folder_holding_its_inputs(tiny_model, tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a cat\n")
    line = one_error_line(script("evaluate.py", "--model", tiny_model("t2v"), "--prompts", prompts,
                                 "--output", tmp_path))
    assert "is a folder holding --prompts" in line
