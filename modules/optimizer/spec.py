"""What every optimizer gives: its options type, a factory, what must be installed, and whether it keeps an
averaged copy of the weights (schedule-free) that saving and sampling must use.

The config imports every optimizer module for its option types (`optimizer_options`), so none of them imports
torch at module level: a config error comes before the seconds torch takes (tests/test_cli_startup.py)."""
from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from modules.util.base_config import BaseConfig, ConfigError

if TYPE_CHECKING:  # pragma: no cover
    import torch

Factory = Callable[[Sequence["torch.nn.Parameter"], float, float, Any], "torch.optim.Optimizer"]


@dataclasses.dataclass(frozen=True)
class OptimizerSpec:
    name: str  # the config value of `optimizer`
    options: type[BaseConfig]  # its block under `optimizer_options.<name>`
    build: Factory  # (params, learning_rate, weight_decay, options) -> optimizer
    doc: str  # one line for docs and the GUI: what it is and where it comes from
    module: str | None = None  # the importable package it needs; None: torch's own
    install: str = ""  # what to tell a user who lacks it
    schedule_free: bool = False  # keeps y (trained) and x (averaged) weights: eval() before saving/sampling
    shards: bool = False  # its state is shaped like the weights, so FSDP can shard it
    state_bytes: float = 8.0  # optimizer state per trained parameter, for the VRAM estimate (AdamW: 2 fp32 moments)

    def missing(self) -> str | None:
        """Why this optimizer cannot be built here (None: it can)."""
        if self.module is None or importlib.util.find_spec(self.module) is not None:
            return None
        return f"needs the '{self.module}' package, which is not installed: {self.install}"

    def create(self, params: Sequence[torch.nn.Parameter], learning_rate: float, weight_decay: float,
               options: BaseConfig) -> torch.optim.Optimizer:
        problem = self.missing()
        if problem:
            raise ConfigError(f"config key 'optimizer' is {self.name}, which {problem}")
        return self.build(params, learning_rate, weight_decay, options)

    @contextlib.contextmanager
    def averaged_weights(self, optimizer: torch.optim.Optimizer, params: Sequence[torch.Tensor]) -> Iterator[None]:
        """Within the block the parameters hold what should be saved or sampled: for schedule-free optimizers
        the averaged weights x (`optimizer.eval()`); afterwards exactly the weights training left (y), so
        sampling or saving mid-run changes nothing (train() after eval() is not bit-exact in floating point)."""
        if not self.schedule_free:
            yield
            return
        import torch

        kept = [p.detach().clone() for p in params]
        optimizer.eval()
        try:
            yield
        finally:
            optimizer.train()
            with torch.no_grad():
                for param, value in zip(params, kept):
                    param.copy_(value)


def as_groups(params: Sequence[Any], lr: float) -> list[dict[str, Any]]:
    """Parameters or parameter groups as groups that each name their "lr" (for factories that split them)."""
    params = list(params)
    if params and isinstance(params[0], dict):
        return [{**group, "lr": group.get("lr", lr)} for group in params]
    return [{"params": params, "lr": lr}]


def betas_in_range(options: BaseConfig, path: str, *names: str) -> None:
    """Each named beta in [0, 1), naming `optimizer_options.<NAME>.<beta>` otherwise."""
    for name in names:
        value = getattr(options, name)
        if not 0.0 <= value < 1.0:
            raise ConfigError(f"config key '{path}.{name}' must be at least 0 and below 1, got {value}")


def positive(options: BaseConfig, path: str, *names: str) -> None:
    for name in names:
        value = getattr(options, name)
        if value <= 0:
            raise ConfigError(f"config key '{path}.{name}' must be greater than 0, got {value}")
