"""The text encoder and CLIP after caching: freed, with what the samples need encoded ahead and kept.

UMT5-XXL (10.6 GiB in bf16) and CLIP are needed after caching only by the samples, whose prompts and images are
known when the run starts. The trainer encodes them then (trainer/sample_inputs.py) into `EncodedInputs` (kept in
memory and in the cache folder), `EncoderResidency.release` frees the encoders — their weights moved to the meta
device, so configs, shapes and dtypes stay readable while host and device memory are given back — and the model's
encode methods (`WanModel.encode_prompts`, `encoded_images`) answer from what was kept. An input nobody encoded
ahead (a prompt added later, a cache entry re-encoded during training) loads the encoder again from its files
(`loaders`, set by the model loader; logged), encodes it and keeps the result, so the next sampling round finds it;
the trainer frees the encoder again after the round.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from typing import Callable, Protocol, Sequence

import numpy as np
import torch

from modules.util.device_memory import give_back_memory

logger = logging.getLogger(__name__)

ENCODER_ATTRIBUTES = {"text": "text_encoder", "clip": "image_encoder"}
ENCODER_LABELS = {"text": "text encoder (UMT5)", "clip": "image encoder (CLIP)"}
META = torch.device("meta")


class EncodedStore(Protocol):
    """Where kept inputs persist beside the memory copy (the trainer's: safetensors files in the cache folder)."""

    def get(self, key: str) -> dict[str, torch.Tensor] | None: ...

    def put(self, key: str, tensors: dict[str, torch.Tensor]) -> None: ...


@dataclasses.dataclass
class EncodedInputs:
    """Encoder outputs kept by key (`prompt_key`, `image_key`), each a dict of CPU tensors as a cache entry holds
    them. Filled while `recording` (the trainer's encoding ahead) and by inputs encoded after a reload; read first
    by every encode method. `deferring`: prompts are only noted (`deferred`) and answered with zeros — the trainer
    runs each sample's generation up to its first step with CLIP placed, then encodes the noted prompts with UMT5
    placed alone."""

    kept: dict[str, dict[str, torch.Tensor]] = dataclasses.field(default_factory=dict)
    recording: bool = False
    deferring: bool = False
    deferred: list[tuple[str, ...]] = dataclasses.field(default_factory=list)
    store: EncodedStore | None = None

    def lookup(self, key: str) -> dict[str, torch.Tensor] | None:
        entry = self.kept.get(key)
        if entry is None and self.store is not None:
            entry = self.store.get(key)
            if entry is not None:
                self.kept[key] = entry
        return entry

    def keep(self, key: str, tensors: dict[str, torch.Tensor]) -> None:
        entry = {name: t.detach().to("cpu").contiguous() for name, t in tensors.items()}
        self.kept[key] = entry
        if self.store is not None:
            self.store.put(key, entry)

    def note(self, prompts: Sequence[str]) -> None:
        if tuple(prompts) not in self.deferred:
            self.deferred.append(tuple(prompts))


def prompt_key(prompts: Sequence[str]) -> str:
    """The key of one `encode_prompts` call: its prompts in order (a batch is encoded as one, as the sampler does)."""
    return "prompts-" + hashlib.sha256(json.dumps(list(prompts), ensure_ascii=False).encode("utf-8")).hexdigest()


def image_key(tag: str, inputs: Sequence, device: torch.device) -> str:
    """The key of one image-encoder call: who calls (`tag`: each caller preprocesses its own way), the inputs' exact
    values, the device type it runs on and the autocast state there (both change the last bits)."""
    digest = hashlib.sha256(tag.encode())
    autocast = torch.is_autocast_enabled(device.type)
    digest.update(f"{device.type}:{autocast}:{torch.get_autocast_dtype(device.type) if autocast else ''}".encode())
    for value in inputs:
        array = value.detach().cpu().contiguous() if isinstance(value, torch.Tensor) else np.ascontiguousarray(value)
        digest.update(f"{type(value).__name__}:{tuple(array.shape)}:{array.dtype}:".encode())
        data = array.reshape(-1).view(torch.uint8).numpy() if isinstance(array, torch.Tensor) else array.tobytes()
        digest.update(data)
    return f"images-{digest.hexdigest()}"


def real_token_rows(embeds: torch.Tensor) -> dict[str, torch.Tensor]:
    """(B, L, D) prompt states -> each row without its trailing all-zero positions (diffusers' padding; at least one
    position), as `row_<i>`: `padded_rows` gives the same tensor back, bit for bit."""
    rows = {}
    for index, row in enumerate(embeds):
        nonzero = (row != 0).any(-1).nonzero()
        length = int(nonzero.max()) + 1 if len(nonzero) else 1
        rows[f"row_{index}"] = row[:length]
    return rows


def padded_rows(rows: dict[str, torch.Tensor], length: int) -> torch.Tensor:
    ordered = [rows[f"row_{i}"] for i in range(len(rows))]
    return torch.stack([torch.cat([r, r.new_zeros(length - r.shape[0], r.shape[1])]) for r in ordered])


def _module_bytes(module: torch.nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in [*module.parameters(), *module.buffers()] if t.device != META)


@dataclasses.dataclass
class EncoderResidency:
    """Which encoders are freed, how to load each again (`loaders`: name -> a function returning the module on its
    home device, set by `WanModelLoader.load_for_config`), and `before_use(name)`, called before an encoder runs
    while the trainer encodes ahead (its placement)."""

    loaders: dict[str, Callable[[], torch.nn.Module]] = dataclasses.field(default_factory=dict)
    released: set[str] = dataclasses.field(default_factory=set)
    before_use: Callable[[str], None] | None = None
    loaded_again: bool = False  # an encoder was loaded again since the last `release` (the trainer frees it again)

    def ready(self, model, name: str, why: str) -> torch.nn.Module:
        """Encoder `name` of `model`, loaded again first when it was released."""
        if name in self.released:
            logger.info("loading the %s again %s", ENCODER_LABELS[name], why)
            setattr(model, ENCODER_ATTRIBUTES[name], self.loaders[name]())
            self.released.discard(name)
            self.loaded_again = True
        if self.before_use is not None:
            self.before_use(name)
        return getattr(model, ENCODER_ATTRIBUTES[name])

    def release(self, model, names: Sequence[str]) -> float:
        """Free the encoders `names` of `model` that it has and can load again; returns the GiB given back."""
        freed = 0
        devices = set()
        for name in names:
            module = getattr(model, ENCODER_ATTRIBUTES[name])
            if module is None or name in self.released or name not in self.loaders:
                continue
            freed += _module_bytes(module)
            devices.update(t.device for t in module.parameters())
            module.to(META)
            self.released.add(name)
            logger.info("%s freed; it is loaded again only for an input not encoded ahead", ENCODER_LABELS[name])
        if freed:
            give_back_memory(next((d for d in devices if d.type == "cuda"), None))
        self.loaded_again = False
        return freed / 2 ** 30
