"""Runs ComfyUI's own model detection and model classes on merge_lora.py's single files, every family.

Not a test: it needs a ComfyUI source tree, which CI does not have. tests/test_merge_families.py re-states the same
detection and key names (tests/comfyui_wan.py); this checks that re-statement against the real code. From the repo root:

    git clone https://github.com/Comfy-Org/ComfyUI /tmp/comfyui && pip install --target /tmp/comfydeps einops
    .venv/bin/python tools/check_comfyui_merged.py /tmp/comfyui /tmp/comfydeps

For each tiny family it merges a random LoRA into the base (`--format COMFY`, float32), and writes the E2V export
(the I2V model of an E2V run on a T2V, A14B or SkyReels-V2 base, with and without CLIP), then runs ComfyUI's
`model_detection.model_config_from_unet` on the file (the supported-model class "Load Diffusion Model" picks) and
builds that class's model (`get_model`, comfy/ldm/wan/model.py) to compare its state-dict names with the file's:
what `load_model_weights` would log as "unet missing" and "unet unexpected". ComfyUI derives the head count as
dim // 128, which is 0 for the 32-wide tiny models, so the tool sets it to the tiny models' 2 heads, and its image
and text embedders take the real encoders' widths (1280, 4096), so shapes are compared everywhere but there. It also prints what the test's
re-statement says, and whether the two agree.
"""
from __future__ import annotations

import logging
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from tools.check_comfyui_adapters import StubModules  # noqa: E402

FAMILIES = ("t2v", "i2v", "flf2v", "ti2v", "a14b", "a14b_i2v", "vace", "a14b_vace", "skyreels_v2", "skyreels_v2_i2v")
# widths ComfyUI's WanModel fixes for the real encoders, where the tiny models are 32 wide: MLPProj(1280, dim) (CLIP)
# and text_dim 4096 (umT5; detection does not read it)
FIXED_WIDTHS = {"img_emb.": 1280, "text_embedding.0.": 4096}


def merged_files(family: str, root: Path) -> list[Path]:
    from modules.model.detection import detect_variant
    from modules.modelFile.lora_formats import COMFY_LORA, expert_lora_paths, extract_from_peft
    from modules.modelSaver.merged_model import COMFY, MergeInputs, merge_lora_into_model
    from modules.modelSaver.WanLoRASaver import lora_metadata, save_lora
    from modules.synthetic.tiny_model import write_tiny_model
    from tests.test_merge_families import adapted

    model_dir = write_tiny_model(family, root / family)
    variant = detect_variant(model_dir)
    files = [Path(p) for p in expert_lora_paths(root / f"{family}.safetensors")] if variant.two_experts else \
        [root / f"{family}.safetensors"]
    for expert, file in enumerate(files):
        weights = extract_from_peft(adapted(model_dir, expert, "lora", root))
        save_lora(weights, file, COMFY_LORA, lora_metadata(f"wan-2.1-{variant.name.replace('_', '-')}"))
    return merge_lora_into_model(MergeInputs(model_dir, files[0]), root / f"{family}-merged.safetensors", COMFY,
                                 torch.float32)


def e2v_exports(root: Path) -> list[Path]:
    """The single files of the E2V (I2V) export for each base that has one, with and without the CLIP pathway."""
    from modules.modelSaver.merged_model import MergeInputs, export_e2v_as_i2v
    from modules.synthetic.tiny_model import write_tiny_model
    from tests.test_merge_families import skyreels_e2v_lora
    from tests.test_merge_lora import e2v_lora

    encoder = write_tiny_model("i2v", root / "e2v-i2v")
    files = []
    for family, two_experts in (("t2v", False), ("a14b", True), ("skyreels_v2", False)):
        model_dir = write_tiny_model(family, root / f"e2v-{family}")
        for clip in (True, False):
            folder = root / f"e2v-{family}-{'dual' if clip else 'vae'}"
            folder.mkdir()
            lora = skyreels_e2v_lora(model_dir, folder, clip) if family == "skyreels_v2" else \
                e2v_lora(model_dir, folder, two_experts, clip)
            written = export_e2v_as_i2v(MergeInputs(model_dir, lora, image_encoder_dir=encoder), folder / "e2v")
            files += [path for path in written if path.suffix == ".safetensors"]
    return files


def check(file: Path) -> tuple[str, list[str], list[str], list[str]]:
    """(supported-model class, missing, unexpected, shape mismatches) by ComfyUI's own code."""
    import comfy.model_detection

    state = load_file(str(file))
    config = comfy.model_detection.model_config_from_unet(state, "")
    config.unet_config["num_heads"] = 2  # dim // 128 is 0 at the tiny width (see the docstring)
    model = config.get_model(state, "", device=torch.device("cpu")).diffusion_model
    wanted = {key: tuple(value.shape) for key, value in model.state_dict().items()}
    missing = sorted(set(wanted) - set(state))
    unexpected = sorted(set(state) - set(wanted))
    shapes = sorted(key for key in set(wanted) & set(state) if wanted[key] != tuple(state[key].shape)
                    and not any(key.startswith(p) and width in wanted[key] for p, width in FIXED_WIDTHS.items()))
    return type(config).__name__, missing, unexpected, shapes


def main() -> None:
    sys.path[:0] = sys.argv[1:3]  # ComfyUI, then the folder holding einops
    sys.meta_path.append(StubModules())
    import comfy.options

    comfy.options.enable_args_parsing()
    sys.argv = [sys.argv[0], "--cpu"]
    logging.disable(logging.WARNING)
    from tests import comfyui_wan

    root = Path(tempfile.mkdtemp())
    files = [file for family in FAMILIES for file in merged_files(family, root)] + e2v_exports(root)
    for file in files:
        name, missing, unexpected, shapes = check(file)
        state = load_file(str(file))
        restated = comfyui_wan.detect({k: tuple(v.shape) for k, v in state.items()})
        agree = restated["model"] == name and comfyui_wan.model_keys(restated) == set(state) - set(unexpected)
        print(f"{file.parent.name + '/' + file.name:48s} {name:10s} in_dim {restated['in_dim']:2d} keys {len(state):3d}  "
              f"unet missing {len(missing)}  unet unexpected {len(unexpected)} {unexpected[:5] if unexpected else ''}"
              f"  shape mismatches {len(shapes)}  re-statement agrees: {agree}")


if __name__ == "__main__":
    main()
