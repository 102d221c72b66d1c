"""The learning runs split over CI's two xdist workers by their measured CPU minutes (tests/xdist_pinning.py): the
split is even, and xdist's hand-out, simulated with its own scheduler classes, keeps it whatever each group's test
count (the stock `loadgroup` gave one worker A14B, E2V-on-I2V and T2V in a CI run)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from tests.conftest import balanced_group_order
from tests.xdist_pinning import make_scheduler, split_groups


def test_the_learning_runs_split_evenly_longest_first():
    from tests.test_learning import CPU_MINUTES

    costs = {f"learning-{name}": minutes for name, minutes in CPU_MINUTES.items()} | {"learning-guidance": 2.0}
    first, second = split_groups(costs, 2)
    assert sorted(first + second) == sorted(costs) and first[0] == max(costs, key=costs.get)
    one, other = sum(costs[n] for n in first), sum(costs[n] for n in second)
    # collection order (t2v, i2v, a14b, e2v-i2v, e2v-t2v) alternating gave 24.6 and 37.5 CPU-min
    assert abs(one - other) <= min(costs.values()), (first, second, one, other)
    order = balanced_group_order(costs)
    assert order[0] == first[0] and order[1] == second[0] and sorted(order) == sorted(costs)


def test_an_even_split_exists_whatever_the_costs():
    costs = {"a": 10.0, "b": 9.0, "c": 6.0, "d": 5.0, "e": 4.0, "f": 1.0}
    first, second = split_groups(costs, 2)
    assert abs(sum(costs[n] for n in first) - sum(costs[n] for n in second)) <= 1.0, (first, second)
    three = split_groups(costs, 3)
    assert sorted(sum(three, [])) == sorted(costs) and max(sum(costs[n] for n in s) for s in three) == 13.0
    assert balanced_group_order({}) == [] and balanced_group_order({"x": 3.0}) == ["x"]


class _Node:
    """What xdist's schedulers use of a worker: its id, the tests sent to it, its shutdown flag."""

    def __init__(self, name: str):
        self.gateway = SimpleNamespace(id=name)
        self.queue: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.queue += indices

    def shutdown(self) -> None:
        self.shutting_down = True


def _simulate(scheduler, nodeids: list[str], seconds: dict[str, float]) -> dict[str, tuple[float, list[str]]]:
    """Runs the collection on two simulated workers, each test taking its `seconds`: per worker, the time it ends
    and the tests it ran."""
    nodes = [_Node("gw0"), _Node("gw1")]
    for node in nodes:
        scheduler.add_node(node)
    for node in nodes:
        scheduler.add_node_collection(node, nodeids)
    scheduler.schedule()
    clock = {node: 0.0 for node in nodes}
    ran: dict[_Node, list[str]] = {node: [] for node in nodes}
    while any(node.queue for node in nodes):
        node = min((n for n in nodes if n.queue), key=clock.get)
        index = node.queue.pop(0)
        clock[node] += seconds[nodeids[index]]
        ran[node].append(nodeids[index])
        scheduler.mark_test_complete(node, index)
    assert not scheduler.workqueue and sum(len(r) for r in ran.values()) == len(nodeids)
    return {node.gateway.id: (clock[node], ran[node]) for node in nodes}


class _Quiet:
    """xdist's log Producer, silent."""

    def __getattr__(self, name):
        return self

    def __call__(self, *args):
        pass


@pytest.mark.parametrize("tests", [
    {"learning-t2v": 3},  # as collected (the others 2, guidance 1)
    {"learning-a14b": 1, "learning-e2v-i2v": 1, "learning-i2v": 1, "learning-e2v-t2v": 1, "learning-t2v": 1},
    {"learning-a14b": 3, "learning-e2v-i2v": 2, "learning-i2v": 5, "learning-e2v-t2v": 1, "learning-t2v": 4},
], ids=["collected", "one-test-each", "mixed"])
def test_each_worker_trains_the_groups_it_was_given_whatever_their_test_counts(tmp_path, tests):
    costs = {"learning-a14b": 14.9, "learning-e2v-i2v": 14.7, "learning-i2v": 12.5, "learning-e2v-t2v": 10.1,
             "learning-t2v": 9.9, "learning-guidance": 2.0}
    counts = {"learning-guidance": 1, **{name: 2 for name in costs if name != "learning-guidance"}, **tests}
    seconds, nodeids = {}, []
    for group in balanced_group_order(costs):  # the learning groups first (the first test trains), then 120 short
        for index in range(counts[group]):
            nodeids.append(f"tests/test_learning.py::test_{index}@{group}")
            seconds[nodeids[-1]] = 60 * costs[group] if index == 0 else 1.0
    for index in range(120):
        nodeids.append(f"tests/test_other.py::test_{index}")
        seconds[nodeids[-1]] = 10.0 + index % 7
    (tmp_path / "costs.json").write_text(json.dumps(costs))
    config = SimpleNamespace(getvalue=lambda name: ["2*popen"] if name == "tx" else None,
                             option=SimpleNamespace(loadscopereorder=False))
    result = _simulate(make_scheduler(config, _Quiet(), tmp_path / "costs.json"), nodeids, seconds)
    trained = {worker: {n.split("@")[1] for n in ran if "::test_0@" in n} for worker, (_, ran) in result.items()}
    first, second = split_groups(costs, 2)
    assert trained == {"gw0": set(first), "gw1": set(second)}
    # each trains its share first (no learning run starts after a short test), and they end within a short test
    for _, ran in result.values():
        learning = [n for n in ran if "@" in n]
        assert ran[:len(learning)] == learning
    ends = [end for end, _ in result.values()]
    assert abs(ends[0] - ends[1]) <= 16.0, ends


def test_a_worker_that_is_gone_leaves_its_groups_to_the_other(tmp_path):
    (tmp_path / "costs.json").write_text(json.dumps({"a": 5.0, "b": 4.0}))
    config = SimpleNamespace(getvalue=lambda name: ["2*popen"] if name == "tx" else None,
                             option=SimpleNamespace(loadscopereorder=False))
    scheduler = make_scheduler(config, _Quiet(), tmp_path / "costs.json")
    nodes = [_Node("gw0"), _Node("gw1")]
    nodeids = ["t.py::test_a@a", "t.py::test_b@b"] + [f"t.py::test_{index}" for index in range(5)]
    for node in nodes:
        scheduler.add_node(node)
        scheduler.add_node_collection(node, nodeids)
    scheduler.schedule()
    assert nodes[0].queue[0] == 0 and nodes[1].queue[0] == 1 and 0 not in nodes[1].queue
    assert scheduler.remove_node(nodes[0]) == "t.py::test_a@a"  # gw0 crashed in its first test: "a" goes back ...
    ran = []
    while nodes[1].queue:
        ran.append(nodes[1].queue.pop(0))
        scheduler.mark_test_complete(nodes[1], ran[-1])
    assert 0 in ran and not scheduler.workqueue  # ... and to gw1, its owner gone
