"""FSDP2 sharding of the trained transformers, and the full-state gathering that backups, saves and
resume need once weights are sharded.

With FSDP every rank keeps 1/N of each weight, gradient and optimizer state as DTensor shards; a
forward all-gathers one transformer block at a time and frees it again. Backups are written shard by
shard (each rank a safetensors file of its own chunks, rank 0 the rest of the state as JSON: nothing is
pickled, and no rank holds the whole state); the final save gathers the
weights to rank 0's CPU, and a backup of whole tensors (from a run without FSDP) is scattered from
rank 0. All of these calls are collective: every rank must make them.

Trained transformers are addressed through one `ModuleDict` ("transformer", "transformer_2"), so the
names match the backups' `trainable.safetensors` keys and two experts never share a name.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
from safetensors import safe_open
from safetensors.torch import save_file
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from modules.util import state_io
from modules.util.errors import UserError

# Gather to rank 0's CPU: a 14B transformer does not fit twice on one GPU.
_GATHER = StateDictOptions(full_state_dict=True, cpu_offload=True)
# Rank 0 read the file; the others receive their shards from it.
_SCATTER = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True, strict=False)


def shard_transformer(transformer: torch.nn.Module, device: torch.device, world_size: int) -> None:
    """Shard each block, then the rest (embeddings, head). Works from CPU weights: each block moves to
    `device` only as it is sharded, so a 14B model never has to fit on one GPU whole."""
    mesh = init_device_mesh(device.type, (world_size,))
    for block in transformer.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(transformer, mesh=mesh)


def is_sharded(module: torch.nn.Module) -> bool:
    return any(isinstance(p, DTensor) for p in module.parameters())


def set_gradient_sync(modules: list[torch.nn.Module], sync: bool) -> None:
    """FSDP's reduce-scatter is skipped on accumulation micro steps (gradients stay unsharded locally)."""
    for module in modules:
        module.set_requires_gradient_sync(sync)


def gather_parameters(root: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Full CPU copies of the parameters under `root` on rank 0 (an empty dict on the others)."""
    names = {name for name, _ in root.named_parameters()}
    state = get_model_state_dict(root, options=_GATHER)
    # On a CPU mesh the gathered tensors can be views into one all-gather buffer: own storage for saving.
    return {k: v if v.untyped_storage().nbytes() == v.nbytes else v.clone() for k, v in state.items() if k in names}


def scatter_parameters(root: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load full tensors that rank 0 holds (the others pass {}) into the shards of every rank."""
    set_model_state_dict(root, state, options=_SCATTER)


def scatter_optimizer_state(root: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Scatter torch's id-keyed optimizer state (from a backup of a run without FSDP) that rank 0 holds;
    the other ranks pass {}."""
    state = _name_keyed(root, optimizer, state) if state else state
    set_optimizer_state_dict(root, optimizer, state, options=_SCATTER)


def save_shards(root: torch.nn.Module, optimizer: torch.optim.Optimizer, folder: Path) -> None:
    """Collective: every rank writes its own shards of the weights and optimizer state (nothing gathered)
    to `rank-NNNNN.safetensors`; rank 0 also writes the rest of the state to `state.json`."""
    model_state, optimizer_state = get_state_dict(root, optimizer)
    _on_every_rank(lambda: _write_shards(folder, {"model": model_state, "optimizer": optimizer_state}),
                   "writing the backup shards")


def load_shards(root: torch.nn.Module, optimizer: torch.optim.Optimizer, folder: Path) -> None:
    """Read `save_shards` output into this run's weights and optimizer, sharded or whole. Each rank reads
    the parts of the saved chunks that overlap its own, so a backup resumes on another number of ranks
    or in one process (collective when distributed)."""
    model_state, optimizer_state = get_state_dict(root, optimizer)  # targets of the right shapes/placements
    state: dict[str, Any] = {}

    def read() -> None:
        state.update(_read_shards(folder, {"model": model_state, "optimizer": optimizer_state}))

    _on_every_rank(read, "reading the backup shards")
    set_state_dict(root, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def check_shards(folder: Path) -> None:
    """Raise ValueError unless `folder` holds a complete `save_shards` output: state.json and every
    chunk's header are read (no tensor data)."""
    keys = state_io.tensor_keys(_read_state_json(folder))
    index = _read_index(folder)
    if keys != set(index):
        raise ValueError(f"the shards in {folder} do not hold {sorted(keys ^ set(index))[0]}")
    for key, entry in index.items():
        if sum(math.prod(chunk.shape) for chunk in entry.chunks) != math.prod(entry.size):
            raise ValueError(f"the shards in {folder} do not cover {key} (a rank's file is missing)")


# --- the shard files -----------------------------------------------------------------------------------------
# rank-NNNNN.safetensors: the rank's local chunks; its header's metadata "chunks" gives each key's global
# offsets and size. Unsharded tensors (e.g. AdamW's step) are the same on every rank: rank 0 writes them.
# state.json (rank 0): state_io's skeleton of {"model": ..., "optimizer": ...} (param_groups and all).
STATE_FILE = "state.json"
_RANK_FILE = "rank-{:05d}.safetensors"
_RANK_FILES = "rank-*.safetensors"
_CHUNKS = "chunks"


@dataclasses.dataclass(frozen=True)
class _Chunk:
    path: Path
    offsets: tuple[int, ...]
    shape: tuple[int, ...]


@dataclasses.dataclass
class _Saved:
    size: tuple[int, ...]  # the whole tensor's shape
    chunks: list[_Chunk]


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _write_shards(folder: Path, state: dict[str, Any]) -> None:
    tensors, skeleton = state_io.split(state)
    rank = _rank()
    local: dict[str, torch.Tensor] = {}
    chunks: dict[str, dict[str, list[int]]] = {}
    for key, tensor in tensors.items():
        if isinstance(tensor, DTensor):
            (chunk,) = tensor.__create_chunk_list__()  # this rank's part: global offsets and shape
            local[key], offsets = tensor.to_local(), list(chunk.offsets)
        elif rank == 0:
            local[key], offsets = tensor, [0] * tensor.dim()
        else:
            continue
        chunks[key] = {"offsets": offsets, "size": list(tensor.shape)}
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous().cpu() for k, v in local.items()}, str(folder / _RANK_FILE.format(rank)),
              metadata={_CHUNKS: json.dumps(chunks, separators=(",", ":"))})
    if rank == 0:
        (folder / STATE_FILE).write_text(state_io.dumps(skeleton), encoding="utf-8")


