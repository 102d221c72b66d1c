"""Our MGDS-style data engine: modules with declared fields, per-item seeds and disk cache stages. Generic: it
knows nothing about Wan. Epoch order, batching, prefetch and resume are the loaders' (dataLoader/batching.py,
dataLoader/prefetch.py): one engine, one epoch order."""

from modules.dataLoader.pipeline.cache_stage import CacheStage
from modules.dataLoader.pipeline.module import ItemContext, PipelineError, PipelineModule, derive_seed, run_module
from modules.dataLoader.pipeline.pipeline import Pipeline, PipelineBuildError, SkipItem

__all__ = [
    "CacheStage",
    "ItemContext",
    "Pipeline",
    "PipelineBuildError",
    "PipelineError",
    "PipelineModule",
    "SkipItem",
    "derive_seed",
    "run_module",
]
