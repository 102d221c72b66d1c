"""Memory features for real GPUs: block swap, fp8 weight storage, activation offload, idle-expert offload,
encoders off the GPU after caching, VAE tiling.

All of them leave the math unchanged (fp8 storage up to its rounding), so they are tested on the CPU
for equal losses and measured on a GPU.
"""
from __future__ import annotations

import contextlib
import logging

import torch
from diffusers import WanTransformer3DModel

from modules.config.train_config import TrainConfig
from modules.modelSetup.fp8_storage import store_linears_in_fp8
from modules.modelSetup.int8_storage import int8_layers, store_linears_in_int8
from modules.modelSetup.pinned_arena import ActivationArena, HostArena
from modules.util.device_memory import release_from_device  # noqa: F401 - re-exported: the trainer's import
from modules.util.enum import Fp8Scale
from modules.util.errors import UserError

logger = logging.getLogger(__name__)


def enable_fp8_storage(transformer: WanTransformer3DModel, compute_dtype: torch.dtype,
                       keep: tuple[str, ...] = (), scale: Fp8Scale = Fp8Scale.NONE) -> None:
    """Store the frozen base weights of the Linear layers in float8 (e4m3), plain or scaled (`fp8_storage`),
    dequantized per layer in the forward pass.

    Must run before LoRA injection: the LoRA matrices added afterwards keep their own dtype. `keep` names
    modules that train fully (E2V-expanded inputs) and so stay in full precision; the model's own
    `_skip_layerwise_casting_patterns` (patch embedding, condition embedder, norms) stay as they are too.
    """
    patterns = tuple(getattr(transformer, "_skip_layerwise_casting_patterns", None) or ())
    count = store_linears_in_fp8(transformer, compute_dtype, scale, patterns, keep)
    logger.info("fp8 storage (%s scale): %d Linear weights in float8_e4m3fn", scale.name, count)


def store_base_weights(config: TrainConfig, transformer: WanTransformer3DModel, compute_dtype: torch.dtype,
                       keep: tuple[str, ...] = ()) -> None:
    """The frozen block Linears in `base_weight_format` (fp8 or int8 ConvRot; BF16 leaves them as loaded). `keep`
    names modules that train fully; the model's `_skip_layerwise_casting_patterns` (patch embedding, condition
    embedder, norms) stay as loaded too. Layers a ComfyUI int8 file brought are int8 already and stay as stored."""
    if config.fp8_base():
        enable_fp8_storage(transformer, compute_dtype, keep, config.fp8_scale_mode())
    elif config.int8_base():
        patterns = tuple(getattr(transformer, "_skip_layerwise_casting_patterns", None) or ())
        count = store_linears_in_int8(transformer, compute_dtype, patterns, keep)
        logger.info("int8 ConvRot base: %d Linear weights quantised here, %d in int8 in all", count,
                    len(int8_layers(transformer)))


_ACTIVATION_ARENAS: dict[bool, ActivationArena] = {}  # one per process and kind (pinned or not): reused every step


@contextlib.contextmanager
def activation_offload(enabled: bool, device: torch.device):
    """Keep the activations saved for backward in (pinned) host memory instead of on the GPU: in one arena of
    power-of-two slabs that every step reuses (pinned_arena.py), not one pinned tensor per saved activation."""
    if not enabled:
        yield
        return
    pin = can_pin_memory(device)
    arena = _ACTIVATION_ARENAS.setdefault(pin, ActivationArena(pin))
    with arena.hooks():
        yield


def _in_backward() -> bool:
    """Whether autograd is running a backward pass (a checkpointed block is being recomputed)."""
    task_id = getattr(torch._C, "_current_graph_task_id", None)  # private; without it: no reverse prefetch
    return task_id is not None and task_id() != -1


