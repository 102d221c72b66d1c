"""The attention kernels this machine can run (a fact about the installed packages and the device, no model code):
`attention_backend` for training (backends with a backward pass only), `sample_attention_backend` for samples.
AUTO takes the first available kernel of the card's order (AUTO_ORDERS, by CUDA compute capability, each with the
measurement it rests on; docs/memory.md has the table), NATIVE elsewhere. The config's checks read this catalogue;
setting a kernel on a transformer is `modules/model/attention/backend_setup.py`."""
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
AUTO_ORDER = (AttentionBackend.FLASH, AttentionBackend.CUDNN, AttentionBackend.NATIVE)  # a card not measured
# AUTO's order by CUDA compute capability major (Hopper 9, Blackwell 10 and 12) and what says so. Only sources that
# measured: a card without a row keeps AUTO_ORDER (flash-attn first where installed, as before).
AUTO_ORDERS: dict[int, tuple[tuple[AttentionBackend, ...], str]] = {
    9: ((AttentionBackend.CUDNN, AttentionBackend.FLASH, AttentionBackend.NATIVE),
        "PyTorch 2.5 release notes: cuDNN's fused flash attention up to 75 % faster than FlashAttention-2 on H100 "
        "(flash-attn 2 is FLASH); on our H200 cuDNN ran Wan's attention at 54-59 % of peak (docs/performance.md)"),
    10: ((AttentionBackend.CUDNN, AttentionBackend.FLASH, AttentionBackend.NATIVE),
         "PyTorch 2.5 release notes: the cuDNN backend is its default for SDPA on H100 or newer GPUs (not measured "
         "here)"),
}
AUTO_ORDERS[12] = AUTO_ORDERS[10]


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


def auto_order(capability: tuple[int, int] | None) -> tuple[tuple[AttentionBackend, ...], str]:
    """AUTO's order of kernels for a CUDA card of `capability` (None: not known), and its source."""
    if capability is not None and capability[0] in AUTO_ORDERS:
        return AUTO_ORDERS[capability[0]]
    return AUTO_ORDER, "not measured on such a card: flash-attn, cuDNN, then torch's SDPA"


def cuda_capability() -> tuple[int, int] | None:
    """The first CUDA GPU's compute capability (None without one, or on ROCm, whose numbers are its own)."""
    import torch

    if not torch.cuda.is_available() or torch.version.hip:
        return None
    return tuple(torch.cuda.get_device_capability(0))


def resolve(backend: AttentionBackend, device_type: str, training: bool,
            capability: tuple[int, int] | None = None) -> AttentionBackend:
    """`backend`, AUTO resolved: on a CUDA device the first available of its card's order (`capability`, default
    the detected card's), NATIVE elsewhere."""
    if backend != AttentionBackend.AUTO:
        return backend
    if device_type == "cuda" and capability is None:
        capability = cuda_capability()
    order = auto_order(capability)[0] if device_type == "cuda" else AUTO_ORDER
    return next(b for b in order if unavailable(b, device_type, training) is None)


def device_type_of(train_device: str) -> str:
    """The device type a config's train_device gives (auto: cuda when torch sees a GPU). Only "auto" imports
    torch, here rather than above: the config's checks call this, and a config error should not wait for torch."""
    if train_device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return train_device.split(":")[0]
