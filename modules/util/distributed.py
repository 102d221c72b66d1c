"""Data-parallel context from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK).

A single process is the world of size 1, so code never branches on "is this distributed" beyond asking
`is_main` (only rank 0 writes files) and slicing its share of each global batch.

With `sequence_parallel` N the processes form a DeviceMesh of data x sequence (world / N, N): the N ranks of one
sequence group are consecutive (one node's GPUs, where the all-to-alls run) and train the same share of the batch,
each on 1/N of its tokens. `data_rank` / `data_world_size` are then what slices the batch; `rank` / `world_size`
still count processes (files, collectives over everyone).
"""
from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import sys
from typing import NoReturn

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

logger = logging.getLogger(__name__)
_MESHES: dict[tuple[str, int, int], DeviceMesh] = {}  # (device type, data, sequence) -> the run's mesh


@dataclasses.dataclass(frozen=True)
class DistributedContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    sequence_parallel: int = 1  # ranks that share one clip's tokens

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def data_world_size(self) -> int:
        """How many shares each global batch is cut into (the data dimension of the mesh)."""
        return self.world_size // self.sequence_parallel

    @property
    def data_rank(self) -> int:
        """Which share this rank trains (every rank of a sequence group has the same)."""
        return self.rank // self.sequence_parallel

    def sequence_group(self, device_type: str) -> dist.ProcessGroup | None:
        """The process group of this rank's sequence ranks (the mesh's "sequence" dimension), None without sequence
        parallelism. Collective the first time: every rank must ask."""
        if self.sequence_parallel <= 1:
            return None
        key = (device_type, self.data_world_size, self.sequence_parallel)
        if key not in _MESHES:
            _MESHES[key] = init_device_mesh(device_type, (self.data_world_size, self.sequence_parallel),
                                            mesh_dim_names=("data", "sequence"))
        return _MESHES[key]["sequence"].get_group()

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def share(self, items: list) -> tuple[list, int]:
        """This rank's contiguous slice of a global batch and the slice's offset in it (the same slice on every rank
        of a sequence group)."""
        per_rank = -(-len(items) // self.data_world_size)
        start = min(self.data_rank * per_rank, len(items))
        return items[start:start + per_rank], start

    def all_true(self, flag: bool) -> bool:
        """Whether `flag` holds on every rank."""
        if not self.enabled:
            return flag
        tensor = torch.tensor([1 if flag else 0], dtype=torch.int64)
        dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
        return bool(tensor.item())

    def all_sum(self, values: list[float]) -> list[float]:
        """The element-wise sum of `values` over every rank (float64, so the order of ranks changes no digit
        that matters)."""
        if not self.enabled:
            return list(values)
        tensor = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor.tolist()

    def average_(self, tensor: torch.Tensor) -> torch.Tensor:
        """In place: the mean of `tensor` over every rank (as DDP averages the gradients it holds)."""
        if self.enabled:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
            tensor.div_(self.world_size)
        return tensor

    def finish(self) -> None:
        """After this rank's last collective, on every path (a stopped or failed rank that ends it lets the
        others fail at their next collective rather than wait out the timeout): the process group ended."""
        if self.enabled and dist.is_initialized():
            dist.destroy_process_group()

    def broadcast_object(self, value):
        if not self.enabled:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]


def init_distributed(train_device: str, sequence_parallel: int = 1) -> tuple[DistributedContext, str]:
    """Start the process group when launched by torchrun; returns the context and this rank's device."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size % sequence_parallel:  # the start-up checks say so in one line (trainer/preflight_base.py)
        raise ValueError(f"{world_size} processes do not form sequence groups of {sequence_parallel}")
    if world_size <= 1:
        return DistributedContext(), train_device
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() and train_device in ("auto", "cuda") or train_device.startswith("cuda")
    if not dist.is_initialized():
        # NCCL for CUDA tensors, gloo beside it for the small CPU tensors of all_true / all_sum
        dist.init_process_group("cpu:gloo,cuda:nccl" if use_cuda else "gloo", timeout=datetime.timedelta(minutes=30))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world_size)))
    if sequence_parallel > 1 and local_world % sequence_parallel and rank == 0:
        logger.warning("sequence_parallel %d does not divide the %d processes of a node: some sequence groups span "
                       "two nodes and their all-to-alls go over the network (slower)", sequence_parallel, local_world)
    device = f"cuda:{local_rank}" if use_cuda else "cpu"
    if use_cuda:
        torch.cuda.set_device(local_rank)
    return DistributedContext(rank, world_size, local_rank, sequence_parallel), device


def exit_rank(code: int) -> NoReturn:
    """The end of a torchrun rank whose run is over: its output flushed, then out without the interpreter's teardown.
    gloo's worker threads outlive destroy_process_group (DDP's reducer, FSDP's meshes and DTensor's caches hold the
    group), so the teardown frees them; a worker still releasing its last work then needs the GIL of an interpreter
    that is going away, and the rank dies of SIGABRT ("terminate called without an active exception") after its
    model was saved. Every file the run writes is closed by now (writes are atomic, the log handler closed)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
