"""Host memory for block swap, expert offload and activation offload in a few large slabs of exactly a power of two
bytes, each tensor a sliced view of one.

Why: torch's pinned host allocator (`CachingHostAllocator`, ATen/core/CachingHostAllocator.h, `allocate()`: "Round up
the allocation to the nearest power of two to improve reuse", `c10::llvm::PowerOf2Ceil(size)` while `size` is under
`pinned_max_round_threshold`, unlimited by default: c10/core/AllocatorConfig.h) rounds every pinned tensor up to a
power of two, so pinning each of the 14B's 26 MB / 71 MB fp8 weights on its own holds 32 / 128 MiB each (~1.5x), and
each 335 MB saved block input 512 MiB. A slab that is itself a power of two is held at its size; the tensors packed
into it waste only the gaps between them.
- weights (`HostArena`): sizes known up front, packed first-fit by decreasing size into slabs of up to `MAX_SLAB`
  (the last ones smaller, to the remainder), filled one slab at a time so the loaded copies are freed as they go;
- saved activations (`ActivationArena`): sizes known only as the forward pass saves them, so each is bump-allocated
  across slabs of `ACTIVATION_SLAB` (a tensor may span two; it comes back as one) and the space is reused from the
  start once every saved tensor of the step has been let go.
On the CPU (tests, no GPU) the same slabs are plain memory, so every path runs there too.
"""
from __future__ import annotations

import dataclasses
import threading

import torch

ALIGN = 64  # the alignment of torch's CPU allocator; a view starts at its source's address modulo this
MAX_SLAB = 2 ** 30
ACTIVATION_SLAB = 2 ** 28


def rounded_bytes(nbytes: int) -> int:
    """What torch's pinned host allocator holds for a request of `nbytes` (its default rule: the next power of two)."""
    return 0 if nbytes <= 0 else 1 << (nbytes - 1).bit_length()


def _aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


@dataclasses.dataclass
class HostTally:
    """Host slabs this process asked for: bytes requested and bytes the pinned allocator's rule holds for them."""
    slabs: int = 0
    requested: int = 0
    pinned_requested: int = 0
    pinned_held: int = 0

    def add(self, nbytes: int, pin: bool) -> None:
        self.slabs += 1
        self.requested += nbytes
        if pin:
            self.pinned_requested += nbytes
            self.pinned_held += rounded_bytes(nbytes)


TALLY = HostTally()  # process-wide: read by logging and benchmarks/host_memory.py


def allocate_slab(nbytes: int, pin: bool) -> torch.Tensor:
    """One host slab (pinned beside a CUDA/ROCm device): the only place this module asks for host memory."""
    TALLY.add(nbytes, pin)
    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin)


def tensor_bytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _phase(tensor: torch.Tensor) -> int:
    """The tensor's address modulo ALIGN (0 without real storage). Its view in the arena starts at the same phase:
    CPU kernels pick their code path by alignment, so the same phase keeps results bit-identical (weights read
    from a memory-mapped file often sit at odd offsets)."""
    from torch._subclasses.fake_tensor import is_fake

    if tensor.device.type != "cpu" or is_fake(tensor):  # fake and meta tensors have no address
        return 0
    return tensor.data_ptr() % ALIGN


def plan_slabs(sizes: list[int], max_slab: int = MAX_SLAB) -> tuple[list[int], list[tuple[int, int]]]:
    """Slab sizes (powers of two) and each item's (slab, byte offset) for items of `sizes` bytes (a start phase
    included): first fit by decreasing size; a new slab is the largest power of two the items not yet placed still
    fill (at most `max_slab`, at least the item)."""
    order = sorted(range(len(sizes)), key=lambda i: -sizes[i])
    need = [_aligned(max(size, 1)) for size in sizes]
    capacity: list[int] = []
    used: list[int] = []
    places: list[tuple[int, int]] = [(0, 0)] * len(sizes)
    unplaced = sum(need)
    for i in order:
        slab = next((s for s in range(len(capacity)) if used[s] + need[i] <= capacity[s]), None)
        if slab is None:
            gaps = sum(c - u for c, u in zip(capacity, used))
            target = max(need[i], min(max_slab, unplaced - gaps))
            size = 1 << (target.bit_length() - 1)  # the power of two at or under the target...
            capacity.append(size if size >= need[i] else rounded_bytes(need[i]))  # ...or the item's own
            used.append(0)
            slab = len(capacity) - 1
        places[i] = (slab, used[slab])
        used[slab] += need[i]
        unplaced -= need[i]
    return capacity, places


