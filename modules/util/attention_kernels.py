"""The attention kernels this machine can run (a fact about the installed packages and the device, no model code):
`attention_backend` for training (backends with a backward pass only), `sample_attention_backend` for samples.
AUTO takes the first available of FLASH, CUDNN, NATIVE on a CUDA device (NATIVE elsewhere). The config's checks read
this catalogue; setting a kernel on a transformer is `modules/model/attention/backend_setup.py`."""
from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Callable

from modules.util.enum import AttentionBackend


@dataclasses.dataclass(frozen=True)
class Backend:
    dispatcher_name: str  # diffusers' AttentionBackendName value
    package: str | None = None  # the module it needs
    cuda_only: bool = False
    backward: bool = True  # has a backward pass (can train)
    backward_on_cpu: bool = True


BACKENDS = {
    AttentionBackend.NATIVE: Backend("native"),
    AttentionBackend.FLASH: Backend("flash", "flash_attn", cuda_only=True),
    AttentionBackend.CUDNN: Backend("_native_cudnn", cuda_only=True),
    AttentionBackend.FLEX: Backend("flex", backward_on_cpu=False),
    AttentionBackend.SAGE: Backend("sage", "sageattention", cuda_only=True, backward=False),
}
AUTO_ORDER = (AttentionBackend.FLASH, AttentionBackend.CUDNN, AttentionBackend.NATIVE)


def unavailable(backend: AttentionBackend, device_type: str | Callable[[], str], training: bool) -> str | None:
    """Why `backend` cannot run here (None: it can). `device_type` may be a function, called only when the answer
    depends on the device (the config's check: train_device auto asks torch, which takes seconds to import)."""
    spec = BACKENDS[backend]

    def on_cuda() -> bool:
        return (device_type() if callable(device_type) else device_type) == "cuda"

    if spec.package and importlib.util.find_spec(spec.package) is None:
        return f"needs the '{spec.package}' package, which is not installed"
    if spec.cuda_only and not on_cuda():
        return "needs a CUDA (or ROCm) GPU"
    if training and not spec.backward:
        return "has no backward pass: it can sample (sample_attention_backend) but not train"
    if training and not spec.backward_on_cpu and not on_cuda():
        return "has no backward pass on the CPU: train with NATIVE there"
    return None


def resolve(backend: AttentionBackend, device_type: str, training: bool) -> AttentionBackend:
    if backend != AttentionBackend.AUTO:
        return backend
    return next(b for b in AUTO_ORDER if unavailable(b, device_type, training) is None)


def device_type_of(train_device: str) -> str:
    """The device type a config's train_device gives (auto: cuda when torch sees a GPU). Only "auto" imports
    torch, here rather than above: the config's checks call this, and a config error should not wait for torch."""
    if train_device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return train_device.split(":")[0]