def _read_state_json(folder: Path) -> Any:
    try:
        return json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{STATE_FILE}: {e}") from e


def _read_index(folder: Path) -> dict[str, _Saved]:
    """Every saved chunk by key, from the headers of the rank files."""
    index: dict[str, _Saved] = {}
    for path in sorted(folder.glob(_RANK_FILES)):
        try:
            _index_file(path, index)
        except Exception as e:  # safetensors' and json's messages do not name the file
            raise ValueError(f"{path.name}: {e}") from e
    return index


def _index_file(path: Path, index: dict[str, _Saved]) -> None:
    with safe_open(str(path), framework="pt") as f:
        described = json.loads((f.metadata() or {}).get(_CHUNKS, "null"))
        if not isinstance(described, dict) or set(described) != set(f.keys()):
            raise ValueError("the header does not describe its chunks")
        for key, where in described.items():
            shape = tuple(f.get_slice(key).get_shape())
            offsets, size = _ints(where, "offsets", len(shape)), _ints(where, "size", len(shape))
            saved = index.setdefault(key, _Saved(size, []))
            if saved.size != size or any(o < 0 or o + n > s for o, n, s in zip(offsets, shape, size)):
                raise ValueError(f"a chunk of {key} does not fit its size")
            if all((c.offsets, c.shape) != (offsets, shape) for c in saved.chunks):  # replicas: one is enough
                saved.chunks.append(_Chunk(path, offsets, shape))


def _ints(where: Any, name: str, length: int) -> tuple[int, ...]:
    values = where.get(name) if isinstance(where, dict) else None
    if not isinstance(values, list) or len(values) != length or not all(type(v) is int for v in values):
        raise ValueError(f"malformed chunk {name}: {str(values)[:80]}")
    return tuple(values)


