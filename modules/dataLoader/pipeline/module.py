"""Pipeline modules: small steps with declared per-item fields, and the per-item context they run in.

A module names the fields it reads (`inputs`) and the fields it adds (`outputs`). The pipeline checks
those names when it is built, and `run_module` checks at run time that a module reads only what it
declared and returns exactly what it declared, so a mistake fails on the first item with the module's
name in the message rather than as a KeyError deep inside a worker.

All randomness comes from `ItemContext.rng()` / `torch_generator()`, whose seeds are a hash of
(pipeline seed, module name, epoch, variation, index, ...). No state is carried from item to item, so
an item gets the same numbers in any worker process, in any order, and after a resume.
"""
from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping
from typing import Any

import torch

from modules.dataLoader.cache import fingerprint


class PipelineError(Exception):
    """A module broke its contract (read an undeclared field, returned the wrong fields): a bug."""


def derive_seed(*parts: Any) -> int:
    """A 64-bit seed from the sha256 of the JSON of `parts`; equal parts give equal seeds in any process.

    (Python's `hash()` is salted per process, so it must never be used for seeds.)
    """
    return int(fingerprint(*parts)[:16], 16)


@dataclasses.dataclass(frozen=True)
class ItemContext:
    """Where an item is being processed: its index, the epoch and the cache variation.

    `epoch` is None for modules that are not `per_epoch_random`: a deterministic (cacheable) module
    cannot depend on the epoch, so its random streams depend only on `variation` (0 unless it runs
    inside a `CacheStage` with several variations).
    """

    seed: int
    index: int
    epoch: int | None
    variation: int = 0

    def seed_for(self, module_name: str, *stream: Any) -> int:
        """The seed of `module_name`'s random stream for this item (extra `stream` parts split it further)."""
        return derive_seed("item", self.seed, module_name, self.epoch, self.variation, self.index, *stream)

    def rng(self, module_name: str, *stream: Any) -> random.Random:
        """A fresh `random.Random` for `module_name` on this item; the same numbers every time it is asked."""
        return random.Random(self.seed_for(module_name, *stream))

    def torch_generator(self, module_name: str, *stream: Any, device: str | torch.device = "cpu") -> torch.Generator:
        """A fresh `torch.Generator` for `module_name` on this item, seeded like `rng()`."""
        generator = torch.Generator(device=device)
        generator.manual_seed(self.seed_for(module_name, *stream))
        return generator

    def without_epoch(self, variation: int | None = None) -> ItemContext:
        """The context a deterministic module sees: no epoch, and optionally another variation."""
        return dataclasses.replace(self, epoch=None, variation=self.variation if variation is None else variation)


class PipelineModule:
    """One step of a pipeline. Subclasses set `inputs`, `outputs` (class or instance attributes) and
    implement `process`.

    `name` defaults to the class name; give instances distinct names when a pipeline holds the same
    class twice (names key the random streams and the error messages, so they must be unique).
    `per_epoch_random = True` marks a module whose outputs change with the epoch (augmentations, caption
    dropout); such a module can never be cached and sees `ctx.epoch`. Otherwise the module is
    deterministic for (item, variation) and may sit inside a `CacheStage`.
    """

    name: str = ""
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    per_epoch_random: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = cls.__name__

    def process(self, item: Mapping[str, Any], ctx: ItemContext) -> dict[str, Any]:
        """Return a dict holding exactly `outputs`, computed from the `inputs` in `item`."""
        raise NotImplementedError(f"{type(self).__name__}.process() is not implemented")

    def cache_identity(self) -> Any:
        """Everything besides the input fields that changes this module's outputs (its config, a model
        hash, a version), JSON-able. A `CacheStage` puts it in its cache keys, so a forgotten setting
        means stale cache entries: there is deliberately no default.
        """
        raise NotImplementedError(
            f"module '{self.name}' ({type(self).__name__}) has no cache_identity(): return its config "
            f"(everything that changes its outputs) so that it can be cached"
        )

    def children(self) -> tuple[PipelineModule, ...]:
        """The modules this one runs internally, in order (a `CacheStage`); checked by `Pipeline`."""
        return ()

    def context_for(self, ctx: ItemContext) -> ItemContext:
        """The context this module is given: deterministic modules do not see the epoch."""
        return ctx if self.per_epoch_random else ctx.without_epoch()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, inputs={tuple(self.inputs)}, outputs={tuple(self.outputs)})"


class _DeclaredInputs(dict):
    """The fields handed to a module; reading one it did not declare fails naming both."""

    def __init__(self, module: PipelineModule, fields: Mapping[str, Any]):
        super().__init__((name, fields[name]) for name in module.inputs)
        self._module = module

    def __missing__(self, key: str) -> Any:
        raise PipelineError(
            f"module '{self._module.name}' read field '{key}' that is not among its declared inputs "
            f"{tuple(self._module.inputs)}: add it to {type(self._module).__name__}.inputs"
        )


def run_module(module: PipelineModule, fields: Mapping[str, Any], ctx: ItemContext) -> dict[str, Any]:
    """Run `module` on its declared inputs from `fields` and check that it returned exactly its outputs."""
    result = module.process(_DeclaredInputs(module, fields), module.context_for(ctx))
    if not isinstance(result, Mapping):
        raise PipelineError(f"module '{module.name}' returned a {type(result).__name__}, not a dict of its outputs")
    declared = tuple(module.outputs)
    for name in result:
        if name not in declared:
            raise PipelineError(f"module '{module.name}' returned undeclared field '{name}' (declared outputs: {declared})")
    for name in declared:
        if name not in result:
            raise PipelineError(f"module '{module.name}' did not return its declared output '{name}'")
    return dict(result)
