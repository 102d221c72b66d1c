"""A fake CUDA device on a CPU-only torch: FakeTensors on `cuda` that autograd, autocast and the project's memory
features accept, so the real training step runs at full size without a GPU and without allocating its memory.

What it takes (each found by running the step, torch 2.13):
- **A device guard and CUDA hooks from a small C++ extension** (`GUARD_SOURCE`, built once with torch's own
  `cpp_extension` tooling and cached per torch version). Autograd's engine asks the device guard of every tensor's
  device for streams and events, and asks `at::accelerator` for the current stream; a CPU build has no CUDA guard
  ("PyTorch is not linked with support for cuda devices") and no accelerator ("Cannot access accelerator device when
  none is available"). The extension registers a guard whose streams are the default stream and whose events do
  nothing, and CUDA hooks that say CUDA is built (nothing else: no allocator, no generator). The hooks are read once
  per process, so the library must be loaded before `import torch`: `preload()` does that, which is why every
  measurement runs in a fresh process.
- **Python-side switches** (`fake_cuda_patches`): autocast refuses `cuda` when `torch.cuda` says it has no GPU, so
  that check is answered yes (CUDA autocast's own cast rules then apply to the fake tensors unchanged); streams and
  events are no-op objects; host memory is never pinned (host bytes are not measured); and scaled dot-product
  attention is routed to the fused flash / cuDNN / memory-efficient kernels a GPU runs (their fake kernels allocate
  what the CUDA kernels return: the output and the log-sum-exp), not the math path, which would build an L x L matrix.

Which patched calls reach ops below autocast, and how each honours it (docs/performance.md lists the same):
- `F.scaled_dot_product_attention` -> `_fused_sdpa`: it calls `aten::_scaled_dot_product_flash_attention`,
  `_scaled_dot_product_cudnn_attention` or `_scaled_dot_product_efficient_attention` itself, so the AutocastCUDA
  kernel of `aten::scaled_dot_product_attention` (a lower-precision op: q, k, v and a float mask cast to the autocast
  dtype) never runs. `_autocast_inputs` makes that cast first, then the kernel is chosen on the cast dtypes.
- `torch._int_mm` (the int8 ConvRot base): the op itself after CUDA's shape checks (M > 16, K and N multiples of 8,
  which its meta kernel lacks), so a call a GPU refuses fails here too; the meta kernel allocates what CUDA returns
  (int32 [M, N]). Its inputs are int8: autocast has nothing to cast.
- `Tensor.pin_memory`, `torch.utils.swap_tensors` (falls back to `.data =`), `FakeTensor.data` (keeps the device):
  no computation, only which storage a tensor holds; nothing for autocast to cast.
- The stream, event, synchronize and empty_cache stand-ins and `record_stream`: no tensor op at all.
Everything else (the model, the memory features, the loss, the optimizer) runs through the real dispatcher, where
CUDA autocast's own kernels cast the FakeTensors.

Nothing here changes numbers: FakeTensors compute nothing. It measures shapes, dtypes and lifetimes.
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

GUARD_SOURCE = r"""
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <ATen/detail/CUDAHooksInterface.h>

