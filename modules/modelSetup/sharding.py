"""FSDP2 sharding of the trained transformers, and the full-state gathering that backups, saves and
resume need once weights are sharded.

With FSDP every rank keeps 1/N of each weight, gradient and optimizer state as DTensor shards; a
forward all-gathers one transformer block at a time and frees it again. Anything that needs whole
tensors goes through torch.distributed.checkpoint's state-dict API, which gathers them to rank 0's
CPU (and scatters them back on resume). Those calls are collective: every rank must make them.

Trained transformers are addressed through one `ModuleDict` ("transformer", "transformer_2"), so the
names match the backups' `trainable.safetensors` keys and two experts never share a name.
"""
from __future__ import annotations

from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
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


def optimizer_state(root: torch.nn.Module, optimizer: torch.optim.Optimizer, sharded: bool) -> dict[str, Any]:
    """Sharded: the state keyed by parameter name, full tensors on rank 0's CPU (collective).
    Otherwise torch's own id-keyed state_dict()."""
    return get_optimizer_state_dict(root, optimizer, options=_GATHER) if sharded else optimizer.state_dict()


def load_optimizer_state(root: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any],
                         sharded: bool) -> None:
    """Load either form, whichever kind of run wrote it (a backup moves between DDP and FSDP).
    Sharded runs pass rank 0's state; the other ranks pass {} and receive theirs from it."""
    name_keyed = bool(state) and not _ids_in_groups(state)
    if sharded:
        state = state if not state or name_keyed else _name_keyed(root, optimizer, state)
        set_optimizer_state_dict(root, optimizer, state, options=_SCATTER)
    elif name_keyed:
        set_optimizer_state_dict(root, optimizer, state, options=StateDictOptions(full_state_dict=True))
    else:
        optimizer.load_state_dict(state)


def _ids_in_groups(state: dict[str, Any]) -> bool:
    return any(isinstance(p, int) for group in state.get("param_groups", []) for p in group["params"])


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
