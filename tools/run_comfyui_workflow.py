#!/usr/bin/env python
"""Runs a sample's `.workflow.json` in ComfyUI's own nodes and compares the frames with the sample's.

Not a CI test: it needs a ComfyUI source tree and a few of its packages, which the repo does not need. From the
repo root (ComfyUI a125cd84 was used):

    git clone https://github.com/Comfy-Org/ComfyUI /tmp/comfyui
    .venv/bin/python -m pip install --target /tmp/comfydeps einops torchsde scipy aiohttp
    (then delete torch, numpy and the nvidia packages pip put in /tmp/comfydeps: the venv's are used)
    .venv/bin/python tools/run_comfyui_workflow.py --comfyui /tmp/comfyui --deps /tmp/comfydeps \
        [--case t2v-uni_pc] [--case vace-uni_pc] ...   (default: every case; about 4 minutes on 2 CPU cores)

Cases: T2V (uni_pc / simple, euler / simple, dpmpp_2m / beta), A14B, I2V, I2V A14B, FLF2V, TI2V 5B (with a first
image), VACE and VACE-Fun A14B (a control video and one reference image); uni_pc / simple where not named.
Per case it writes the tiny model of the family (modules/synthetic), a random ComfyUI-format LoRA on it
(alpha != rank), the base as one ComfyUI file (`merge_lora_into_model` with no LoRA, float32: merge_lora.py
--format COMFY's writer), then runs
`scripts/sample.py --lora` (5 frames, so the PNG strip beside the video holds every frame, losslessly), reads
the workflow file it wrote beside the video, puts the files it names into a temporary ComfyUI models tree
(folder_paths pointed there) and executes the workflow's nodes in dependency order, each by its class from
`nodes.NODE_CLASS_MAPPINGS` (+ comfy_extras) and its FUNCTION, up to the VAEDecode that feeds SaveAnimatedWEBP.
It prints max |ComfyUI - ours| of the frames in 1/255 (ComfyUI's float frames against our uint8 ones, so 0.5 is a
perfect match), the same for the frames as SaveAnimatedWEBP would save them (it truncates, we round), and, as a
control that the comparison sees the LoRA, ComfyUI's frames with every LoRA at strength 0 against ours.

What is patched, and why (the tiny models are not the real sizes ComfyUI hard-codes; nothing in the sampling path
is patched):
- the diffusion model: ComfyUI derives the head count as dim // 128 (0 at the tiny width 32) and fixes the text
  width at 4096; the tool sets num_heads 2 and text_dim 32 in the detected unet config (`model_config_from_unet`).
- the text encoder: ComfyUI's own UMT5 (`comfy.text_encoders.t5.T5`, via CLIPLoader type wan) is built with the
  tiny UMT5's sizes instead of umt5_config_xxl.json (and is picked for the file, which ComfyUI recognises as
  umT5-XXL by its 24th block), and loads the tiny model's text_encoder weights (the same key
  names); the tokenizer is the tiny model's (a tokenizers Unigram, not sentencepiece) through ComfyUI's
  SDTokenizer with Wan's settings (min_length 512, no start token, end token 1, pad 0).
- the VAE: ComfyUI's Wan 2.1 / 2.2 VAE classes are built at the tiny VAEs' sizes (dim 8 / 4 and 8, one residual
  block per stage, where ComfyUI fixes 96 / 160 and 256, and 2); the file holds the tiny VAE in Wan's original key
  names (our converter, inverted).
- the image encoder: ComfyUI knows ViT-H by its layer count and fixes the Wan image embedder's input at 1280; the
  tool builds ComfyUI's CLIP vision class from the tiny tower's sizes and the embedder at its width (32), and
  writes the tower's weights with the `vision_model.` prefix ComfyUI's clip_vision_h file has.
- the tokenizer gets NFKC normalisation (sentencepiece's default, see docs/comfyui_samples.md): our prompt cleaning
  (ftfy) turns the full-width commas of Wan's negative prompt into ASCII ones, ComfyUI does not clean.
- ComfyUI runs with --cpu --fp32-unet --fp32-vae --fp32-text-enc (on the CPU it keeps text encoders in fp16).
- modules ComfyUI imports but the nodes run here never call are stubbed (torchvision, torchaudio, kornia,
  spandrel, comfy_kitchen, the database packages), as tools/check_comfyui_adapters.py does.
"""
from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CASES = {"t2v-uni_pc": ("t2v", "uni_pc", "simple"), "t2v-euler": ("t2v", "euler", "simple"),
         "a14b-uni_pc": ("a14b", "uni_pc", "simple"), "i2v-uni_pc": ("i2v", "uni_pc", "simple"),
         "flf2v-uni_pc": ("flf2v", "uni_pc", "simple"), "ti2v-uni_pc": ("ti2v", "uni_pc", "simple"),
         "vace-uni_pc": ("vace", "uni_pc", "simple"), "t2v-dpmpp_2m-beta": ("t2v", "dpmpp_2m", "beta"),
         "a14b_i2v-uni_pc": ("a14b_i2v", "uni_pc", "simple"), "a14b_vace-uni_pc": ("a14b_vace", "uni_pc", "simple")}
