"""Live device bytes of a run, counted as `torch.cuda.max_memory_allocated` counts them, from the tensors themselves.

`DeviceMemoryCounter` is a torch dispatch mode: every op's output storage on the counted device type is added once
(rounded up to the CUDA caching allocator's 512-byte blocks) and subtracted when the storage dies (a weak-reference
finalizer on the storage, which torch keeps alive exactly as long as any tensor or autograd node holds it). It works
on real tensors and on FakeTensors alike, so the same counter is checked against torch's `MemTracker` on real CPU
tensors (tests/test_memory_fullsize.py) and then run on the fake CUDA device (benchmarks/fake_cuda.py).

At the peak it records the phase (set by the caller: setup, forward, backward, optimizer, caching), the op that
allocated, the innermost module running, and a breakdown of what was live: frozen weights and buffers, trained
parameters, their gradients, optimizer state, and the rest (activations and temporaries).
"""
from __future__ import annotations

import dataclasses
import re
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

BLOCK = 512  # the CUDA caching allocator's smallest block: every allocation is rounded up to it
GIB = 2 ** 30
_BLOCK_INDEX = re.compile(r"blocks\.\d+\.")


def allocated_bytes(nbytes: int) -> int:
    return -(-nbytes // BLOCK) * BLOCK if nbytes else 0


@dataclasses.dataclass
class Peak:
    bytes: int = 0
    phase: str = ""
    op: str = ""
    module: str = ""
    breakdown: dict[str, int] = dataclasses.field(default_factory=dict)
    largest: list[tuple[str, int]] = dataclasses.field(default_factory=list)  # activations by allocating site

    def to_json(self) -> dict:
        return {"peak_gib": round(self.bytes / GIB, 3), "phase": self.phase, "op": self.op, "module": self.module,
                "breakdown_gib": {k: round(v / GIB, 3) for k, v in self.breakdown.items()},
                "largest_activations_gib": [[site, round(v / GIB, 3)] for site, v in self.largest]}


class DeviceMemoryCounter(TorchDispatchMode):
    """Counts live bytes of storages on `device_type`. `roots` (modules) and `optimizers` name what is live at the
    peak; the breakdown is refreshed whenever the peak grows by `breakdown_step` bytes (and at the very end)."""

    def __init__(self, device_type: str = "cuda", breakdown_step: int = 32 * 2 ** 20):
        super().__init__()
        self.device_type = device_type
        self.live = WeakIdKeyDictionary()
        self.current = 0
        self.peak = Peak()
        self.phase = "setup"
        self.phase_peaks: dict[str, int] = {}
        self.roots: list[torch.nn.Module] = []
        self.optimizers: list[torch.optim.Optimizer] = []
        self._modules: list[str] = []
        self._names: dict[int, str] = {}
        self._breakdown_at = -breakdown_step
        self._breakdown_step = breakdown_step
        self._hooks = []

    # --- counting ---------------------------------------------------------------------------------------------
    def track(self, tensor: torch.Tensor, op: str = "") -> None:
        """Count `tensor`'s storage if it is on the counted device and not counted yet."""
        if tensor.device.type != self.device_type:
            return
        storage = tensor.untyped_storage()
        if storage in self.live:
            return
        size = allocated_bytes(storage.nbytes())
        module = self._modules[-1] if self._modules else ""
        self.live[storage] = (size, f"{self.phase}: {op} in {module}" if op else self.phase)
        weakref.finalize(storage, self._free, size)
        self.current += size
        self.phase_peaks[self.phase] = max(self.phase_peaks.get(self.phase, 0), self.current)
        if self.current > self.peak.bytes:
            self.peak.bytes, self.peak.phase, self.peak.op = self.current, self.phase, op
            self.peak.module = module
            if self.current - self._breakdown_at >= self._breakdown_step:
                self.peak.breakdown, self.peak.largest = self.breakdown()
                self._breakdown_at = self.current

    def track_existing(self, *objects) -> None:
        """Count tensors created before the counter started (modules' parameters and buffers, plain tensors)."""
        for obj in objects:
            tensors = list(obj.parameters()) + list(obj.buffers()) if isinstance(obj, torch.nn.Module) else [obj]
            for tensor in tensors:
                if isinstance(tensor, torch.Tensor):
                    self.track(tensor)

    def _free(self, size: int) -> None:
        self.current -= size

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for item in tree_flatten(out)[0]:
            if isinstance(item, torch.Tensor):
                self.track(item, str(func))
        return out

    # --- context --------------------------------------------------------------------------------------------
    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self._modules.clear()  # checkpointing's early stop skips forward hooks: start each phase clean

    def watch(self, roots: list[torch.nn.Module], optimizers: list[torch.optim.Optimizer] = ()) -> None:
        """Name the modules (the innermost running one is recorded at the peak) and what the breakdown sorts."""
        self.roots, self.optimizers = list(roots), list(optimizers)
        for root in self.roots:
            for name, module in root.named_modules():
                self._names[id(module)] = name or type(module).__name__
        if not self._hooks:
            from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

            self._hooks = [register_module_forward_pre_hook(self._enter), register_module_forward_hook(self._leave)]

    def _enter(self, module, args) -> None:
        self._modules.append(self._names.get(id(module), type(module).__name__))

    def _leave(self, module, args, output) -> None:
        if self._modules:
            self._modules.pop()

    def close(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []

    def breakdown(self, top: int = 8) -> tuple[dict[str, int], list[tuple[str, int]]]:
        """Live bytes now, by kind (each storage counted once, in the first kind that holds it), and the `top`
        sites (phase, op and module that allocated) holding the most of the rest: activations and temporaries."""
        seen: set[int] = set()
        kinds = {"frozen_weights": 0, "trained_parameters": 0, "gradients": 0, "optimizer_state": 0}

        def add(kind: str, tensor) -> None:
            if not isinstance(tensor, torch.Tensor) or tensor.device.type != self.device_type:
                return
            storage = tensor.untyped_storage()
            key = id(storage)
            if key in seen or storage not in self.live:
                return
            seen.add(key)
            kinds[kind] += self.live[storage][0]

        for root in self.roots:
            for param in root.parameters():
                add("trained_parameters" if param.requires_grad else "frozen_weights", param)
                if param.grad is not None:
                    add("gradients", param.grad)
            for buffer in root.buffers():
                add("frozen_weights", buffer)
        for optimizer in self.optimizers:
            for state in optimizer.state.values():
                for value in state.values():
                    add("optimizer_state", value)
        kinds["activations_and_temporaries"] = max(0, self.current - sum(kinds.values()))
        sites: dict[str, int] = {}
        for storage, (size, site) in self.live.items():
            if id(storage) not in seen:
                site = _BLOCK_INDEX.sub("blocks.*.", site)  # the same site in every block, summed
                sites[site] = sites.get(site, 0) + size
        return kinds, sorted(sites.items(), key=lambda item: -item[1])[:top]

    def result(self) -> dict:
        if self.current >= self.peak.bytes:  # ends at its peak: the breakdown of the end state is exact
            self.peak.breakdown, self.peak.largest = self.breakdown()
        return {**self.peak.to_json(), "end_gib": round(self.current / GIB, 3),
                "phase_peaks_gib": {k: round(v / GIB, 3) for k, v in self.phase_peaks.items()}}
