"""The learning runs split over CI's two xdist workers (tests/conftest.py: balanced_group_order) by their measured
CPU minutes: the first four groups alternate between the workers, so the 1st and 3rd train on one."""
from __future__ import annotations

from tests.conftest import balanced_group_order


def _loads(order: list[str], costs: dict[str, float]) -> tuple[float, float]:
    """Each worker's share as xdist's loadgroup deals them: 1st and 3rd to one, 2nd and 4th to the other, the 5th
    to the one that empties first (the lighter)."""
    first, second = costs[order[0]] + costs[order[2]], costs[order[1]] + costs[order[3]]
    for name in order[4:]:
        if first <= second:
            first += costs[name]
        else:
            second += costs[name]
    return first, second


def test_the_learning_runs_split_evenly_longest_first():
    from tests.test_learning import CPU_MINUTES

    order = balanced_group_order(CPU_MINUTES)
    assert sorted(order) == sorted(CPU_MINUTES) and order[0] == max(CPU_MINUTES, key=CPU_MINUTES.get)
    first, second = _loads(order, CPU_MINUTES)
    # collection order (t2v, i2v, a14b, e2v-i2v, e2v-t2v) gave 24.6 and 37.5 CPU-min
    assert abs(first - second) <= min(CPU_MINUTES.values()) / 2, (order, first, second)


def test_an_even_split_exists_whatever_the_costs():
    costs = {"a": 10.0, "b": 9.0, "c": 6.0, "d": 5.0, "e": 4.0, "f": 1.0}
    order = balanced_group_order(costs)
    assert sorted(order) == sorted(costs)
    one, other = sum(costs[n] for n in order[0::2]), sum(costs[n] for n in order[1::2])
    assert abs(one - other) <= 1.0, order
    assert balanced_group_order({}) == [] and balanced_group_order({"x": 3.0}) == ["x"]
