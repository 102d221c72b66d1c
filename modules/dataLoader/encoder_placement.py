"""Where the encoders sit while the cache is filled: one at a time on the train device.

UMT5-XXL alone is 10.6 GiB in bf16; holding it beside the VAE's working set made caching the peak of a
1.3B run (issue #24). With latent caching, the loaders fill the cache in phases (`prefill`): every caption
through UMT5, then every clip through the VAE, then CLIP. Each encoding module calls `use()` before it
encodes; inside `caching()` that moves the other encoders off the device (weights back to host memory,
the allocator emptied) and this one to its home: the train device, or the CPU for UMT5 with
`text_encoder_caching_device: CPU`. Outside `caching()` (an entry re-encoded during training) `use()` leaves
every encoder where it is. Placement never changes what is encoded, so it is not part of any cache key.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Any, Callable, Iterable, Sequence

import torch

from modules.dataLoader.batching import ProgressReport, caching_steps
from modules.dataLoader.errors import DataError
from modules.util.device_memory import release_from_device
from modules.util.enum import EncoderDevice

logger = logging.getLogger(__name__)

ENCODERS = ("text", "vae", "clip")  # the order the phases run in
CPU = torch.device("cpu")


def encoder_modules(model) -> dict[str, torch.nn.Module | None]:
    """The encoders that hold weights (a freed one, model/encoder_residency.py, is None here)."""
    return {"text": model.loaded_encoder("text"), "vae": model.vae, "clip": model.loaded_encoder("clip")}


def device_of(module: torch.nn.Module) -> torch.device:
    return next(module.parameters()).device


def place(module: torch.nn.Module, device: torch.device) -> None:
    module.to(device)


def evict(modules: list[torch.nn.Module], device: torch.device) -> None:
    release_from_device(modules, device)


class EncoderPlacement:
    """Moves the encoders of `model` so that, while caching, only the one encoding is on the train device."""

    def __init__(self, model, one_at_a_time: bool, text_device: EncoderDevice = EncoderDevice.GPU):
        self.model, self.one_at_a_time = model, one_at_a_time
        self.text_on_cpu = text_device == EncoderDevice.CPU
        self.active = False

    def home(self, name: str) -> torch.device:
        return CPU if name == "text" and self.text_on_cpu else self.model.train_device

    @contextlib.contextmanager
    def caching(self):
        self.active = True
        try:
            yield
        finally:
            self.active = False

    def use(self, name: str) -> None:
        """Before encoder `name` runs: the others off the device, it on its home (only inside `caching()`)."""
        if not self.active:
            return
        modules = encoder_modules(self.model)
        device = self.model.train_device
        if self.one_at_a_time and device != CPU:
            others = [m for n, m in modules.items() if n != name and m is not None and device_of(m) != CPU]
            if others:
                evict(others, device)
        self.bring(name)

    def bring(self, name: str) -> None:
        """Encoder `name` onto its home, the others left where they are (inside `caching()`)."""
        module = encoder_modules(self.model)[name]
        if self.active and module is not None and device_of(module) != self.home(name):
            place(module, self.home(name))


def placement_for(config, model) -> EncoderPlacement:
    """The run's placement: one encoder at a time with latent caching (without it every step encodes, so all stay)."""
    return EncoderPlacement(model, config.latent_caching, config.text_encoder_caching_device)


def place_before_caching(config, model) -> None:
    """Without latent caching the encoders run in every step: all on their home devices now. With it, `use()`
    brings each in when its phase starts."""
    if config.latent_caching:
        return
    placement = placement_for(config, model)
    for name, module in encoder_modules(model).items():
        if module is not None:
            place(module, placement.home(name))


def park_after_caching(config, model, keep_text: bool, keep_clip: bool = False) -> None:
    """With latent caching the encoders are not needed after it (what the samples need was encoded ahead:
    trainer/sample_inputs.py): UMT5 and CLIP freed (`WanModel.release_encoders`: host and device memory given back);
    the VAE on the device, as it always was. A trained embedding keeps UMT5 on the train device (captions holding
    its placeholder are encoded in each step), `sample_metrics` CLIP in host memory (it measures each sample); an
    encoder the model cannot load again stays in host memory too."""
    if not config.latent_caching:
        return
    model.release_encoders([name for name, keep in (("text", keep_text), ("clip", keep_clip)) if not keep])
    off = [None if keep_text else model.loaded_encoder("text"), model.loaded_encoder("clip")]
    release_from_device([m for m in off if m is not None], model.train_device)
    for module in (model.vae, model.loaded_encoder("text") if keep_text else None):
        if module is not None:
            place(module, model.train_device)


def phase_stops(modules: Sequence[Any]) -> list[tuple[str, int]]:
    """(encoder, stop) for each leading run of cache stages that use one encoder, but the last run: running
    `pipeline.run(stop=stop)` over every item with that encoder placed fills those stages. The rest of the
    pipeline (the last run, or stages that use two encoders) is left to the loader's own pass."""
    kinds = [{getattr(inner, "encoder", None) for inner in module.children()} - {None} for module in modules]
    stops: list[tuple[str, int]] = []
    for index, kind in enumerate(kinds):
        if len(kind) != 1:
            break
        (encoder,) = kind
        if stops and stops[-1][0] == encoder:
            stops[-1] = (encoder, index + 1)
        elif stops and ENCODERS.index(encoder) < ENCODERS.index(stops[-1][0]):
            break  # out of phase order: left to the main pass
        else:
            stops.append((encoder, index + 1))
    return stops[:-1] if stops and stops[-1][1] == len(modules) else stops


def prefill(items: Iterable[Any], stops_of: Callable[[Any], list[tuple[str, int]]],
            run: Callable[[Any, int, int], Any], variants: Callable[[Any], int], placement: EncoderPlacement,
            should_stop: Callable[[], bool] | None, show: bool = True, report: ProgressReport | None = None) -> None:
    """Fill the leading cache stages encoder by encoder: for each phase, `run(item, variation, stop)` for every item
    and cached variant with that encoder placed. A sample that fails is left for the loader's own pass (which
    skips and counts it)."""
    items = list(items)
    phases = sorted({(ENCODERS.index(e), e) for item in items for e, _ in stops_of(item)})
    for _, encoder in phases:  # the encoding modules call placement.use() on a miss: a warm cache moves nothing
        for item in caching_steps(items, should_stop, f"caching ({encoder})", "item", show, report):
            stop = dict(stops_of(item)).get(encoder)
            if stop is None:
                continue
            for variation in range(variants(item)):
                try:
                    run(item, variation, stop)
                except DataError:
                    break