IMAGE_FAMILIES = ("i2v", "flf2v", "ti2v", "a14b_i2v")
SAMPLE = dict(prompt="a red car driving fast on a snowy mountain", frames=5, height=64, width=64, steps=8,
              cfg=5.0, seed=7)


def prepare(case: str, root: Path) -> tuple[Path, Path, Path]:
    """(tiny model folder, sample video, its workflow file) for one case."""
    from modules.model.detection import detect_variant
    from modules.modelFile.lora_formats import COMFY_LORA, expert_lora_paths, extract_from_peft
    from modules.modelSaver.merged_model import COMFY, MergeInputs, merge_lora_into_model
    from modules.modelSaver.WanLoRASaver import lora_metadata, save_lora
    from modules.synthetic.tiny_model import write_tiny_model
    from tests.test_merge_families import adapted

    family, sampler, scheduler = CASES[case]
    model_dir = root / family
    if not model_dir.exists():
        write_tiny_model(family, model_dir)
    variant = detect_variant(model_dir)
    lora = root / "loras" / f"{case}_lora.safetensors"
    lora.parent.mkdir(parents=True, exist_ok=True)
    files = [Path(p) for p in expert_lora_paths(lora)] if variant.two_experts else [lora]
    for expert, file in enumerate(files):  # a random LoRA per expert (alpha 3 != rank)
        save_lora(extract_from_peft(adapted(model_dir, expert, "lora", root)), file, COMFY_LORA,
                  lora_metadata(f"wan-2.1-{variant.name.replace('_', '-')}"))
    base = root / "diffusion_models" / f"{family}.safetensors"  # the workflow's default name: the folder's
    base.parent.mkdir(parents=True, exist_ok=True)
    if not any(base.parent.glob(f"{family}*.safetensors")):
        merge_lora_into_model(MergeInputs(model_dir, None), base, COMFY, torch.float32)
    video = root / "samples" / f"{case}.webp"
    image = ["--image", str(first_frame(root / "samples" / "first.png"))] if family in IMAGE_FAMILIES else []
    if family.endswith("vace"):  # a control video and one reference image (WanVaceToVideo, then TrimVideoLatent)
        image = ["--control-video", str(control_video(root / "samples" / "control.mp4")),
                 "--elements", str(first_frame(root / "samples" / "first.png"))]
    if family == "flf2v":
        image += ["--last-image", str(first_frame(root / "samples" / "last.png", flip=True))]
    subprocess.run([sys.executable, str(ROOT / "scripts/sample.py"), "--model", str(model_dir), "--lora", str(files[0]),
                    "--prompt", SAMPLE["prompt"], "--frames", str(SAMPLE["frames"]), "--height", str(SAMPLE["height"]),
                    "--width", str(SAMPLE["width"]), "--steps", str(SAMPLE["steps"]),
                    "--cfg-scale", str(SAMPLE["cfg"]), "--seed", str(SAMPLE["seed"]), "--sampler", sampler,
                    "--scheduler", scheduler, "--device", "cpu", "--output", str(video), *image], check=True)
    return model_dir, video, video.with_name(video.stem + ".workflow.json")


