"""The torch dtype of each explicit `DataType` (AUTO is resolved per device by the model loader)."""
from __future__ import annotations

import torch

from modules.util.enum import DataType

TORCH_DTYPES = {DataType.FLOAT32: torch.float32, DataType.BFLOAT16: torch.bfloat16, DataType.FLOAT16: torch.float16}


def torch_dtype(data_type: DataType) -> torch.dtype:
    if data_type not in TORCH_DTYPES:
        raise ValueError(f"{data_type.name} has no single torch dtype")
    return TORCH_DTYPES[data_type]
