"""FSDP2 sharding of the trained transformers, and the full-state gathering that backups, saves and
resume need once weights are sharded.

With FSDP every rank keeps 1/N of each weight, gradient and optimizer state as DTensor shards; a
forward all-gathers one transformer block at a time and frees it again. Backups are written shard by
shard (torch.distributed.checkpoint, no rank holds the whole state); the final save gathers the
weights to rank 0's CPU, and a backup of whole tensors (from a run without FSDP) is scattered from
rank 0. All of these calls are collective: every rank must make them.

Trained transformers are addressed through one `ModuleDict` ("transformer", "transformer_2"), so the
names match the backups' `trainable.safetensors` keys and two experts never share a name.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
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
    """Collective: every rank writes its own shards of the weights and optimizer state (nothing gathered)."""
    model_state, optimizer_state = get_state_dict(root, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=folder)


def load_shards(root: torch.nn.Module, optimizer: torch.optim.Optimizer, folder: Path) -> None:
    """Read `save_shards` output into this run's weights and optimizer, sharded or whole. The reader
    reshards, so a backup resumes on another number of ranks or in one process (collective when
    distributed)."""
    model_state, optimizer_state = get_state_dict(root, optimizer)  # targets of the right shapes/placements
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=folder, no_dist=not dist.is_initialized())
    set_state_dict(root, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


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
