"""A byte-reproducible safetensors writer.

The safetensors library writes the header's metadata in hash order, which differs between processes,
so two identical trainings give files that differ in a few header bytes. This writer emits the same
format (8-byte little-endian header size, JSON header padded with spaces to 8 bytes, tensor data in
header order) with every key sorted; any safetensors reader loads it.
"""
from __future__ import annotations

import dataclasses
import json
import math
import struct
from typing import BinaryIO, Callable, Mapping

import torch

_DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
           torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
           torch.bool: "BOOL", torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2"}


def dtype_from_name(name: str) -> torch.dtype:
    """The torch dtype of a safetensors header dtype name ("BF16", "F32", ...)."""
    for dtype, label in _DTYPES.items():
        if label == name:
            return dtype
    raise ValueError(f"unsupported safetensors dtype '{name}'")


def write_safetensors(stream: BinaryIO, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
    specs = {name: TensorSpec(t.dtype, tuple(t.shape)) for name, t in tensors.items()}
    write_safetensors_streamed(stream, specs, tensors.__getitem__, metadata)


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def write_safetensors_streamed(stream: BinaryIO, specs: Mapping[str, TensorSpec], produce: Callable[[str], torch.Tensor],
                               metadata: dict[str, str] | None = None) -> None:
    """The same bytes as `write_safetensors`, but the header is built from `specs` and each tensor is asked
    of `produce` only when its data is written: one tensor in memory at a time (a merged 14B model)."""
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {k: str(metadata[k]) for k in sorted(metadata)}
    offset = 0
    for name in sorted(specs):
        spec = specs[name]
        header[name] = {"dtype": _DTYPES[spec.dtype], "shape": list(spec.shape),
                        "data_offsets": [offset, offset + spec.nbytes]}
        offset += spec.nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    stream.write(struct.pack("<Q", len(text)))
    stream.write(text)
    for name in sorted(specs):
        tensor = produce(name).detach().to("cpu").contiguous()
        if tensor.dtype != specs[name].dtype or tuple(tensor.shape) != specs[name].shape:
            raise ValueError(f"tensor '{name}' is {tensor.dtype} {tuple(tensor.shape)}, its header says "
                             f"{specs[name].dtype} {specs[name].shape}")
        if tensor.numel():
            stream.write(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
