"""concepts[].balancing: whole repeats keep the plain item list; fractions and SAMPLES are drawn per epoch."""
from __future__ import annotations

import collections

from modules.dataLoader.batching import ConceptSlots, epoch_members
from modules.util.enum import BalancingStrategy as B
from tests.test_frame_sampling import loader


def test_whole_repeats_are_every_copy_in_order():
    slots = [ConceptSlots((0, 2, 4), 2, B.REPEATS, 2.0), ConceptSlots((6, 7), 1, B.REPEATS, 1.0)]
    for epoch in range(3):
        assert epoch_members(slots, 7, epoch) == list(range(8))  # as the list of repeated items always was


def test_fractional_repeats_draw_their_share_anew_each_epoch():
    slots = [ConceptSlots(tuple(range(10)), 1, B.REPEATS, 1.5)]
    epochs = [epoch_members(slots, 7, e) for e in range(6)]
    assert all(len(m) == 15 and m[:10] == list(range(10)) for m in epochs)
    assert len({tuple(m[10:]) for m in epochs}) > 1 and all(len(set(m[10:])) == 5 for m in epochs)
    half = [ConceptSlots(tuple(range(10)), 1, B.REPEATS, 0.5)]
    assert all(len(epoch_members(half, 7, e)) == 5 for e in range(4))
    assert epoch_members(slots, 7, 3) == epochs[3]  # a pure function of (seed, epoch): what a resume reads


def test_samples_per_epoch_walk_the_concept_before_repeating():
    slots = [ConceptSlots(tuple(range(0, 12, 2)), 1, B.SAMPLES, 4)]  # 6 items, 4 per epoch
    members = [m for e in range(3) for m in epoch_members(slots, 7, e)]
    assert all(len(epoch_members(slots, 7, e)) == 4 for e in range(3))
    assert sorted(members[:6]) == list(range(0, 12, 2))  # every item once before any comes again
    assert sorted(members[6:12]) == list(range(0, 12, 2))


def test_a_small_concept_is_balanced_against_a_big_one(tiny_model, tmp_path):
    from tests.test_frame_sampling import counting_clip

    for name in ("a", "b", "c", "d"):
        big = counting_clip(tmp_path / "big", name, frames=9)
    small = counting_clip(tmp_path / "small", "x", frames=9)
    concepts = [{"path": str(big)}, {"path": str(small), "balancing": 4}]
    data = loader(tiny_model, big, tmp_path / "run", frames=9, concepts=concepts, batch_size=2)
    counts = collections.Counter(data.items[i].sample.media_path.stem for b in data.epoch_batches(0) for i in b)
    assert counts == {"a": 1, "b": 1, "c": 1, "d": 1, "x": 4}
    concepts[1] = {"path": str(small), "balancing": 2, "balancing_strategy": "SAMPLES"}
    concepts[0]["balancing"] = 0.5
    data = loader(tiny_model, big, tmp_path / "run2", frames=9, concepts=concepts, batch_size=1)
    per_epoch = [collections.Counter(data.items[i].sample.media_path.stem for b in data.epoch_batches(e) for i in b)
                 for e in range(2)]
    assert all(sum(c.values()) == 4 and c["x"] == 2 for c in per_epoch)
