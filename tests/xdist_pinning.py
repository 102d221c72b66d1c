"""The long learning runs pinned to xdist workers, so each worker's share of them is fixed before the run starts.

xdist's `loadgroup` hands a worker its next group while that worker has at most two tests left, so which worker
trains which model depended on how many tests each group holds: one CI run gave one worker three learning groups
(A14B, E2V-on-I2V and T2V, 40 CPU-min) and left the other's queue to the short tests. Here the groups that carry a
cost (`xdist_group(name, cpu_minutes=...)`) are split over the workers by `split_groups` (the least possible
largest share), and a worker is only handed its own; every other test still goes to whichever worker asks first.

The costs are read from the markers on the workers (the controller does not collect): each worker writes them to a
file the controller named (`workerinput`), before it reports its collection, and the scheduler reads it then.
"""
from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest

COSTS_KEY = "wantrainer_group_costs"


def split_groups(costs: dict[str, float], workers: int) -> list[list[str]]:
    """The groups over `workers` workers with the smallest largest share (every assignment tried: a handful of
    groups), each worker's longest first; ties go to the assignment whose shares differ least."""
    names = sorted(costs, key=lambda name: (-costs[name], name))
    if workers <= 1 or not names:
        return [names] + [[] for _ in range(workers - 1)]
    best = None
    for owners in itertools.product(range(workers), repeat=len(names)):
        if owners[0] != 0:  # worker order does not matter: the longest group goes to the first
            break
        loads = [0.0] * workers
        for name, owner in zip(names, owners):
            loads[owner] += costs[name]
        key = (max(loads), max(loads) - min(loads))
        if best is None or key < best[0]:
            best = (key, owners)
    return [[name for name, owner in zip(names, best[1]) if owner == worker] for worker in range(workers)]


def write_costs(config: pytest.Config, costs: dict[str, float]) -> None:
    """On a worker: the groups' costs to the file the controller named (atomic: both workers write it)."""
    path = getattr(config, "workerinput", {}).get(COSTS_KEY)
    if path:
        temporary = Path(f"{path}.{os.getpid()}")
        temporary.write_text(json.dumps(costs))
        os.replace(temporary, path)


def make_scheduler(config: pytest.Config, log, costs_path: Path):
    from xdist.scheduler import LoadGroupScheduling

    class PinnedGroupScheduling(LoadGroupScheduling):
        """`loadgroup`, except that a group with a cost goes only to the worker `split_groups` gave it."""

        pins: dict[str, str] | None = None  # group -> worker id ("gw0"), read when the collections are in

        def _owner(self, scope: str) -> str | None:
            if self.pins is None:
                costs = json.loads(costs_path.read_text()) if costs_path.is_file() else {}
                ids = sorted(node.gateway.id for node in self.nodes)
                self.pins = {name: ids[index] for index, names in enumerate(split_groups(costs, len(ids)))
                             for name in names}
            owner = self.pins.get(scope)
            # a pinned worker that is gone (crashed) leaves its groups to the others
            return owner if owner in {node.gateway.id for node in self.nodes} else None

        def _mine(self, node, scope: str) -> bool:
            return self._owner(scope) in (None, node.gateway.id)

        def _assign_work_unit(self, node) -> None:
            scope = next((scope for scope in self.workqueue if self._mine(node, scope)), None)
            if scope is not None:
                self.workqueue.move_to_end(scope, last=False)
                super()._assign_work_unit(node)

        def _reschedule(self, node) -> None:
            if node.shutting_down:
                return
            if not any(self._mine(node, scope) for scope in self.workqueue):
                node.shutdown()  # it finishes what it holds; nothing left is for it
                return
            if self._pending_of(self.assigned_work[node]) <= 2:
                self._assign_work_unit(node)

    return PinnedGroupScheduling(config, log)