namespace {
using c10::Device;
using c10::DeviceType;
using c10::Stream;

// One device, one stream, events that are always complete: what autograd's engine needs to run on `cuda` tensors.
struct FakeCudaGuard final : public c10::impl::NoOpDeviceGuardImpl<DeviceType::CUDA> {
  Device exchangeDevice(Device) const override { return Device(DeviceType::CUDA, 0); }
  Device getDevice() const override { return Device(DeviceType::CUDA, 0); }
  Stream getStream(Device) const noexcept override { return Stream(Stream::DEFAULT, Device(DeviceType::CUDA, 0)); }
  Stream getNewStream(Device, int) const override { return Stream(Stream::DEFAULT, Device(DeviceType::CUDA, 0)); }
  Stream exchangeStream(Stream) const noexcept override { return Stream(Stream::DEFAULT, Device(DeviceType::CUDA, 0)); }
  void record(void** event, const Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {
    static int token;
    *event = &token;
  }
  void block(void*, const Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void synchronizeEvent(void*) const override {}
};
C10_REGISTER_GUARD_IMPL(CUDA, FakeCudaGuard);
}  // namespace

namespace at {
namespace fake_cuda {
// `at::accelerator` takes the accelerator that was built; nothing else of CUDA's runtime is claimed.
struct CUDAHooks : public at::CUDAHooksInterface {
  explicit CUDAHooks(at::CUDAHooksArgs) {}
  bool isBuilt() const override { return true; }
  bool hasCUDA() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return 1; }
  c10::DeviceIndex getCurrentDevice() const override { return 0; }
};
}  // namespace fake_cuda
C10_REGISTER_CLASS(CUDAHooksRegistry, CUDAHooks, fake_cuda::CUDAHooks);
}  // namespace at
"""

_BUILD_ENV = "WANTRAINER_FAKE_CUDA_DIR"


def _torch_lib() -> Path:
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        raise RuntimeError("torch is not installed")
    return Path(spec.origin).parent / "lib"


def build_dir() -> Path:
    """Where the extension is built: per torch build and source, so a new torch or a changed source rebuilds."""
    root = Path(os.environ.get(_BUILD_ENV) or Path.home() / ".cache" / "wantrainer" / "fake_cuda")
    key = hashlib.sha256((GUARD_SOURCE + str(_torch_lib())).encode()).hexdigest()[:12]
    from importlib.metadata import version

    return root / f"torch-{version('torch')}-{key}"


def library_path() -> Path:
    return build_dir() / "wan_fake_cuda.so"


def ensure_built() -> Path:
    """Build the extension in a child process (building imports torch, which must not be imported in a process that
    will preload it) unless it is built already; returns the library's path."""
    path = library_path()
    if path.is_file():
        return path
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / "build.lock", "w") as lock:  # two measurements starting at once build it once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.is_file():
            subprocess.run([sys.executable, __file__, "--build"], check=True)
    return path


def _build() -> None:
    from torch.utils.cpp_extension import load_inline

    folder = build_dir()
    folder.mkdir(parents=True, exist_ok=True)
    load_inline(name="wan_fake_cuda", cpp_sources=[GUARD_SOURCE], functions=None, build_directory=str(folder),
                is_python_module=False, verbose=False)


def preload() -> None:
    """Load the extension before torch: its CUDA hooks must be registered before torch first asks for them."""
    if "torch" in sys.modules:
        raise RuntimeError("fake_cuda.preload() must run before torch is imported")
    library = ensure_built()
    for name in ("libc10.so", "libtorch_cpu.so"):  # the extension links against them; load torch's own copies
        ctypes.CDLL(str(_torch_lib() / name), mode=ctypes.RTLD_GLOBAL)
    ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)


class _NoOpStream:
    def __init__(self, device=None, priority: int = 0, **_):
        self.device = device

    def wait_event(self, event) -> None:
        pass

    def wait_stream(self, stream) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def record_event(self, event=None):
        return event or _NoOpEvent()


class _NoOpEvent:
    def __init__(self, *args, **kwargs):
        pass

    def record(self, stream=None) -> None:
        pass

    def wait(self, stream=None) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True


def _autocast_inputs(*tensors):
    """What CUDA autocast's SDPA kernel (`aten::scaled_dot_product_attention` under AutocastCUDA, a lower-precision
    op) does before it picks a kernel: floating inputs other than float64 cast to the autocast dtype."""
    import torch

    if not torch.is_autocast_enabled("cuda"):
        return tensors
    dtype = torch.get_autocast_dtype("cuda")
    return tuple(t.to(dtype) if t is not None and t.is_floating_point() and t.dtype != torch.float64 else t
                 for t in tensors)


