"""Loads a Wan checkpoint into a WanModel.

Sources: a diffusers folder (the base), where any component's weights may come from a single file
instead (`*_override`: ComfyUI's split files or diffusers-named ones, bf16/fp16/fp8/fp8_scaled; see
`component_files`). The folder still gives the configs, the tokenizer and the scheduler. Resuming from
our own backups is the trainer's job (it loads the trained weights over the base model this loader returns).
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Callable, Sequence, TypeVar

import torch
from diffusers import AutoencoderKLWan, WanTransformer3DModel
from diffusers.schedulers import FlowMatchEulerDiscreteScheduler
from transformers import AutoTokenizer, CLIPImageProcessor, CLIPVisionModel, UMT5EncoderModel

from modules.config.train_config import BaseLoRAConfig, TrainConfig
from modules.model.attention.attention_processor import install as install_attention_processor
from modules.model.detection import detect_variant
from modules.model.registry import family_for
from modules.model.WanModel import WanModel
from modules.model.WanVariant import WanVariant
from modules.modelFile.base_loras import merge_base_loras
from modules.modelFile.component_files import (
    load_image_encoder_file,
    load_text_encoder_file,
    load_transformer_file,
    load_vae_file,
)
from modules.modelFile.single_file import SingleFile
from modules.modelLoader.transformer_check import check_transformer_config
from modules.modelSetup.fp8_storage import store_text_encoder_in_fp8
from modules.util.enum import DataType, EncoderDevice
from modules.util.errors import UserError
from modules.util.model_folders import require_safetensors

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
        vae_override: str = "",
        text_encoder_override: str = "",
        image_encoder_override: str = "",
        base_loras: Sequence[BaseLoRAConfig] = (),
        keep_int8: bool = False,
    ) -> WanModel:
        """The base folder's model; each `*_override` file replaces that component's weights; `base_loras` are
        merged into the transformer(s) before anything else sees them (`base_loras.py`). A ComfyUI int8 ConvRot
        transformer file is dequantised into the transformer dtype, or stays int8 with `keep_int8`
        (base_weight_format INT8_CONVROT)."""
        model_dir = Path(base_model_name)
        variant = detect_variant(model_dir)
        logger.info("loading %s (%s)", model_dir, variant.describe())
        t_dtype = resolve_dtype(transformer_dtype, train_device)
        overrides = {"text_encoder": text_encoder_override, "vae": vae_override, "transformer": transformer_override,
                     "transformer_2": transformer_2_override, "image_encoder": image_encoder_override}
        _check_weight_folders(model_dir, overrides)  # every component before any loads: a refusal takes no minutes
        for name in ("transformer", "transformer_2") if variant.two_experts else ("transformer",):
            if not overrides[name]:  # the config it is built from against its weights' headers, before building
                check_transformer_config(model_dir / name)
        tokenizer = _from_folder(model_dir / "tokenizer", "", AutoTokenizer.from_pretrained)
        text_encoder = self._load_text_encoder(model_dir, resolve_dtype(text_encoder_dtype, train_device),
                                               text_encoder_override)
        vae = self._load_vae(model_dir, resolve_dtype(vae_dtype, train_device), vae_override)
        transformer_class = family_for(variant).transformer_class  # WanVACETransformer3DModel for VACE
        transformer = self._load_transformer(model_dir, "transformer", t_dtype, transformer_override, transformer_class,
                                             keep_int8)
        transformer_2 = None
        if variant.two_experts:
            transformer_2 = self._load_transformer(model_dir, "transformer_2", t_dtype, transformer_2_override,
                                                   transformer_class, keep_int8)
        image_encoder, image_processor = self._load_image_encoder(
            model_dir, variant, resolve_dtype(image_encoder_dtype, train_device), image_encoder_override)
        scheduler = _from_folder(model_dir, "", self._load_scheduler)

        for module in (text_encoder, vae, transformer, transformer_2, image_encoder):
            if module is not None:
                module.requires_grad_(False)
                module.eval()
        model = WanModel(
            variant=variant, model_dir=model_dir, tokenizer=tokenizer, text_encoder=text_encoder, vae=vae,
            transformer=transformer, transformer_2=transformer_2, image_encoder=image_encoder,
            image_processor=image_processor, scheduler=scheduler, train_device=train_device,
            train_dtype=resolve_dtype(train_dtype, train_device),
            component_sources={name: Path(file) for name, file in (
                ("vae", vae_override), ("text_encoder", text_encoder_override),
                ("image_encoder", image_encoder_override), ("transformer", transformer_override),
                ("transformer_2", transformer_2_override)) if file},
        )
        merge_base_loras(model, base_loras)  # the one point: before fp8, block swap and adapters (model setup)
        return model

    def load_for_config(self, config: TrainConfig, device: torch.device) -> WanModel:
        """The model a training config names: base folder, override files and dtypes (one place for that
        mapping: the trainer and preview_e2v.py load through it)."""
        model = self.load(
            config.base_model_name, device, transformer_dtype=config.transformer_dtype,
            text_encoder_dtype=config.text_encoder_dtype, vae_dtype=config.vae_dtype,
            image_encoder_dtype=config.image_encoder_dtype, train_dtype=config.train_dtype,
            transformer_override=config.transformer_override, transformer_2_override=config.transformer_2_override,
            vae_override=config.vae_override, text_encoder_override=config.text_encoder_override,
            image_encoder_override=config.image_encoder_override, base_loras=config.base_loras,
            keep_int8=config.int8_base(),
        )
        if config.text_encoder_fp8:
            store_text_encoder_in_fp8(model.text_encoder)
        folder = config.e2v.image_encoder_model_name
        clip_folder = ""
        if config.dataset_config and folder and model.image_encoder is None:  # E2V's CLIP from another checkpoint
            model.image_encoder, model.image_processor = self.load_image_encoder(folder, model.train_device,
                                                                                 config.image_encoder_dtype)
            model.component_sources["image_encoder"] = Path(folder) / "image_encoder"
            clip_folder = folder
        model.residency.loaders = self._encoder_loaders(config, model, clip_folder)
        return model

    def _encoder_loaders(self, config: TrainConfig, model: WanModel, clip_folder: str) -> dict[str, Callable]:
        """How to load UMT5 and CLIP again after the trainer freed them (model/encoder_residency.py): the same files,
        dtypes and fp8 storage as now, onto their home device (UMT5's is the CPU with
        `text_encoder_caching_device: CPU`)."""
        device = model.train_device
        text_home = torch.device("cpu") if config.text_encoder_caching_device == EncoderDevice.CPU else device

        def text() -> torch.nn.Module:
            encoder = self._load_text_encoder(model.model_dir, resolve_dtype(config.text_encoder_dtype, device),
                                              config.text_encoder_override)
            if config.text_encoder_fp8:
                store_text_encoder_in_fp8(encoder)
            return encoder.requires_grad_(False).eval().to(text_home)

        def clip() -> torch.nn.Module:
            if clip_folder:
                return self.load_image_encoder(clip_folder, device, config.image_encoder_dtype)[0]
            encoder, _ = self._load_image_encoder(model.model_dir, model.variant,
                                                  resolve_dtype(config.image_encoder_dtype, device),
                                                  config.image_encoder_override)
            return encoder.requires_grad_(False).eval().to(device)

        return {"text": text, **({"clip": clip} if model.image_encoder is not None else {})}

    @staticmethod
    def load_image_encoder(folder: str, device: torch.device, dtype: DataType = DataType.FLOAT32,
                           override: str = "") -> tuple[CLIPVisionModel, CLIPImageProcessor]:
        """CLIP image encoder + processor from another checkpoint's image_encoder/ and image_processor/, or
        from the `override` file (image_encoder_override) with `folder`'s configs where it has them."""
        root = Path(folder)
        torch_dtype = resolve_dtype(dtype, device)
        if override:
            encoder, processor = load_image_encoder_file(SingleFile("image_encoder_override", Path(override)), root,
                                                         torch_dtype)
        elif not (root / "image_encoder").is_dir() or not (root / "image_processor").is_dir():
            raise UserError(f"'{root}' has no image_encoder/ and image_processor/ folders: point "
                            "e2v.image_encoder_model_name at an I2V checkpoint folder")
        else:
            require_safetensors(root / "image_encoder", CLIPVisionModel, ", or set image_encoder_override")
            encoder = CLIPVisionModel.from_pretrained(root / "image_encoder", dtype=torch_dtype, use_safetensors=True)
            processor = CLIPImageProcessor.from_pretrained(root / "image_processor")
        encoder.requires_grad_(False)
        encoder.eval()
        return encoder.to(device), processor

    @staticmethod
    def _load_transformer(model_dir: Path, name: str, dtype: torch.dtype, override: str,
                          transformer_class: type = WanTransformer3DModel,
                          keep_int8: bool = False) -> WanTransformer3DModel:
        if override:
            if transformer_class is not WanTransformer3DModel:
                raise UserError(f"{name}_override: single-file transformers of {transformer_class.__name__} "
                                "models are not read yet; use the diffusers folder's own transformer")
            transformer = load_transformer_file(SingleFile(f"{name}_override", Path(override)), model_dir / name,
                                                dtype, keep_int8)
        else:
            transformer = _from_folder(model_dir / name, f"{name}_override",
                                       lambda folder: transformer_class.from_pretrained(folder, torch_dtype=dtype,
                                                                                        use_safetensors=True))
        install_attention_processor(transformer)  # one dtype at every attention kernel, whatever runs it
        return transformer

    @staticmethod
    def _load_vae(model_dir: Path, dtype: torch.dtype, override: str) -> AutoencoderKLWan:
        if override:
            return load_vae_file(SingleFile("vae_override", Path(override)), model_dir / "vae", dtype)
        return _from_folder(model_dir / "vae", "vae_override",
                            lambda folder: AutoencoderKLWan.from_pretrained(folder, torch_dtype=dtype,
                                                                            use_safetensors=True))

    @staticmethod
    def _load_text_encoder(model_dir: Path, dtype: torch.dtype, override: str) -> UMT5EncoderModel:
        if override:
            return load_text_encoder_file(SingleFile("text_encoder_override", Path(override)),
                                          model_dir / "text_encoder", dtype)
        return _from_folder(model_dir / "text_encoder", "text_encoder_override",
                            lambda folder: UMT5EncoderModel.from_pretrained(folder, dtype=dtype, use_safetensors=True))

    @staticmethod
    def _load_image_encoder(model_dir: Path, variant: WanVariant, dtype: torch.dtype,
                            override: str) -> tuple[CLIPVisionModel | None, CLIPImageProcessor | None]:
        """The folder's CLIP for bases that ship one; the override file for any base (an E2V run on a T2V
        base takes its CLIP from it)."""
        if override:
            return load_image_encoder_file(SingleFile("image_encoder_override", Path(override)), model_dir, dtype)
        if not variant.has_image_encoder:
            return None, None
        encoder = _from_folder(model_dir / "image_encoder", "image_encoder_override",
                               lambda folder: CLIPVisionModel.from_pretrained(folder, dtype=dtype, use_safetensors=True))
        return encoder, _from_folder(model_dir / "image_processor", "", CLIPImageProcessor.from_pretrained)

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


Loaded = TypeVar("Loaded")


_WEIGHT_CLASSES = {"text_encoder": UMT5EncoderModel, "vae": AutoencoderKLWan, "transformer": WanTransformer3DModel,
                   "transformer_2": WanTransformer3DModel, "image_encoder": CLIPVisionModel}


def _check_weight_folders(model_dir: Path, overrides: dict[str, str]) -> None:
    """The base folder's weights are safetensors only (`require_safetensors`), for each component no override
    file replaces; the loaders then pass use_safetensors=True, so nothing falls back to a pickle."""
    for name, model_class in _WEIGHT_CLASSES.items():
        if not overrides.get(name):
            require_safetensors(model_dir / name, model_class,
                                f", or set {name}_override to a single .safetensors file")


def _from_folder(folder: Path, override_key: str, load: Callable[[Path], Loaded]) -> Loaded:
    """`load(folder)`; a folder without what it needs is one line (naming the override key that can stand in)."""
    try:
        return load(folder)
    except (OSError, ValueError) as e:
        instead = f", or set {override_key} to a single .safetensors file" if override_key else ""
        raise UserError(f"could not load '{folder}' from the model folder: {str(e).splitlines()[0]}: "
                        f"give a complete diffusers-format folder in base_model_name{instead}") from None
