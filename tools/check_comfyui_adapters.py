"""Runs ComfyUI's own LoRA loader (comfy.lora.load_lora + calculate_weight) on our LoRA, LoHa, LoKr and DoRA files.

Not a test: it needs a ComfyUI source tree, which CI does not have. The tests re-state the same loader
(tests/test_adapters.py); this checks that re-statement against the real one. From the repo root:

    git clone https://github.com/Comfy-Org/ComfyUI /tmp/comfyui && pip install --target /tmp/comfydeps einops
    .venv/bin/python tools/check_comfyui_adapters.py /tmp/comfyui /tmp/comfydeps

Prints, per adapter case: how many modules ComfyUI patched, how many keys it left unread (it logs
"lora key not loaded" for each), and the largest difference between its patched weight and peft's. Then the same
for a LoRA on a tiny VACE model's VACE and base blocks, with the key map of ComfyUI's own `VaceWanModel`
(comfy/ldm/wan/model.py) built at the tiny size, and for a LoRA the trainer saved after training on a ComfyUI int8
ConvRot file (base_weight_format INT8_CONVROT; the file quantised by comfy-kitchen, as tests/test_int8_files.py
writes it), with the key map of ComfyUI's own `WanModel`; and for an Animate-2 LoRA the trainer saved (its
default COMFY_LORA, self-attention q/k/v), with the key map of ComfyUI's `WanModel(model_type="i2v")` at the tiny
Animate-2's size: ComfyUI's `WanAnimate2Model` (comfy/ldm/wan/model_animate2.py, newer than this checkout) is that
model built with a block and self-attention subclass that add no parameters.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
import tempfile
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from diffusers import WanTransformer3DModel  # noqa: E402

from modules.modelFile.lora_formats import COMFY_LORA, extract_from_peft, to_state_dict  # noqa: E402
from modules.synthetic.tiny_model import write_tiny_model  # noqa: E402
from tests.test_adapters import CODEC_CASES, injected, original_to_diffusers, peft_weight  # noqa: E402
from tests.test_default_output import comfy_module_names  # noqa: E402


class StubModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Packages ComfyUI's model code imports at module level but its LoRA loading never calls."""

    roots = ("torchvision", "torchaudio", "av", "kornia", "spandrel", "scipy", "torchsde", "psutil", "aiohttp",
             "yaml", "comfy_kitchen", "alembic", "sqlalchemy")

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = mock.MagicMock()
        module.__path__, module.__spec__, module.__name__ = [], spec, spec.name
        return module

    def exec_module(self, module):
        pass


