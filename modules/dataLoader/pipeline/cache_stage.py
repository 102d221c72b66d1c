"""A run of deterministic modules whose outputs are kept in a `DiskCache`, so expensive steps (decoding,
VAE / text / CLIP encoding) run once per item instead of once per epoch.

The key is a fingerprint of everything that can change the outputs: the stage's `version`, each inner
module's class, name and `cache_identity()`, the item's `key_fields` values and the variation index.
Tensor outputs are stored as tensors; every other output must be JSON-able and is stored as JSON in the
safetensors metadata (a miss returns the JSON round-tripped value too, so hits and misses look alike).
"""
from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from modules.dataLoader.cache import DiskCache, fingerprint
from modules.dataLoader.pipeline.module import ItemContext, PipelineError, PipelineModule, run_module
from modules.dataLoader.pipeline.pipeline import PipelineBuildError, _suggest

logger = logging.getLogger(__name__)

_FIELDS_KEY = "pipeline_fields"  # safetensors metadata entry holding the JSON outputs


class CacheStage(PipelineModule):
    """Runs `modules` on a cache miss and stores the chosen `outputs`; on a hit returns them unrun.

    `variations` > 1 keeps that many cached variants per item and epoch e uses variant e % variations
    (as OneTrainer's latent caching variations do): inner modules see `ctx.variation` and their random
    streams depend on it, so e.g. a random crop differs per variant but is stable across runs.
    `hits`, `misses` and `corrupt` count what happened in this process.
    """

    def __init__(
        self,
        modules: Sequence[PipelineModule],
        key_fields: Sequence[str],
        cache: DiskCache,
        version: int | str,
        variations: int = 1,
        *,
        outputs: Sequence[str] | None = None,
        name: str | None = None,
    ):
        self.modules: tuple[PipelineModule, ...] = tuple(modules)
        if not self.modules:
            raise PipelineBuildError("a CacheStage needs at least one module")
        self.name = name or "cache(" + "+".join(m.name for m in self.modules) + ")"
        for module in self.modules:
            if module.per_epoch_random:
                raise PipelineBuildError(
                    f"module '{module.name}' is per_epoch_random, so {self.name} cannot cache it: "
                    f"move it after the cache stage"
                )
        if isinstance(variations, bool) or not isinstance(variations, int) or variations < 1:
            raise PipelineBuildError(f"{self.name}: variations must be an integer >= 1, got {variations!r}")
        self.cache = cache
        self.version = version
        self.variations = variations
        self.key_fields: tuple[str, ...] = tuple(key_fields)
        if not self.key_fields:
            raise PipelineBuildError(f"{self.name}: key_fields is empty, so every item would share one cache entry")

        produced: list[str] = []
        external: list[str] = []
        for module in self.modules:
            external += [f for f in module.inputs if f not in produced and f not in external]
            produced += [f for f in module.outputs if f not in produced]
        chosen = tuple(produced if outputs is None else outputs)
        for field in chosen:
            if field not in produced:
                raise PipelineBuildError(
                    f"{self.name}: output '{field}' is not produced by its modules{_suggest(field, produced)}"
                )
        self.outputs = chosen
        self.inputs = self.key_fields + tuple(f for f in external if f not in self.key_fields)

        self._identity = [
            [f"{type(m).__module__}.{type(m).__qualname__}", m.name, m.cache_identity()] for m in self.modules
        ]
        try:
            fingerprint(self._identity)
        except TypeError as error:
            raise PipelineBuildError(f"{self.name}: a module's cache_identity() is not JSON-able ({error})") from None
        self.hits = 0
        self.misses = 0
        self.corrupt = 0

    def children(self) -> tuple[PipelineModule, ...]:
        return self.modules

    def context_for(self, ctx: ItemContext) -> ItemContext:
        return ctx  # needs the epoch to pick the variation; inner modules get an epoch-free context

    def cache_identity(self) -> Any:
        return [self.version, self.key_fields, self.outputs, self.variations, self._identity]

    def variation_for(self, ctx: ItemContext) -> int:
        """The cached variant used in `ctx`: epoch % variations (0 with one variation)."""
        if self.variations == 1:
            return 0
        return (ctx.epoch if ctx.epoch is not None else ctx.variation) % self.variations

    def key_for(self, item: Mapping[str, Any], variation: int = 0) -> str:
        """The cache key of `item` (holding at least the key fields) for one variant."""
        values = {name: item[name] for name in self.key_fields}
        try:
            return fingerprint("cache-stage", self.version, self._identity, self.outputs, values, variation)
        except TypeError as error:
            raise PipelineError(f"{self.name}: key fields {self.key_fields} must be JSON-able ({error})") from None

    def process(self, item: Mapping[str, Any], ctx: ItemContext) -> dict[str, Any]:
        variation = self.variation_for(ctx)
        key = self.key_for(item, variation)
        existed = key in self.cache
        entry = self.cache.get_with_metadata(key)  # None when absent; corrupt files are logged and deleted
        if entry is not None:
            stored = self._decode(*entry)
            if stored is not None:
                self.hits += 1
                return stored
            self.cache.delete(key)
        if existed:
            self.corrupt += 1
            logger.warning("%s: cache entry %s for item %d was unreadable; recomputing it", self.name, key, ctx.index)
        self.misses += 1
        inner_ctx = ctx.without_epoch(variation)
        fields = dict(item)
        for module in self.modules:
            fields.update(run_module(module, fields, inner_ctx))
        tensors, values = self._encode({name: fields[name] for name in self.outputs})
        self.cache.put(key, tensors, {_FIELDS_KEY: json.dumps(values, sort_keys=True)})
        return {**tensors, **json.loads(json.dumps(values))}

    def _encode(self, outputs: Mapping[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        tensors: dict[str, torch.Tensor] = {}
        values: dict[str, Any] = {}
        for name, value in outputs.items():
            if isinstance(value, torch.Tensor):
                tensors[name] = value.detach().to("cpu").contiguous()
                continue
            try:
                json.dumps(value)
            except (TypeError, ValueError):
                raise PipelineError(
                    f"{self.name}: output '{name}' is a {type(value).__name__}, neither a tensor nor JSON-able, "
                    f"so it cannot be cached"
                ) from None
            values[name] = value
        return tensors, values

    def _decode(self, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> dict[str, Any] | None:
        """The stored outputs, or None when the entry does not hold exactly them (treated as corrupt)."""
        try:
            values = json.loads(metadata[_FIELDS_KEY])
        except (KeyError, ValueError):
            return None
        if not isinstance(values, dict) or set(values) & set(tensors) or set(values) | set(tensors) != set(self.outputs):
            return None
        return {**tensors, **values}