def _fused_sdpa(original):
    """scaled_dot_product_attention as CUDA runs it: autocast's cast first (this function replaces the op autocast
    would see), then the kernel SDPA's priority order picks among those `sdpa_kernel` leaves enabled: flash for
    bf16/fp16 without a mask, cuDNN where only it is enabled (diffusers' CUDNN backend), the memory-efficient kernel
    otherwise. Tensors off the fake GPU keep the original."""
    import torch
    from torch.backends import cuda as backends

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if query.device.type != "cuda" or enable_gqa:
            return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                            scale=scale, enable_gqa=enable_gqa)
        query, key, value, attn_mask = _autocast_inputs(query, key, value, attn_mask)
        with torch.autocast("cuda", enabled=False):  # the inputs are cast: the kernels run as autocast leaves them
            grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
            low = query.dtype in (torch.bfloat16, torch.float16)
            if attn_mask is None and low and backends.flash_sdp_enabled():
                return torch.ops.aten._scaled_dot_product_flash_attention(
                    query, key, value, dropout_p, is_causal, False, scale=scale)[0]
            if low and backends.cudnn_sdp_enabled() and not backends.mem_efficient_sdp_enabled():
                return torch.ops.aten._scaled_dot_product_cudnn_attention(
                    query, key, value, attn_mask, grad, dropout_p, is_causal, False, scale=scale)[0]
            return torch.ops.aten._scaled_dot_product_efficient_attention(
                query, key, value, attn_mask, grad, dropout_p, is_causal, scale=scale)[0]

    return sdpa


def _cuda_int_mm(original):
    """torch._int_mm with CUDA's shape rules (cuBLASLt's int8 GEMM: `_int_mm_out_cuda` refuses M <= 16, K or N not
    a multiple of 8), which the meta kernel behind a FakeTensor does not check: a call the GPU would refuse fails
    here too. What it allocates is the meta kernel's, CUDA's own: the int32 [M, N] result."""
    def int_mm(a, b, *args, **kwargs):
        if a.device.type == "cuda":
            if a.size(0) <= 16:
                raise RuntimeError(f"self.size(0) needs to be greater than 16, but got {a.size(0)}")
            if a.size(1) % 8 or b.size(1) % 8:
                raise RuntimeError(f"self.size(1) and mat2.size(1) must be multiples of 8, got {a.shape}, {b.shape}")
        return original(a, b, *args, **kwargs)

    return int_mm


def _swap_or_set_data(original):
    """`Module.to()` swaps FakeTensor parameters (torch._apply), which refuses a parameter that has a weak reference,
    and a FakeTensorMode keeps one to every Parameter it made. `.data =`, what the same call does to real tensors,
    gives the module the same new storage."""
    def swap(t1, t2):
        try:
            original(t1, t2)
        except RuntimeError as e:
            if "weakref" not in str(e):
                raise
            t1.data = t2.data

    return swap


def _data_with_device():
    """`param.data = other` (block swap, expert offload, fp8 storage) gives a FakeTensor the other's storage but
    keeps its own `fake_device`: a weight moved to the GPU would still say `cpu`. Take the device along."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    base = torch._C.TensorBase.data

    def set_data(self, value):
        base.__set__(self, value)
        if isinstance(value, FakeTensor):
            self.fake_device = value.fake_device

    return property(base.__get__, set_data)


@contextlib.contextmanager
def fake_cuda_patches():
    """The Python side of the fake device (see the module doc); restores everything on exit."""
    import torch
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensor

    saved = []

    def patch(owner, name, value):
        saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    patch(torch.cuda.amp.common, "amp_definitely_not_available", lambda: False)
    patch(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    patch(torch.cuda, "Stream", _NoOpStream)
    patch(torch.cuda, "Event", _NoOpEvent)
    patch(torch.cuda, "stream", lambda stream=None: contextlib.nullcontext())
    patch(torch.cuda, "current_stream", lambda device=None: _NoOpStream(device))
    patch(torch.cuda, "synchronize", lambda device=None: None)
    patch(torch.cuda, "empty_cache", lambda: None)
    patch(torch.Tensor, "record_stream", lambda self, stream: None)
    patch(torch.Tensor, "pin_memory", lambda self, device=None: self)
    patch(F, "scaled_dot_product_attention", _fused_sdpa(F.scaled_dot_product_attention))
    patch(torch, "_int_mm", _cuda_int_mm(torch._int_mm))
    patch(torch.utils, "swap_tensors", _swap_or_set_data(torch.utils.swap_tensors))
    patch(FakeTensor, "data", _data_with_device())
    try:
        yield
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)


if __name__ == "__main__":
    if sys.argv[1:] == ["--build"]:
        _build()
    else:
        print(ensure_built())