def _read_shards(folder: Path, targets: dict[str, Any]) -> Any:
    """`targets` (this run's state, DTensors where sharded) filled from the files, with the saved
    non-tensor values (param_groups) in place."""
    tensors, _ = state_io.split(targets)
    skeleton = _read_state_json(folder)
    saved_keys = state_io.tensor_keys(skeleton)
    index = _read_index(folder)
    unmatched = sorted(saved_keys ^ set(tensors))
    if unmatched:
        where = "the backup" if unmatched[0] in saved_keys else "this run"
        raise UserError(f"cannot resume from {folder.parent}: only {where} has {unmatched[0]} (the backup was "
                        "written for another model or training method)")
    with contextlib.ExitStack() as stack:
        files = _OpenFiles(stack)
        for key, target in tensors.items():
            if key not in index:
                raise ValueError(f"the shards in {folder} hold no {key}")
            if tuple(target.shape) != index[key].size:
                raise UserError(f"cannot resume from {folder.parent}: its {key} has the shape "
                                f"{list(index[key].size)}, this run's {list(target.shape)}")
            _fill(target, key, index[key], files)
    return state_io.join(tensors, skeleton)


class _OpenFiles:
    """Each rank file opened once (a header parse and an mmap), closed when the stack closes."""

    def __init__(self, stack: contextlib.ExitStack):
        self.stack, self.open = stack, {}

    def __getitem__(self, path: Path) -> Any:
        if path not in self.open:
            self.open[path] = self.stack.enter_context(safe_open(str(path), framework="pt"))
        return self.open[path]


def _fill(target: torch.Tensor, key: str, saved: _Saved, files: _OpenFiles) -> None:
    """Copy the parts of the saved chunks that overlap `target`'s own part (all of it when not sharded)."""
    if isinstance(target, DTensor):
        (chunk,) = target.__create_chunk_list__()
        offsets, local = tuple(chunk.offsets), target.to_local()
    else:
        offsets, local = (0,) * target.dim(), target
    covered = 0
    for saved_chunk in saved.chunks:
        overlap = _overlap(offsets, tuple(local.shape), saved_chunk.offsets, saved_chunk.shape)
        if overlap is None:
            continue
        lows, highs = overlap
        source = files[saved_chunk.path]
        if not lows:  # a 0-d tensor (a step count)
            local.copy_(source.get_tensor(key))
        else:
            part = source.get_slice(key)[_slices(lows, highs, saved_chunk.offsets)]
            local[_slices(lows, highs, offsets)].copy_(part)
        covered += math.prod(hi - lo for lo, hi in zip(lows, highs))
    if covered != local.numel():
        raise ValueError(f"the backup's shards do not cover {key}")


def _slices(lows: tuple[int, ...], highs: tuple[int, ...], origin: tuple[int, ...]) -> tuple[slice, ...]:
    """The global box [lows, highs) in the coordinates of a chunk that starts at `origin`."""
    return tuple(slice(lo - o, hi - o) for lo, hi, o in zip(lows, highs, origin))


def _overlap(offsets_a: tuple[int, ...], shape_a: tuple[int, ...], offsets_b: tuple[int, ...],
             shape_b: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The global (lows, highs) where two chunks overlap, or None when they do not (or it is empty)."""
    lows = tuple(max(a, b) for a, b in zip(offsets_a, offsets_b))
    highs = tuple(min(a + n, b + m) for a, n, b, m in zip(offsets_a, shape_a, offsets_b, shape_b))
    if any(lo >= hi for lo, hi in zip(lows, highs)):
        return None
    return lows, highs


def _on_every_rank(action: Callable[[], None], what: str) -> None:
    """Run `action`; when it fails on any rank, every rank raises (a rank that went on alone would wait
    for the others forever). A failure on another rank is raised with its message."""
    error: Exception | None = None
    try:
        action()
    except Exception as e:  # gathered below so that every rank learns of it
        error = e
    if not dist.is_initialized():
        if error is not None:
            raise error
        return
    failures: list[tuple[str, bool] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(failures, None if error is None else (str(error), isinstance(error, UserError)))
    if error is not None:
        raise error
    for rank, failure in enumerate(failures):
        if failure is not None:
            message, by_user = failure
            raise UserError(message) if by_user else RuntimeError(f"{what} failed on rank {rank}: {message}")


def _name_keyed(root: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> dict[str, Any]:
    """torch's own optimizer.state_dict() numbers parameters in param-group order; name them instead.
    The current optimizer was built from the same config, so its order is the saved one."""
    name_of = {id(p): name for name, p in root.named_parameters()}
    names = [name_of[id(p)] for group in optimizer.param_groups for p in group["params"]]
    return {
        "state": {names[index]: value for index, value in state["state"].items()},
        "param_groups": [{**group, "params": [names[index] for index in group["params"]]}
                         for group in state["param_groups"]],
    }
