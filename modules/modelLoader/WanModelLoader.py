"""Loads a Wan checkpoint into a WanModel.

Sources: a diffusers folder (the base), optionally with a single-file transformer override in diffusers
or original/ComfyUI key names. Resuming from our own backups is the trainer's job (it loads the
trained weights over the base model this loader returns).
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import torch
from diffusers import AutoencoderKLWan, WanTransformer3DModel
from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers
from diffusers.schedulers import FlowMatchEulerDiscreteScheduler
from safetensors import SafetensorError
from safetensors.torch import load_file
from transformers import AutoTokenizer, CLIPImageProcessor, CLIPVisionModel, UMT5EncoderModel

from modules.model.WanModel import WanModel
from modules.model.WanVariant import detect_variant
from modules.util.enum import DataType
from modules.util.errors import UserError

logger = logging.getLogger(__name__)

_DTYPES = {DataType.FLOAT32: torch.float32, DataType.BFLOAT16: torch.bfloat16, DataType.FLOAT16: torch.float16}


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"config key 'train_device' is '{name}': use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError("config key 'train_device' asks for cuda but no CUDA/ROCm GPU is visible: set it to cpu or auto")
    return device


def resolve_dtype(dtype: DataType, device: torch.device) -> torch.dtype:
    """AUTO is bfloat16 on a GPU and float32 on the CPU (CPU bf16 matmuls are slow and lossy)."""
    if dtype == DataType.AUTO:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return _DTYPES[dtype]


def load_transformer_file(path: str | Path, like: WanTransformer3DModel) -> dict[str, torch.Tensor]:
    """A single-file transformer in diffusers or original Wan (ComfyUI) key names -> diffusers state dict."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"transformer override '{path}' does not exist: check transformer_override")
    try:
        state = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise UserError(f"transformer override '{path}' is not a readable safetensors file ({e})") from None
    for prefix in ("model.diffusion_model.", "diffusion_model."):
        if all(k.startswith(prefix) for k in state):
            state = {k[len(prefix):]: v for k, v in state.items()}
    if any(".self_attn." in k for k in state):  # original Wan names
        state = convert_wan_transformer_to_diffusers(state)
    expected = set(like.state_dict())
    missing, unexpected = expected - set(state), set(state) - expected
    if missing or unexpected:
        example = sorted(missing or unexpected)[0]
        raise UserError(
            f"transformer override '{path}' does not match the base model's transformer "
            f"({len(missing)} missing, {len(unexpected)} unexpected keys, e.g. '{example}'): use a file of the same variant"
        )
    return state


class WanModelLoader:
    def load(
        self,
        base_model_name: str,
        train_device: torch.device,
        transformer_dtype: DataType = DataType.AUTO,
        text_encoder_dtype: DataType = DataType.AUTO,
        vae_dtype: DataType = DataType.FLOAT32,
        image_encoder_dtype: DataType = DataType.FLOAT32,
        train_dtype: DataType = DataType.AUTO,
        transformer_override: str = "",
        transformer_2_override: str = "",
    ) -> WanModel:
        model_dir = Path(base_model_name)
        variant = detect_variant(model_dir)
        logger.info("loading %s (%s)", model_dir, variant.describe())
        t_dtype = resolve_dtype(transformer_dtype, train_device)
        try:
            tokenizer = AutoTokenizer.from_pretrained(model_dir / "tokenizer")
            text_encoder = UMT5EncoderModel.from_pretrained(model_dir / "text_encoder",
                                                            dtype=resolve_dtype(text_encoder_dtype, train_device))
            vae = AutoencoderKLWan.from_pretrained(model_dir / "vae", torch_dtype=resolve_dtype(vae_dtype, train_device))
            transformer = self._load_transformer(model_dir / "transformer", t_dtype, transformer_override)
            transformer_2 = None
            if variant.two_experts:
                transformer_2 = self._load_transformer(model_dir / "transformer_2", t_dtype, transformer_2_override)
            image_encoder = image_processor = None
            if variant.has_image_encoder:
                image_encoder = CLIPVisionModel.from_pretrained(model_dir / "image_encoder",
                                                                dtype=resolve_dtype(image_encoder_dtype, train_device))
                image_processor = CLIPImageProcessor.from_pretrained(model_dir / "image_processor")
            scheduler = self._load_scheduler(model_dir)
        except (OSError, ValueError) as e:
            raise UserError(f"could not load the model folder '{model_dir}': {str(e).splitlines()[0]}") from None

        for module in (text_encoder, vae, transformer, transformer_2, image_encoder):
            if module is not None:
                module.requires_grad_(False)
                module.eval()
        return WanModel(
            variant=variant, model_dir=model_dir, tokenizer=tokenizer, text_encoder=text_encoder, vae=vae,
            transformer=transformer, transformer_2=transformer_2, image_encoder=image_encoder,
            image_processor=image_processor, scheduler=scheduler, train_device=train_device,
            train_dtype=resolve_dtype(train_dtype, train_device),
        )

    @staticmethod
    def load_image_encoder(folder: str, device: torch.device, dtype: DataType = DataType.FLOAT32):
        """CLIP image encoder + processor from another checkpoint's image_encoder/ and image_processor/."""
        root = Path(folder)
        if not (root / "image_encoder").is_dir() or not (root / "image_processor").is_dir():
            raise UserError(f"'{root}' has no image_encoder/ and image_processor/ folders: point "
                            "e2v.image_encoder_model_name at an I2V checkpoint folder")
        encoder = CLIPVisionModel.from_pretrained(root / "image_encoder", dtype=resolve_dtype(dtype, device))
        encoder.requires_grad_(False)
        encoder.eval()
        return encoder.to(device), CLIPImageProcessor.from_pretrained(root / "image_processor")

    @staticmethod
    def _load_transformer(folder: Path, dtype: torch.dtype, override: str) -> WanTransformer3DModel:
        if not override:
            return WanTransformer3DModel.from_pretrained(folder, torch_dtype=dtype)
        config = WanTransformer3DModel.load_config(folder)
        with torch.device("meta"):
            transformer = WanTransformer3DModel.from_config(config)
        state = load_transformer_file(override, transformer)
        transformer.load_state_dict(state, strict=True, assign=True)
        return transformer.to(dtype)

    @staticmethod
    def _load_scheduler(model_dir: Path):
        """The folder's sampling scheduler (UniPC with flow sigmas in the real checkpoints)."""
        import diffusers

        config_file = model_dir / "scheduler" / "scheduler_config.json"
        if not config_file.is_file():
            return FlowMatchEulerDiscreteScheduler(shift=5.0)
        name = json.loads(config_file.read_text(encoding="utf-8")).get("_class_name", "")
        cls = getattr(diffusers, name, None) or FlowMatchEulerDiscreteScheduler
        return cls.from_pretrained(model_dir / "scheduler")