class HostArena:
    """A set of tensors (a swapped block stack, an idle expert's weights) moved into host slabs: `views[i]` holds
    `tensors[i]`'s values, same dtype and shape, contiguous. `release(i, view)` is called as each tensor is copied
    (the owner points its parameter at the view there), so the source copies are let go slab by slab and the host
    never holds the set twice."""

    def __init__(self, tensors: list[torch.Tensor], pin: bool, release=None, max_slab: int = MAX_SLAB):
        sizes = [tensor_bytes(t) for t in tensors]
        phases = [_phase(t) for t in tensors]
        capacity, places = plan_slabs([size + phase for size, phase in zip(sizes, phases)], max_slab)
        self.nbytes = sum(sizes)
        self.held = sum(rounded_bytes(c) for c in capacity) if pin else sum(capacity)
        self.views: list[torch.Tensor | None] = [None] * len(tensors)
        members: list[list[int]] = [[] for _ in capacity]
        for index, (slab, _) in enumerate(places):
            members[slab].append(index)
        for slab, size in enumerate(capacity):
            buffer = allocate_slab(size, pin)
            for index in members[slab]:
                offset = places[index][1] + phases[index]
                source = tensors[index]
                view = buffer[offset:offset + sizes[index]].view(source.dtype).view(source.shape)
                view.copy_(source)
                self.views[index] = view
                tensors[index] = None  # this list no longer keeps the source alive
                if release is not None:
                    release(index, view)
            del buffer  # the views keep it


class _Packed:
    """A saved tensor in the activation arena: its pieces and where they go; frees its space when dropped."""
    __slots__ = ("arena", "pieces", "device", "dtype", "shape", "__weakref__")

    def __init__(self, arena, pieces, device, dtype, shape):
        self.arena, self.pieces, self.device, self.dtype, self.shape = arena, pieces, device, dtype, shape

    def __del__(self):
        self.arena._let_go()


class ActivationArena:
    """Host space for the tensors the forward pass saves for backward (`pack` / `unpack`, as `saved_tensors_hooks`
    take them). Space is handed out in order across slabs of `slab_bytes`; once every packed tensor has been let go
    (the end of the step's backward) it is handed out from the start again, so a run holds the largest step's
    saved bytes, rounded up to one slab. Copies run on the current stream (pack: device to host, waited for;
    unpack: host to device, asynchronous from pinned memory), so reusing space after a step is ordered after the
    last read of it."""

    def __init__(self, pin: bool, slab_bytes: int = ACTIVATION_SLAB):
        self.pin = pin
        self.slab_bytes = slab_bytes
        self.slabs: list[torch.Tensor] = []
        self.cursor = (0, 0)  # (slab, offset) of the next free byte
        self.live = 0
        self.lock = threading.Lock()  # backward (and so let-go) runs on autograd's device thread

    @property
    def held(self) -> int:
        return sum(tensor_bytes(s) for s in self.slabs)

    def _let_go(self) -> None:
        with self.lock:
            self.live -= 1

    def _take(self, nbytes: int) -> list[tuple[torch.Tensor, int, int]]:
        """Host pieces (slab slice, start, end within the tensor's bytes) for `nbytes`, in order."""
        with self.lock:
            if self.live == 0:
                self.cursor = (0, 0)
            self.live += 1
            slab, offset = self.cursor
        pieces, start = [], 0
        while start < nbytes:
            if slab == len(self.slabs):
                self.slabs.append(allocate_slab(self.slab_bytes, self.pin))
            room = tensor_bytes(self.slabs[slab]) - offset
            if room < ALIGN:
                slab, offset = slab + 1, 0
                continue
            take = min(room, nbytes - start)
            pieces.append((self.slabs[slab][offset:offset + take], start, start + take))
            start += take
            offset = _aligned(offset + take)
        self.cursor = (slab, offset)
        return pieces

    def pack(self, tensor: torch.Tensor):
        if tensor.is_sparse or tensor.numel() == 0:
            return tensor
        raw = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
        pieces = self._take(raw.numel())
        for piece, start, end in pieces:
            piece.copy_(raw[start:end])
        return _Packed(self, [p for p, _, _ in pieces], tensor.device, tensor.dtype, tensor.shape)

    def unpack(self, packed):
        if isinstance(packed, torch.Tensor):
            return packed
        total = sum(tensor_bytes(p) for p in packed.pieces)
        out = torch.empty(total, dtype=torch.uint8, device=packed.device)
        start = 0
        for piece in packed.pieces:
            out[start:start + piece.numel()].copy_(piece, non_blocking=self.pin)
            start += piece.numel()
        return out.view(packed.dtype).view(packed.shape)

    def hooks(self) -> torch.autograd.graph.saved_tensors_hooks:
        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)
