"""The generic data engine (modules/dataLoader/pipeline): build-time checks, per-item seeds, cache stages and
skips; and the loaders' one epoch order (dataLoader/batching.py). Tiny tensors, no model."""

import pytest
import torch

from modules.dataLoader.batching import epoch_batches
from modules.dataLoader.cache import DiskCache
from modules.dataLoader.errors import DataError
from modules.dataLoader.pipeline import (
    CacheStage,
    ItemContext,
    Pipeline,
    PipelineBuildError,
    PipelineError,
    PipelineModule,
    SkipItem,
)


class MakeTensor(PipelineModule):
    """x = [id] * size; counts its calls."""

    inputs = ("id", "size")
    outputs = ("x",)

    def __init__(self, inputs=("id", "size")):
        self.inputs = inputs
        self.calls = 0

    def process(self, item, ctx):
        self.calls += 1
        return {"x": torch.full((item["size"],), float(item["id"]))}

    def cache_identity(self):
        return {}


class RandomOffset(PipelineModule):
    """A deterministic (cacheable) module drawing from its stream: differs per variation only."""

    inputs = ("x",)
    outputs = ("offset", "shifted")

    def __init__(self):
        self.calls = 0

    def process(self, item, ctx):
        self.calls += 1
        offset = ctx.rng(self.name).randrange(1_000_000)
        return {"offset": offset, "shifted": item["x"] + offset}

    def cache_identity(self):
        return {"range": 1_000_000}


class Noise(PipelineModule):
    """A per-epoch augmentation."""

    inputs = ("x",)
    outputs = ("noisy",)
    per_epoch_random = True

    def process(self, item, ctx):
        return {"noisy": item["x"] + torch.rand(item["x"].shape, generator=ctx.torch_generator(self.name))}


class SkipThree(PipelineModule):
    inputs = ("id",)
    outputs = ("checked",)

    def process(self, item, ctx):
        if item["id"] == 3:
            raise SkipItem(f"item{item['id']}.mp4", "broken on purpose", "broken")
        return {"checked": True}

    def cache_identity(self):
        return {}


class Returns(PipelineModule):
    """Returns a fixed dict, whatever it declares."""

    inputs = ("id",)
    outputs = ("y",)

    def __init__(self, result):
        self.result = result

    def process(self, item, ctx):
        return dict(self.result)


def size_bucket(fields):
    return fields["size"]


def items(count=8, sizes=(2, 3)):
    return [{"id": i, "size": sizes[i % len(sizes)]} for i in range(count)]


