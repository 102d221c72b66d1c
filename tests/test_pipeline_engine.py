"""The generic data engine (modules/dataLoader/pipeline): build-time checks, per-item seeds, cache stages,
skips, bucketed batches, worker processes and mid-epoch resume. Tiny tensors, no model."""

import pytest
import torch

from modules.dataLoader.cache import DiskCache
from modules.dataLoader.pipeline import (
    CacheStage,
    ItemContext,
    Pipeline,
    PipelineBuildError,
    PipelineDataLoader,
    PipelineError,
    PipelineModule,
    SkipItem,
    default_collate,
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


def loader_for(modules, count=8, batch_size=2, num_workers=0, bucket_key=size_bucket):
    pipeline = Pipeline(["id", "size"], modules, seed=7)
    return PipelineDataLoader(pipeline, items(count), batch_size, seed=11, bucket_key=bucket_key, num_workers=num_workers)


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


def test_item_without_a_source_field_fails_when_the_loader_is_built():
    pipeline = Pipeline(["id", "size"], [MakeTensor()], seed=0)
    with pytest.raises(PipelineBuildError, match=r"item 0 lacks source field 'size'.*did you mean 'sizes'"):
        PipelineDataLoader(pipeline, [{"id": 0, "sizes": 2}], 1, seed=0)


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


# --- loader ------------------------------------------------------------------------------------------
def test_skipped_item_is_counted_and_iteration_continues():
    loader = loader_for([SkipThree(), MakeTensor()], count=6, bucket_key=None)
    ids = [i for batch in loader.iter_epoch(0) for i in batch["id"]]
    assert sorted(ids) == [0, 1, 2, 4, 5]
    assert loader.skips.counts() == {"broken": 1}


def test_prepare_excludes_skipped_items_from_batches():
    loader = loader_for([SkipThree(), MakeTensor()], count=6)
    loader.prepare()
    assert sorted(i for batch in loader.epoch_batches(0) for i in batch) == [0, 1, 2, 4, 5]
    assert len(loader.skips) == 1


def test_batches_never_mix_buckets():
    loader = loader_for([MakeTensor()], count=9)
    for batch in loader.iter_epoch(0):
        assert len(set(batch["size"])) == 1 and batch["x"].shape[1] == batch["size"][0]


def test_epoch_order_is_a_function_of_seed_and_epoch():
    one, two = loader_for([MakeTensor()], count=12), loader_for([MakeTensor()], count=12)
    assert one.epoch_batches(3) == two.epoch_batches(3)
    assert one.epoch_batches(0) != one.epoch_batches(1)


def test_worker_processes_give_identical_batches():
    modules = lambda: [MakeTensor(), RandomOffset(), Noise()]  # noqa: E731
    in_process = [as_plain(b) for b in loader_for(modules(), count=8, num_workers=0).iter_epoch(1)]
    in_workers = [as_plain(b) for b in loader_for(modules(), count=8, num_workers=2).iter_epoch(1)]
    assert in_workers == in_process and len(in_process) == 4


def test_resume_mid_epoch_yields_exactly_the_remaining_batches():
    full = [as_plain(b) for b in loader_for([MakeTensor(), Noise()], count=10).iter_epoch(2)]
    first = loader_for([MakeTensor(), Noise()], count=10)
    for taken, _ in enumerate(first.iter_epoch(2), start=1):
        if taken == 2:
            break
    state = first.state_dict()
    assert state == {"epoch": 2, "batch": 2}
    resumed = loader_for([MakeTensor(), Noise()], count=10)
    resumed.load_state_dict(state)
    assert [as_plain(b) for b in resumed.iter_epoch(2)] == full[2:]
    assert resumed.state_dict() == {"epoch": 3, "batch": 0}


def test_default_collate_stacks_equal_shapes_and_keeps_lists_otherwise():
    batch = default_collate([{"a": torch.zeros(2), "b": torch.zeros(2), "c": "x"},
                             {"a": torch.ones(2), "b": torch.zeros(3), "c": "y"}])
    assert batch["a"].shape == (2, 2) and isinstance(batch["b"], list) and batch["c"] == ["x", "y"]