def first_frame(path: Path, flip: bool = False) -> Path:
    """An I2V start image of the sample's size (a gradient and a disc), so neither side resizes it for the VAE."""
    import cv2

    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        h, w = SAMPLE["height"], SAMPLE["width"]
        y, x = np.mgrid[0:h, 0:w]
        image = np.stack([x * 255 // w, y * 255 // h, np.full_like(x, 90)], -1).astype(np.uint8)
        cv2.circle(image, (w // 3, h // 2), h // 5, (250, 240, 40), -1)
        image = image[:, ::-1] if flip else image
        cv2.imwrite(str(path), cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_RGB2BGR))
    return path


def control_video(path: Path) -> Path:
    """A VACE control video of the sample's size and length: a disc moving across a gradient."""
    from modules.util.video_write import write_video

    if not path.exists():
        import cv2

        h, w = SAMPLE["height"], SAMPLE["width"]
        frames = np.zeros((SAMPLE["frames"], h, w, 3), np.uint8)
        for i, frame in enumerate(frames):
            frame[:] = np.linspace(0, 200, w, dtype=np.uint8)[None, :, None]
            cv2.circle(frame, (8 + 10 * i, h // 2), h // 6, (255, 255, 255), -1)
        write_video(path, frames, 16)
    return path


def our_frames(video: Path) -> np.ndarray:
    """Every frame of the sample, from the lossless PNG strip beside it (F, H, W, 3) uint8."""
    import cv2

    strip = cv2.cvtColor(cv2.imread(str(video.with_suffix(".png"))), cv2.COLOR_BGR2RGB)
    return np.stack(np.split(strip, SAMPLE["frames"], axis=1))


def models_tree(workflow: dict, model_dir: Path, root: Path, tree: Path) -> None:
    """ComfyUI's models folders with the files the workflow's loaders name."""
    from safetensors.torch import load_file, save_file

    for node in workflow.values():
        kind, inputs = node["class_type"], node["inputs"]
        if kind == "UNETLoader":
            _link(root / "diffusion_models" / inputs["unet_name"], tree / "diffusion_models" / inputs["unet_name"])
        elif kind == "LoraLoaderModelOnly":
            _link(root / "loras" / inputs["lora_name"], tree / "loras" / inputs["lora_name"])
        elif kind == "LoadVideo":
            _link(root / "samples" / inputs["file"], tree / "input" / inputs["file"])
        elif kind == "LoadImage":
            _link(root / "samples" / inputs["image"], tree / "input" / inputs["image"])
        elif kind == "CLIPVisionLoader":
            target = tree / "clip_vision" / inputs["clip_name"]
            target.parent.mkdir(parents=True, exist_ok=True)
            state = load_file(str(model_dir / "image_encoder" / "model.safetensors"))
            # transformers 5 saves the tower without its prefix; ComfyUI's clip_vision_h has it
            save_file({k if k.startswith("vision_model.") else f"vision_model.{k}": v for k, v in state.items()},
                      str(target))
        elif kind == "CLIPLoader":
            target = tree / "text_encoders" / inputs["clip_name"]
            target.parent.mkdir(parents=True, exist_ok=True)
            save_file(load_file(str(model_dir / "text_encoder" / "model.safetensors")), str(target))
        elif kind == "VAELoader":
            target = tree / "vae" / inputs["vae_name"]
            target.parent.mkdir(parents=True, exist_ok=True)
            save_file(original_vae(load_file(str(model_dir / "vae" / "diffusion_pytorch_model.safetensors")),
                                   "wan2.2" in inputs["vae_name"]), str(target))


def _link(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists():
        target.symlink_to(source)


def original_vae(state: dict[str, torch.Tensor], wan22: bool) -> dict[str, torch.Tensor]:
    """diffusers' Wan VAE names -> Wan's original ones, by inverting our original -> diffusers converter on the
    names ComfyUI's own (tiny-sized) Wan VAE has."""
    import comfy.ldm.wan.vae
    import comfy.ldm.wan.vae2_2

    from modules.modelFile.wan_vae_names import wan_vae_to_diffusers

    vae = comfy.ldm.wan.vae2_2.WanVAE(**TINY_VAE22) if wan22 else comfy.ldm.wan.vae.WanVAE(**TINY_VAE)
    names = list(vae.state_dict())
    renamed = wan_vae_to_diffusers({name: torch.tensor(i) for i, name in enumerate(names)})
    inverse = {diffusers: names[int(index)] for diffusers, index in renamed.items()}
    missing = sorted(set(state) - set(inverse))
    if missing:
        raise SystemExit(f"VAE names not mapped: {missing[:5]}")
    return {inverse[name]: tensor for name, tensor in state.items()}


# ComfyUI on the CPU keeps the text encoder in fp16 (its default); the comparison is of float32 runs
FP32_FLAGS = ("--fp32-unet", "--fp32-vae", "--fp32-text-enc")
TINY_TEXT_DIM = 32
TINY_CLIP_DIM = 32  # the tiny CLIP vision tower's hidden size  # the tiny UMT5's d_model (the transformer's text_dim)
TINY_VAE = dict(dim=8, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=1, attn_scales=[],
                temperal_downsample=[False, True, True], dropout=0.0)
TINY_VAE22 = {**TINY_VAE, "dim": 4, "dec_dim": 8, "z_dim": 48}  # the real one: 160, 256


def load_comfyui(comfyui: Path, deps: Path, model_dir: Path) -> None:
    """Import ComfyUI (CPU) with the tiny-size patches the docstring lists."""
    sys.path[:0] = [str(comfyui), str(deps)]
    from tools.check_comfyui_adapters import StubModules

    StubModules.roots = tuple(r for r in StubModules.roots if r not in ("scipy", "aiohttp", "yaml", "psutil", "av"))
    sys.meta_path.append(StubModules())
    import comfy.options

    comfy.options.enable_args_parsing()
    sys.argv = [sys.argv[0], "--cpu", *FP32_FLAGS]
    import comfy.ldm.wan.vae
    import comfy.ldm.wan.vae2_2
    import comfy.model_detection
    import comfy.sd
    import comfy.sd1_clip
    import comfy.text_encoders.t5
    import comfy.text_encoders.wan
    from tokenizers import normalizers
    from transformers import AutoTokenizer

    vae_class = comfy.ldm.wan.vae.WanVAE
    comfy.ldm.wan.vae.WanVAE = lambda **kwargs: vae_class(**{**kwargs, **TINY_VAE})
    vae22_class = comfy.ldm.wan.vae2_2.WanVAE
    comfy.ldm.wan.vae2_2.WanVAE = lambda **kwargs: vae22_class(**{**kwargs, **TINY_VAE22})

    detect = comfy.model_detection.detect_unet_config

    def tiny_unet_config(*args, **kwargs):
        config = detect(*args, **kwargs)
        if config.get("image_model") == "wan2.1":
            config.update(num_heads=2, text_dim=TINY_TEXT_DIM)
        return config

    comfy.model_detection.detect_unet_config = tiny_unet_config
    import comfy.ldm.wan.model

    projection = comfy.ldm.wan.model.MLPProj  # the image embedder: MLPProj(1280, dim), 1280 = ViT-H's width
    comfy.ldm.wan.model.MLPProj = lambda in_dim, out_dim, **kwargs: projection(TINY_CLIP_DIM, out_dim, **kwargs)
    detect_te = comfy.sd.detect_te_model

    def tiny_te_model(sd):  # ComfyUI knows umT5-XXL by its 24th block; the tiny one has 2
        if sd.get("shared.weight", torch.empty(0, 0)).shape[-1] == TINY_TEXT_DIM:
            return comfy.sd.TEModel.T5_XXL
        return detect_te(sd)

    comfy.sd.detect_te_model = tiny_te_model
    te_config = json.loads((model_dir / "text_encoder" / "config.json").read_text())
    te_config = {k: te_config[k] for k in ("d_ff", "d_kv", "d_model", "num_heads", "num_layers", "vocab_size",
                                           "relative_attention_num_buckets", "layer_norm_epsilon", "model_type")}
    te_config.update(dense_act_fn="gelu_pytorch_tanh", is_gated_act=True)

    class TinyUMT5(comfy.sd1_clip.SDClipModel):
        def __init__(self, device="cpu", layer="last", layer_idx=None, dtype=None, model_options={}):
            super().__init__(device=device, layer=layer, layer_idx=layer_idx, textmodel_json_config=dict(te_config),
                             dtype=dtype, special_tokens={"end": 1, "pad": 0}, model_class=comfy.text_encoders.t5.T5,
                             enable_attention_masks=True, zero_out_masked=True, model_options=model_options)

    class HFTokenizer:
        @staticmethod
        def from_pretrained(path, **_):
            tokenizer = AutoTokenizer.from_pretrained(path)
            tokenizer.backend_tokenizer.normalizer = normalizers.NFKC()  # as umT5's spiece model (nmt_nfkc)
            return tokenizer

    class TinyTokenizer(comfy.sd1_clip.SDTokenizer):
        def __init__(self, embedding_directory=None, tokenizer_data={}):
            super().__init__(str(model_dir / "tokenizer"), pad_with_end=False, embedding_size=te_config["d_model"],
                             embedding_key="umt5xxl", tokenizer_class=HFTokenizer, has_start_token=False,
                             pad_to_max_length=False, max_length=99999999, min_length=512, pad_token=0,
                             tokenizer_data=tokenizer_data)

    comfy.text_encoders.wan.UMT5XXlModel = TinyUMT5
    vision = next(model_dir.parent.glob("*/image_encoder/config.json"), None)  # the tiny CLIP vision tower, if any
    if vision is not None:
        import comfy.clip_vision

        tiny = json.loads(vision.read_text())
        tiny = {k: tiny[k] for k in ("hidden_size", "intermediate_size", "projection_dim", "num_hidden_layers",
                                     "num_attention_heads", "num_channels", "image_size", "patch_size",
                                     "hidden_act", "layer_norm_eps")}
        config_file = model_dir.parent / "comfy_clip_vision_tiny.json"
        config_file.write_text(json.dumps({**tiny, "model_type": "clip_vision_model"}))
        load_vision = comfy.clip_vision.load_clipvision_from_sd

        def tiny_vision(sd, prefix="", convert_keys=False):  # ComfyUI knows ViT-H by its 31st layer
            if f"vision_model.encoder.layers.{tiny['num_hidden_layers']}.layer_norm1.weight" in sd or \
                    "vision_model.encoder.layers.0.layer_norm1.weight" not in sd:
                return load_vision(sd, prefix, convert_keys)
            clip = comfy.clip_vision.ClipVisionModel(str(config_file))
            clip.load_sd(sd)
            return clip

        comfy.clip_vision.load_clipvision_from_sd = tiny_vision
    comfy.text_encoders.wan.UMT5XXlTokenizer = TinyTokenizer


def run_workflow(workflow: dict, tree: Path) -> torch.Tensor:
    """Execute the API graph in ComfyUI's node classes; the images the save node gets (F, H, W, 3) in 0..1."""
    import asyncio

    import folder_paths
    import nodes

    for folder in ("diffusion_models", "loras", "text_encoders", "vae", "clip_vision"):
        folder_paths.add_model_folder_path(folder, str(tree / folder), is_default=True)
    (tree / "input").mkdir(parents=True, exist_ok=True)
    folder_paths.set_input_directory(str(tree / "input"))
    if "ModelSamplingSD3" not in nodes.NODE_CLASS_MAPPINGS:
        asyncio.run(nodes.init_extra_nodes(init_custom_nodes=False, init_api_nodes=False))
    outputs: dict[str, tuple] = {}

    def value(node_id: str):
        if node_id in outputs:
            return outputs[node_id]
        node = workflow[node_id]
        inputs = {k: value(v[0])[v[1]] if isinstance(v, list) else v for k, v in node["inputs"].items()}
        cls = nodes.NODE_CLASS_MAPPINGS[node["class_type"]]
        if hasattr(cls, "FUNCTION"):
            result = getattr(cls(), cls.FUNCTION)(**inputs)
        else:  # a v3 node (comfy_api): a classmethod execute returning NodeOutput
            result = cls.execute(**inputs)
            result = result.args if hasattr(result, "args") else result
        if isinstance(result, dict):
            result = result["result"]
        outputs[node_id] = tuple(result)
        logging.info("ran %s %s", node_id, node["class_type"])
        return outputs[node_id]

    save = next(n for n in workflow.values() if n["class_type"] == "SaveAnimatedWEBP")
    link = save["inputs"]["images"]
    with torch.inference_mode():  # as ComfyUI's executor runs every node
        return value(link[0])[link[1]]


def without_loras(workflow: dict) -> dict:
    """The workflow with every LoraLoaderModelOnly at strength 0 (the control: how far a missing LoRA is)."""
    copy = json.loads(json.dumps(workflow))
    for node in copy.values():
        if node["class_type"] == "LoraLoaderModelOnly":
            node["inputs"]["strength_model"] = 0.0
    return copy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--comfyui", type=Path, required=True)
    parser.add_argument("--deps", type=Path, required=True, help="the --target folder of ComfyUI's extra packages")
    parser.add_argument("--case", action="append", choices=sorted(CASES))
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="comfyrun-"))
    prepared = {case: prepare(case, root) for case in args.case or CASES}
    load_comfyui(args.comfyui, args.deps, next(iter(prepared.values()))[0])
    for case, (model_dir, video, workflow_file) in prepared.items():
        workflow = json.loads(workflow_file.read_text())
        tree = root / f"comfy-{case}"
        models_tree(workflow, model_dir, root, tree)
        ours = our_frames(video).astype(np.float32)
        theirs = run_workflow(workflow, tree).float().numpy() * 255
        saved = np.clip(theirs, 0, 255).astype(np.uint8)  # as SaveAnimatedWEBP converts them
        without = run_workflow(without_loras(workflow), tree).float().numpy() * 255  # what a lost LoRA would show
        print(f"{case:12s} {theirs.shape[0]} frames {theirs.shape[1]}x{theirs.shape[2]}: "
              f"max |ComfyUI - ours| {np.abs(theirs - ours).max():.3f}/255 (mean {np.abs(theirs - ours).mean():.3f}), "
              f"as saved {np.abs(saved - ours).max():.0f}/255 ({(saved != ours).mean():.1%} of values); "
              f"ComfyUI with the LoRA at 0: {np.abs(without - ours).max():.1f}/255; per frame max "
              f"{[round(float(d), 2) for d in np.abs(theirs - ours).reshape(len(ours), -1).max(1)]}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