def as_plain(batch):
    return {k: v.tolist() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


# --- building -----------------------------------------------------------------------------------------
def test_misspelt_input_fails_at_build_naming_module_field_and_suggestion():
    with pytest.raises(PipelineBuildError, match=r"module 'MakeTensor' needs field 'sise'.*did you mean 'size'"):
        Pipeline(["id", "size"], [MakeTensor(inputs=("id", "sise"))], seed=0)


def test_misspelt_input_inside_cache_stage_names_the_inner_module(tmp_path):
    offset = RandomOffset()
    offset.inputs = ("xx",)
    stage = CacheStage([MakeTensor(), offset], ["id", "size"], DiskCache(tmp_path), version=1)
    with pytest.raises(PipelineBuildError, match=r"module 'RandomOffset' needs field 'xx'.*did you mean 'x'"):
        Pipeline(["id", "size"], [stage], seed=0)


def test_duplicate_output_fails_at_build():
    with pytest.raises(PipelineBuildError, match=r"outputs field 'x', which module 'first' already provides"):
        first, second = MakeTensor(), MakeTensor()
        first.name, second.name = "first", "second"
        Pipeline(["id", "size"], [first, second], seed=0)


def test_input_made_by_a_later_module_says_to_reorder():
    with pytest.raises(PipelineBuildError, match=r"produced by module 'MakeTensor', which runs later"):
        Pipeline(["id", "size"], [Noise(), MakeTensor()], seed=0)


def test_item_without_a_source_field_fails_naming_it():
    pipeline = Pipeline(["id", "size"], [MakeTensor()], seed=0)
    with pytest.raises(PipelineBuildError, match=r"item 0 lacks source field 'size'.*did you mean 'sizes'"):
        pipeline.run({"id": 0, "sizes": 2}, pipeline.context(0, 0))


# --- module contracts at run time ---------------------------------------------------------------------
def test_undeclared_output_fails_naming_module_and_field():
    pipeline = Pipeline(["id"], [Returns({"y": 1, "z": 2})], seed=0)
    with pytest.raises(PipelineError, match=r"module 'Returns' returned undeclared field 'z'"):
        pipeline.run({"id": 0}, pipeline.context(0, 0))


def test_missing_declared_output_fails_naming_module_and_field():
    pipeline = Pipeline(["id"], [Returns({})], seed=0)
    with pytest.raises(PipelineError, match=r"module 'Returns' did not return its declared output 'y'"):
        pipeline.run({"id": 0}, pipeline.context(0, 0))


def test_reading_an_undeclared_input_fails_naming_module_and_field():
    class Sneaky(Returns):
        def process(self, item, ctx):
            return {"y": item["size"]}

    pipeline = Pipeline(["id", "size"], [Sneaky({})], seed=0)
    with pytest.raises(PipelineError, match=r"module 'Sneaky' read field 'size' that is not among its declared inputs"):
        pipeline.run({"id": 0, "size": 1}, pipeline.context(0, 0))


# --- per-item random streams --------------------------------------------------------------------------
def test_rng_is_a_function_of_seed_module_epoch_and_index():
    a = ItemContext(seed=5, index=3, epoch=2).rng("crop")
    b = ItemContext(seed=5, index=3, epoch=2).rng("crop")
    assert [a.random() for _ in range(3)] == [b.random() for _ in range(3)]
    g1 = ItemContext(seed=5, index=3, epoch=2).torch_generator("crop")
    g2 = ItemContext(seed=5, index=3, epoch=2).torch_generator("crop")
    assert torch.equal(torch.rand(4, generator=g1), torch.rand(4, generator=g2))


def test_rng_differs_between_epochs_indices_and_modules():
    base = ItemContext(seed=5, index=3, epoch=2).rng("crop").random()
    assert ItemContext(seed=5, index=3, epoch=3).rng("crop").random() != base
    assert ItemContext(seed=5, index=4, epoch=2).rng("crop").random() != base
    assert ItemContext(seed=5, index=3, epoch=2).rng("flip").random() != base


def test_deterministic_module_does_not_see_the_epoch():
    pipeline = Pipeline(["id", "size"], [MakeTensor(), RandomOffset()], seed=0)
    epoch0 = pipeline.run({"id": 1, "size": 2}, pipeline.context(1, 0))
    epoch5 = pipeline.run({"id": 1, "size": 2}, pipeline.context(1, 5))
    assert epoch0["offset"] == epoch5["offset"]


# --- cache stage -------------------------------------------------------------------------------------
def cached_pipeline(tmp_path, variations=1):
    make, offset = MakeTensor(), RandomOffset()
    stage = CacheStage([make, offset], ["id", "size"], DiskCache(tmp_path), version=1, variations=variations)
    return Pipeline(["id", "size"], [stage], seed=0), stage, make, offset


def test_cache_stage_second_pass_runs_no_module(tmp_path):
    pipeline, stage, make, offset = cached_pipeline(tmp_path)
    first = [pipeline.run(item, pipeline.context(i, 0)) for i, item in enumerate(items(4))]
    second = [pipeline.run(item, pipeline.context(i, 1)) for i, item in enumerate(items(4))]
    assert (stage.misses, stage.hits, make.calls, offset.calls) == (4, 4, 4, 4)
    assert [as_plain(f) for f in first] == [as_plain(s) for s in second]


def test_cache_stage_hit_returns_json_metadata_like_a_miss(tmp_path):
    pipeline, stage, _, _ = cached_pipeline(tmp_path)
    miss = pipeline.run({"id": 1, "size": 2}, pipeline.context(0, 0))
    hit = pipeline.run({"id": 1, "size": 2}, pipeline.context(0, 0))
    assert stage.hits == 1 and isinstance(hit["offset"], int) and hit["offset"] == miss["offset"]


def test_cache_stage_variations_cycle_with_the_epoch(tmp_path):
    pipeline, stage, _, offset = cached_pipeline(tmp_path, variations=2)
    offsets = [pipeline.run({"id": 1, "size": 2}, pipeline.context(0, epoch))["offset"] for epoch in range(4)]
    assert offsets[0] == offsets[2] and offsets[1] == offsets[3] and offsets[0] != offsets[1]
    assert (stage.misses, stage.hits, offset.calls) == (2, 2, 2)


def test_cache_stage_recomputes_a_corrupt_entry(tmp_path):
    pipeline, stage, make, _ = cached_pipeline(tmp_path)
    item = {"id": 1, "size": 2}
    first = pipeline.run(item, pipeline.context(0, 0))
    stage.cache.path_for(stage.key_for(item)).write_bytes(b"not a safetensors file")
    again = pipeline.run(item, pipeline.context(0, 0))
    assert (stage.corrupt, stage.misses, make.calls) == (1, 2, 2)
    assert torch.equal(first["shifted"], again["shifted"])
    assert pipeline.run(item, pipeline.context(0, 0)) and stage.hits == 1


def test_cache_stage_rejects_a_per_epoch_random_module(tmp_path):
    with pytest.raises(PipelineBuildError, match=r"module 'Noise' is per_epoch_random"):
        CacheStage([MakeTensor(), Noise()], ["id"], DiskCache(tmp_path), version=1)


# --- skips and the loaders' epoch order ------------------------------------------------------------------
def test_a_skipped_item_reaches_the_loader_as_a_data_error_naming_file_and_category():
    pipeline = Pipeline(["id", "size"], [SkipThree(), MakeTensor()], seed=0)
    assert pipeline.run({"id": 2, "size": 2}, pipeline.context(2, 0))["x"].tolist() == [2, 2]
    with pytest.raises(DataError) as error:
        pipeline.run({"id": 3, "size": 2}, pipeline.context(3, 0))
    assert (error.value.path, error.value.category) == ("item3.mp4", "broken")


def test_batches_never_mix_buckets():
    buckets = [fields["size"] for fields in items(9)]
    for batch in epoch_batches(buckets, 2, seed=11, epoch=0, world_size=1):
        assert len({buckets[i] for i in batch}) == 1
    assert sorted(i for batch in epoch_batches(buckets, 2, 11, 0, 1) for i in batch) == list(range(9))


def test_epoch_order_is_a_function_of_seed_and_epoch():
    buckets = [fields["size"] for fields in items(12)]
    assert epoch_batches(buckets, 2, 11, 3, 1) == epoch_batches(list(buckets), 2, 11, 3, 1)
    assert epoch_batches(buckets, 2, 11, 0, 1) != epoch_batches(buckets, 2, 11, 1, 1)
    assert epoch_batches(buckets, 2, 11, 0, 1) != epoch_batches(buckets, 2, 12, 0, 1)


def test_batches_smaller_than_the_rank_count_are_dropped():
    buckets = [0, 0, 0, 1]  # bucket 1 makes a batch of one
    batches = epoch_batches(buckets, 2, 11, 0, world_size=2)
    assert all(len(batch) >= 2 for batch in batches) and 3 not in {i for batch in batches for i in batch}