class BlockSwapper:
    """Keeps the frozen weights of the last `count` transformer blocks in CPU memory.

    Before a swapped block runs, its weights are copied to the GPU; the copy of the block that runs next
    is started on a side stream, overlapping with compute: block i+1 in the forward pass, block i-1 in
    the backward pass, where gradient checkpointing recomputes the blocks in reverse order. After a block
    ran forward, its parameters point at the CPU copy again; the last block stays on the GPU from its
    forward to its recompute, which comes right after the loss. A recomputed block keeps its GPU copy through
    its own backward (autograd holds the parameters it saved) and gives it back when the block before it is
    recomputed, or at the end of the backward pass: at most a couple of swapped blocks are on the GPU at a
    time. Frozen weights never change, so nothing is copied back.

    Needs gradient checkpointing (checked at start-up): without it autograd saves the parameters themselves
    for the backward pass, and pointing them back at the CPU after the forward would move what it saved.

    Managed parameters are known by identity (the Parameter objects, which `param.data = ...` keeps): every
    access to `param.data` makes a new Python object, so its id() identifies nothing.
    """

    def __init__(self, transformer: WanTransformer3DModel, count: int, device: torch.device):
        blocks = list(transformer.blocks)
        if not 0 < count < len(blocks):
            raise UserError(f"config key 'blocks_to_swap' must be between 1 and {len(blocks) - 1}, got {count}")
        self.device = device
        self.blocks = blocks[len(blocks) - count:]
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device) if self.cuda else None
        # per swapped block: (parameter, its host copy) of every frozen parameter
        self.host: list[list[tuple[torch.nn.Parameter, torch.Tensor]]] = []
        # index -> event that its copy is done (None: resident or copied synchronously)
        self.ready: dict[int, torch.cuda.Event | None] = {}
        self.on_device: set[int] = set()  # blocks whose parameters point at a device copy now
        self.demand_loads = 0  # copies a block had to wait for (not prefetched): ideally one per pass
        self.handles = []
        frozen = [[p for p in block.parameters() if not p.requires_grad] for block in self.blocks]
        # every swapped block's frozen weights in one host arena, made once; each loaded tensor is freed as it is copied
        self.arena = _host_arena([p for params in frozen for p in params], self.cuda)
        views = iter(self.arena.views)
        for index, block in enumerate(self.blocks):
            self.host.append([(param, next(views)) for param in frozen[index]])
            self.handles.append(block.register_forward_pre_hook(lambda m, a, i=index: self._before(i)))
            self.handles.append(block.register_forward_hook(lambda m, a, o, i=index: self._after(i)))
        mark_placement_managed(transformer)
        logger.info("block swap: %d of %d blocks keep their frozen weights on the CPU (%.2f GiB in %.2f GiB of %s host "
                    "memory)", count, len(blocks), self.arena.nbytes / 2**30, self.arena.held / 2**30,
                    "pinned" if self.cuda else "plain")

    def swapped_parameters(self) -> set[int]:
        """ids of the Parameters this swapper places (other placement code must leave them alone)."""
        return {id(param) for pairs in self.host for param, _ in pairs}

    def _copy_in(self, index: int) -> None:
        stream = self.stream if self.cuda else None
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            for param, host in self.host[index]:
                param.data = host.to(self.device, non_blocking=self.cuda)
        event = None
        if stream is not None:
            event = torch.cuda.Event()
            event.record(stream)
        self.ready[index] = event
        self.on_device.add(index)

    def _release(self, index: int) -> None:
        """Point block `index`'s parameters at their host copies; the device copy is freed once autograd lets go."""
        for param, host in self.host[index]:
            param.data = host
        self.on_device.discard(index)
        self.ready.pop(index, None)

    def _before(self, index: int) -> None:
        backward = _in_backward()
        if backward:
            # the block after this one has finished its backward: its copy can go; what is left at the end of the
            # backward pass goes then (checkpointing's recompute stops early, so no forward hook says so)
            for done in [i for i in self.on_device if i > index + 1 or (i == index + 1 and i not in self.ready)]:
                self._release(done)
            torch.autograd.Variable._execution_engine.queue_callback(self.release_all)
        if index not in self.ready:
            self.demand_loads += 1
            self._copy_in(index)
        event = self.ready.pop(index)
        if event is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_event(event)
            for param, _ in self.host[index]:
                param.data.record_stream(current)  # allocated on the side stream, used on this one
        upcoming = index - 1 if backward else index + 1
        if 0 <= upcoming < len(self.blocks) and upcoming not in self.ready:
            self._copy_in(upcoming)  # overlap the upcoming block's transfer with this block's compute

    def _after(self, index: int) -> None:
        if index == len(self.blocks) - 1 and torch.is_grad_enabled() and not _in_backward():
            self.ready[index] = None  # recomputed first in the backward pass: keep it
            return
        self._release(index)

    def release_all(self) -> None:
        """Every swapped block back to its host copy (the end of a backward pass)."""
        for index in list(self.on_device):
            self._release(index)

    def place(self, transformer: torch.nn.Module) -> None:
        """Move everything but the swapped frozen weights to the device (never the whole model at once)."""
        swapped = self.swapped_parameters()
        for param in transformer.parameters():
            if id(param) not in swapped and param.device != self.device:
                param.data = param.data.to(self.device)
        for buffer in transformer.buffers():
            if buffer.device != self.device:
                buffer.data = buffer.data.to(self.device)

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.release_all()