class Warnings(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def main() -> None:
    sys.path[:0] = sys.argv[1:3]  # ComfyUI, then the folder holding einops
    sys.meta_path.append(StubModules())
    import comfy.options

    comfy.options.enable_args_parsing()
    sys.argv = [sys.argv[0], "--cpu"]
    import comfy.lora

    warnings = Warnings()
    logging.getLogger().addHandler(warnings)
    root = Path(tempfile.mkdtemp())
    model_dir = write_tiny_model("i2v", root / "i2v")
    modules = comfy_module_names(WanTransformer3DModel.from_pretrained(model_dir / "transformer"))
    to_load = {f"diffusion_model.{m}": f"diffusion_model.{m}.weight" for m in modules}  # model_lora_keys_unet
    for case, options in {"lora": {}, **CODEC_CASES}.items():
        transformer = injected(model_dir, root, lora_alpha=3, **options)  # alpha != rank, random weights
        state = to_state_dict(extract_from_peft(transformer), COMFY_LORA)
        warnings.messages.clear()
        patches = comfy.lora.load_lora(state, to_load)
        error = 0.0
        names = original_to_diffusers(transformer)
        for wan_name, diffusers_name in names.items():
            module = transformer.get_submodule(diffusers_name)
            key = f"diffusion_model.{wan_name}.weight"
            weight = module.get_base_layer().weight.detach().float().clone()
            patched = comfy.lora.calculate_weight([(1.0, patches[key], 1.0, None, None)], weight, key)
            error = max(error, float((patched - peft_weight(module)).abs().max()))
        kind = type(next(iter(patches.values()))).__name__
        print(f"{case:16s} keys {len(state):4d}  patched {len(patches):3d}/{len(names)} modules as {kind:12s} "
              f"keys not loaded {sum('not loaded' in m for m in warnings.messages)}  max |ComfyUI - peft| {error:.2e}")
    check_vace(root, warnings)
    check_int8(root, warnings)
    check_animate2(root, warnings)


def comfy_wan_keys(config, model_class) -> dict[str, str]:
    """ComfyUI's LoRA key map of its own Wan model class built at `config`'s size (model_lora_keys_unet)."""
    import comfy.ops
    import torch

    model = model_class(dim=config.num_attention_heads * config.attention_head_dim, ffn_dim=config.ffn_dim,
                        num_heads=config.num_attention_heads, num_layers=config.num_layers, text_dim=config.text_dim,
                        in_dim=config.in_channels, out_dim=config.out_channels,
                        operations=comfy.ops.disable_weight_init, device="cpu", dtype=torch.float32,
                        **({"vace_layers": len(config.vace_layers), "vace_in_dim": config.vace_in_channels}
                           if getattr(config, "vace_layers", None) else {}))
    return comfy_key_map(model)


def comfy_key_map(model) -> dict[str, str]:
    """model_lora_keys_unet's map for a ComfyUI diffusion model: `diffusion_model.<module>` -> its weight's key."""
    weights = [f"diffusion_model.{k}" for k in model.state_dict()]
    return {k.removesuffix(".weight"): k for k in weights if k.endswith(".weight")}


def check_int8(root: Path, warnings: Warnings) -> None:
    """A LoRA trained through the trainer on a ComfyUI int8 ConvRot file, loaded by ComfyUI's load_lora with its
    WanModel's key map; its patch on the file's dequantised weight against the trained int8 layer + adapter."""
    import comfy.lora
    import torch
    from comfy.ldm.wan.model import WanModel
    from safetensors.torch import load_file

    from modules.config.train_config import TrainConfig
    from modules.modelLoader.WanModelLoader import WanModelLoader
    from modules.synthetic.synthetic_data import write_video_dataset
    from modules.trainer.GenericTrainer import GenericTrainer
    from tests.conftest import train_config_dict
    from tests.test_int8_files import comfy_int8_file

    model_dir = write_tiny_model("t2v", root / "t2v")
    base = WanModelLoader().load(str(model_dir), torch.device("cpu")).transformer
    path, quantised = comfy_int8_file(base.state_dict(), root / "wan_t2v_int8_convrot.safetensors")
    data = write_video_dataset(root / "clips", count=3, frames=17, height=64, width=64)
    values = train_config_dict(model_dir, data, root / "int8-run", epochs=2, output_dtype="FLOAT32",
                               base_weight_format="INT8_CONVROT", transformer_override=path)
    trainer = GenericTrainer(TrainConfig.from_dict(values))
    trainer.start()
    trainer.train()
    (saved,) = trainer.end()
    state = load_file(str(saved))
    warnings.messages.clear()
    patches = comfy.lora.load_lora(state, comfy_wan_keys(base.config, WanModel))
    error, int8_patched = 0.0, 0
    wan_names = {diffusers: wan for wan, diffusers in original_to_diffusers(trainer.model.transformer).items()}
    for layer in quantised:  # ComfyUI dequantises the file's layer, then patches it
        key = f"diffusion_model.{wan_names.get(layer)}.weight"
        if key not in patches:
            continue
        int8_patched += 1
        dequantised = trainer.model.transformer.get_submodule(layer).get_base_layer().weight.detach().float()
        patched = comfy.lora.calculate_weight([(1.0, patches[key], 1.0, None, None)], dequantised.clone(), key)
        error = max(error, float((patched - peft_weight(trainer.model.transformer.get_submodule(layer))).abs().max()))
    print(f"{'int8 file lora':16s} keys {len(state):4d}  patched {len(patches):3d} modules ({int8_patched} of the "
          f"file's {len(quantised)} int8 layers)  keys not loaded {sum('not loaded' in m for m in warnings.messages)}"
          f"  max |ComfyUI - peft| {error:.2e}")


def check_vace(root: Path, warnings: Warnings) -> None:
    """ComfyUI's VaceWanModel (its key names, not ours) and load_lora on our COMFY_LORA of a tiny VACE model."""
    import comfy.ops
    import torch
    from comfy.ldm.wan.model import VaceWanModel
    from diffusers import WanVACETransformer3DModel

    model_dir = write_tiny_model("vace", root / "vace")
    transformer = WanVACETransformer3DModel.from_pretrained(model_dir / "transformer")
    targets = [n for n, m in transformer.named_modules() if isinstance(m, torch.nn.Linear)
               and n.startswith(("blocks.", "vace_blocks."))]
    from peft import LoraConfig

    transformer.add_adapter(LoraConfig(r=4, lora_alpha=3, target_modules=targets, init_lora_weights=False))
    state = to_state_dict(extract_from_peft(transformer), COMFY_LORA)
    cfg = transformer.config
    comfy_model = VaceWanModel(dim=cfg.num_attention_heads * cfg.attention_head_dim, ffn_dim=cfg.ffn_dim,
                               num_heads=cfg.num_attention_heads, num_layers=cfg.num_layers, text_dim=cfg.text_dim,
                               vace_layers=len(cfg.vace_layers), vace_in_dim=cfg.vace_in_channels,
                               in_dim=cfg.in_channels, out_dim=cfg.out_channels,
                               operations=comfy.ops.disable_weight_init, device="cpu", dtype=torch.float32)
    warnings.messages.clear()
    patches = comfy.lora.load_lora(state, comfy_key_map(comfy_model))
    error = 0.0
    for wan_name, diffusers_name in original_to_diffusers(transformer).items():
        module = transformer.get_submodule(diffusers_name)
        key = f"diffusion_model.{wan_name}.weight"
        weight = module.get_base_layer().weight.detach().float().clone()
        patched = comfy.lora.calculate_weight([(1.0, patches[key], 1.0, None, None)], weight, key)
        error = max(error, float((patched - peft_weight(module)).abs().max()))
    vace = sum(".vace_blocks." in key for key in patches)
    print(f"{'vace lora':16s} keys {len(state):4d}  patched {len(patches):3d}/{len(targets)} modules ({vace} in "
          f"VaceWanModel's vace_blocks)  keys not loaded {sum('not loaded' in m for m in warnings.messages)}  "
          f"max |ComfyUI - peft| {error:.2e}")


def check_animate2(root: Path, warnings: Warnings) -> None:
    """A LoRA the trainer saved on a tiny Animate-2 (COMFY_LORA) through ComfyUI's load_lora with the key map of its
    WanModel(model_type="i2v") at that size, which WanAnimate2Model subclasses without adding parameters; each patch
    against the trained peft layer."""
    import comfy.lora
    import comfy.ops
    import torch
    from comfy.ldm.wan.model import WanModel
    from safetensors.torch import load_file

    from modules.config.train_config import TrainConfig
    from modules.synthetic.tiny_animate2 import write_tiny_animate2
    from modules.trainer.GenericTrainer import GenericTrainer
    from tests.conftest import train_config_dict
    from tests.test_animate2_training import FRAMES, SIZE, triplets

    model_dir = write_tiny_animate2(root / "animate_2")
    values = train_config_dict(model_dir, triplets(root / "animate2-clips"), root / "animate2-run", epochs=2,
                               frames=FRAMES, resolution=[SIZE, SIZE], learning_rate=1e-2, output_dtype="FLOAT32")
    trainer = GenericTrainer(TrainConfig.from_dict(values))
    trainer.start()
    trainer.train()
    (saved,) = trainer.end()
    state = load_file(str(saved))
    cfg = trainer.model.transformer.config
    comfy_model = WanModel(model_type="i2v", dim=cfg.dim, ffn_dim=cfg.ffn_dim, num_heads=cfg.num_heads,
                           num_layers=cfg.num_layers, text_dim=cfg.text_dim, in_dim=cfg.in_dim, out_dim=cfg.out_dim,
                           operations=comfy.ops.disable_weight_init, device="cpu", dtype=torch.float32)
    warnings.messages.clear()
    patches = comfy.lora.load_lora(state, comfy_key_map(comfy_model))
    error = 0.0
    ours = {"q": "to_q", "k": "to_k", "v": "to_v", "o": "to_out.0"}
    for key, patch in patches.items():  # diffusion_model.blocks.N.self_attn.q.weight
        block, projection = key.split(".")[2], key.split(".")[4]
        module = trainer.model.transformer.get_submodule(f"blocks.{block}.self_attn.{ours[projection]}")
        weight = module.get_base_layer().weight.detach().float().clone()
        patched = comfy.lora.calculate_weight([(1.0, patch, 1.0, None, None)], weight, key)
        error = max(error, float((patched - peft_weight(module)).abs().max()))
    print(f"{'animate-2 lora':16s} keys {len(state):4d}  patched {len(patches):3d} modules of ComfyUI's i2v WanModel "
          f"({sorted({k.split('.')[4] for k in patches})})  keys not loaded "
          f"{sum('not loaded' in m for m in warnings.messages)}  max |ComfyUI - peft| {error:.2e}")


if __name__ == "__main__":
    main()
