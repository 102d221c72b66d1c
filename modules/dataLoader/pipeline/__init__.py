"""Our MGDS-style data engine: modules with declared fields, per-item seeds, disk cache stages, bucketed
batches and worker processes. Generic: it knows nothing about Wan."""

from modules.dataLoader.pipeline.cache_stage import CacheStage
from modules.dataLoader.pipeline.loader import PipelineDataLoader, default_collate
from modules.dataLoader.pipeline.module import ItemContext, PipelineError, PipelineModule, derive_seed, run_module
from modules.dataLoader.pipeline.pipeline import Pipeline, PipelineBuildError, SkipItem

__all__ = [
    "CacheStage",
    "ItemContext",
    "Pipeline",
    "PipelineBuildError",
    "PipelineDataLoader",
    "PipelineError",
    "PipelineModule",
    "SkipItem",
    "default_collate",
    "derive_seed",
    "run_module",
]