def mark_placement_managed(module: torch.nn.Module) -> None:
    """Say that a memory feature places `module`'s weights (some stay on the CPU by design): whole-module moves
    (the sampler's) must leave it alone."""
    module._wan_placement_managed = True  # noqa: SLF001 - a plain flag on the module


def is_placement_managed(module: torch.nn.Module) -> bool:
    return bool(getattr(module, "_wan_placement_managed", False))


def _host_arena(params: list[torch.nn.Parameter], pin: bool) -> HostArena:
    """`params`' values in one host arena, each parameter pointed at its view as it is copied (so the loaded tensor is
    freed then, and the host never holds the set twice)."""
    def point(index: int, view: torch.Tensor) -> None:
        params[index].data = view

    return HostArena([p.data for p in params], pin, release=point)


def can_pin_memory(device: torch.device) -> bool:
    """Page-locked host memory (fast, asynchronous copies) exists only beside a CUDA or ROCm device."""
    return device.type == "cuda" and torch.cuda.is_available()


class ExpertOffloader:
    """Two-expert models, train_expert BOTH: only the expert that the step's σ routes to holds its frozen weights
    on the device; the idle one's live in (pinned) host memory.

    A forward pre-hook on each transformer brings its frozen weights in (after pointing the other expert's back
    at their host copies, so one expert's weights are on the device at a time) — training steps, validation and
    the sampler's switch at the boundary all go through it. Frozen weights never change, so nothing is copied
    back. Trained parameters (adapters, embeddings), their optimizer state and the buffers stay on the device.
    Weights that a BlockSwapper already keeps on the CPU are its business and are left out. On the CPU the
    copies are no-ops, but every step takes the same path.
    """

    def __init__(self, transformers: list[torch.nn.Module], device: torch.device,
                 swapped: set[int] | None = None):
        """`swapped`: ids of the Parameters a BlockSwapper places (`swapped_parameters()`)."""
        self.device = device
        self.pin = can_pin_memory(device)
        swapped = swapped or set()
        self.host: list[list[tuple[torch.nn.Parameter, torch.Tensor]]] = []
        self.active: int | None = None
        self.transfers = 0  # times an expert was brought in (the first one included)
        self.handles = []
        self.arenas: list[HostArena] = []
        for index, transformer in enumerate(transformers):
            frozen = [p for p in transformer.parameters() if not p.requires_grad and id(p) not in swapped]
            self.arenas.append(_host_arena(frozen, self.pin))  # one arena per expert
            pairs = list(zip(frozen, self.arenas[-1].views))
            self.host.append(pairs)
            offloaded = {id(param) for param, _ in pairs} | swapped
            for param in transformer.parameters():  # by identity: param.data is a new object on every access
                if id(param) not in offloaded and param.device != device:
                    param.data = param.data.to(device)
            for buffer in transformer.buffers():
                if buffer.device != device:
                    buffer.data = buffer.data.to(device)
            mark_placement_managed(transformer)
            self.handles.append(transformer.register_forward_pre_hook(lambda m, a, i=index: self.activate(i)))
        logger.info("offload_inactive_expert: the idle expert's %d frozen tensors wait in %s host memory",
                    len(self.host[0]), "pinned" if self.pin else "plain")

    def activate(self, index: int) -> None:
        """Expert `index`'s frozen weights onto the device, the other's back to their host copies (first)."""
        if self.active == index:
            return
        for other, pairs in enumerate(self.host):
            if other != index:
                for param, host in pairs:
                    param.data = host  # the device copy is freed once autograd no longer holds it
        for param, host in self.host[index]:
            param.data = host.to(self.device, non_blocking=self.pin)
        self.active = index
        self.transfers += 1

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def enable_vae_tiling(vae) -> None:
    vae.enable_tiling()
