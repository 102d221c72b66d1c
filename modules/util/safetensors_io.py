"""A byte-reproducible safetensors writer.

The safetensors library writes the header's metadata in hash order, which differs between processes,
so two identical trainings give files that differ in a few header bytes. This writer emits the same
format (8-byte little-endian header size, JSON header padded with spaces to 8 bytes, tensor data in
header order) with every key sorted; any safetensors reader loads it.
"""
from __future__ import annotations

import json
import struct
from typing import BinaryIO

import torch

_DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
           torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
           torch.bool: "BOOL", torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2"}


def write_safetensors(stream: BinaryIO, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {k: str(metadata[k]) for k in sorted(metadata)}
    offset = 0
    blobs = []
    for name in sorted(tensors):
        tensor = tensors[name].detach().to("cpu").contiguous()
        data = tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
        header[name] = {"dtype": _DTYPES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    stream.write(struct.pack("<Q", len(text)))
    stream.write(text)
    for blob in blobs:
        stream.write(blob)
