"""A pipeline: source fields plus an ordered list of modules, checked for consistency when it is built.

Every field name a module reads must come from a source or an earlier module, no field may be produced
twice and module names are unique (they key the random streams). A misspelt name therefore fails at
construction, naming the module, the field and the closest available name, instead of at item 10,000.
"""
from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from modules.dataLoader.errors import DataError
from modules.dataLoader.pipeline.module import ItemContext, PipelineModule, run_module
from modules.util.errors import UserError

SKIPPED = "skipped by pipeline"


class PipelineBuildError(UserError):
    """The pipeline's declared fields do not fit together (or an item lacks a source field)."""


class SkipItem(DataError):
    """Raised by a module to drop the current item: the engine records it in a SkipCounter and goes on.

    Any `DataError` (e.g. from video decoding) is treated the same way.
    """

    def __init__(self, path: str | os.PathLike, reason: str, category: str = SKIPPED):
        super().__init__(path, reason, category)


def _suggest(name: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.5)
    return f"; did you mean '{close[0]}'?" if close else ""


def _names(module: PipelineModule, attribute: str) -> tuple[str, ...]:
    values = getattr(module, attribute)
    if isinstance(values, str) or not all(isinstance(v, str) and v for v in values):
        raise PipelineBuildError(f"module '{module.name}': {attribute} must be a tuple of field names, got {values!r}")
    if len(set(values)) != len(values):
        raise PipelineBuildError(f"module '{module.name}' lists a field twice in {attribute}: {tuple(values)}")
    return tuple(values)


class _Validator:
    """Walks the modules (and the children of composite ones) in run order, tracking available fields."""

    def __init__(self, sources: Sequence[str], modules: Sequence[PipelineModule]):
        self.producers: dict[str, str] = {}  # field -> who made it ("source" or a module name)
        self.module_names: set[str] = set()
        self.later: dict[str, str] = {}  # every field any module produces -> that module (for hints)
        for module in self._flatten(modules):
            for field in getattr(module, "outputs", ()):
                self.later.setdefault(field, module.name)
        for source in sources:
            if not isinstance(source, str) or not source:
                raise PipelineBuildError(f"pipeline sources must be field names, got {source!r}")
            if source in self.producers:
                raise PipelineBuildError(f"pipeline source '{source}' is listed twice")
            self.producers[source] = "source"
        for module in modules:
            self._add(module, self.producers)

    def _flatten(self, modules: Sequence[PipelineModule]) -> list[PipelineModule]:
        flat: list[PipelineModule] = []
        for module in modules:
            flat.append(module)
            flat.extend(self._flatten(module.children()))
        return flat

    def _need(self, module: PipelineModule, field: str, available: Mapping[str, str], what: str = "field") -> None:
        if field in available:
            return
        hint = _suggest(field, available)
        if not hint and field in self.later:
            hint = f"; it is produced by module '{self.later[field]}', which runs later: reorder the modules"
        raise PipelineBuildError(
            f"module '{module.name}' needs {what} '{field}', which no source or earlier module provides{hint} "
            f"(available: {', '.join(available) or 'none'})"
        )

    def _produce(self, module: PipelineModule, field: str, available: dict[str, str]) -> None:
        if field in available:
            by = "a source" if available[field] == "source" else f"module '{available[field]}'"
            raise PipelineBuildError(
                f"module '{module.name}' outputs field '{field}', which {by} already provides: "
                f"fields are produced once, give the new value another name"
            )
        available[field] = module.name

    def _add(self, module: PipelineModule, available: dict[str, str]) -> None:
        if not isinstance(module, PipelineModule):
            raise PipelineBuildError(f"pipeline modules must be PipelineModule instances, got {module!r}")
        if not isinstance(module.name, str) or not module.name:
            raise PipelineBuildError(f"module {module!r} has no name")
        if module.name in self.module_names:
            raise PipelineBuildError(
                f"two modules are named '{module.name}': give each a distinct name (names key their random streams)"
            )
        self.module_names.add(module.name)
        inputs, outputs = _names(module, "inputs"), _names(module, "outputs")
        children = module.children()
        if children:
            inner = dict(available)  # fields made inside a composite module are visible only inside it
            for child in children:
                self._add(child, inner)
            for field in inputs:
                self._need(module, field, available)
            for field in outputs:
                if field not in inner or field in available:
                    raise PipelineBuildError(
                        f"module '{module.name}' exposes output '{field}', which none of its inner modules "
                        f"produces{_suggest(field, [f for f in inner if f not in available])}"
                    )
        else:
            for field in inputs:
                self._need(module, field, available)
        for field in outputs:
            self._produce(module, field, available)


class Pipeline:
    """Source field names, modules in run order and the seed of every item's random streams.

    `run()` returns the item's source fields plus every module's outputs. A module raising `SkipItem`
    (any `DataError`) drops the item: the loader records it in its `SkipCounter`.
    """

    def __init__(self, sources: Sequence[str], modules: Sequence[PipelineModule], seed: int):
        self.sources: tuple[str, ...] = tuple(sources)
        self.modules: tuple[PipelineModule, ...] = tuple(modules)
        self.seed = int(seed)
        self.fields: tuple[str, ...] = tuple(_Validator(self.sources, self.modules).producers)

    def context(self, index: int, epoch: int) -> ItemContext:
        """The context of item `index` in `epoch` under this pipeline's seed."""
        return ItemContext(seed=self.seed, index=index, epoch=epoch)

    def check_item(self, item: Mapping[str, Any], where: str = "item") -> None:
        """Fail unless `item` holds exactly the source fields (extra keys would be invisible to validation)."""
        for name in self.sources:
            if name not in item:
                raise PipelineBuildError(f"{where} lacks source field '{name}'{_suggest(name, item)}")
        for name in item:
            if name not in self.sources:
                raise PipelineBuildError(
                    f"{where} has field '{name}', which is not a pipeline source{_suggest(name, self.sources)} "
                    f"(sources: {', '.join(self.sources)})"
                )

    def run(self, item: Mapping[str, Any], ctx: ItemContext, *, stop: int | None = None) -> dict[str, Any]:
        """Run modules [0, stop) on `item`; returns sources plus outputs. Raises `DataError` to skip the item."""
        self.check_item(item, f"item {ctx.index}")
        fields = dict(item)
        for module in self.modules[:stop]:
            fields.update(run_module(module, fields, ctx))
        return fields
