"""An exponential moving average of the trained weights: e ← decay·e + (1 − decay)·w every
`ema_update_step_interval` optimizer steps, kept in float32 on the train device (GPU) or in host memory
(CPU; pinned, and the copy from the GPU runs asynchronously: its average is folded in at the next update or
read, so the step does not wait for it)."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


class WeightEMA:
    def __init__(self, params: dict[str, torch.nn.Parameter], decay: float, on_host: bool):
        self.params, self.decay, self.on_host = params, decay, on_host
        pin = on_host and torch.cuda.is_available()
        self.shadow = {name: self._empty(p, pin) for name, p in params.items()}
        self.staging = {name: self._empty(p, pin) for name, p in params.items()} if on_host else {}
        self._pending: torch.cuda.Event | None = None  # a host copy in flight, not yet folded in
        self._staged = False
        self.reset()

    def _empty(self, param: torch.Tensor, pin: bool) -> torch.Tensor:
        device = "cpu" if self.on_host else param.device
        return torch.empty(param.shape, dtype=torch.float32, device=device, pin_memory=pin)

    def reset(self) -> None:
        """The average starts at the current weights (a new run, or a resume from a backup without EMA)."""
        with torch.no_grad():
            for name, param in self.params.items():
                self.shadow[name].copy_(param.detach().float())
        self._pending, self._staged = None, False

    @torch.no_grad()
    def update(self) -> None:
        self._fold()
        if not self.on_host:
            for name, param in self.params.items():
                self.shadow[name].lerp_(param.detach().float(), 1.0 - self.decay)
            return
        for name, param in self.params.items():  # to pinned memory without blocking; folded in later
            self.staging[name].copy_(param.detach(), non_blocking=True)
        self._staged = True
        if any(p.is_cuda for p in self.params.values()):
            self._pending = torch.cuda.Event()
            self._pending.record()
        else:
            self._fold()

    def _fold(self) -> None:
        if not self._staged:
            return
        if self._pending is not None:
            self._pending.synchronize()
        for name, staged in self.staging.items():
            self.shadow[name].lerp_(staged, 1.0 - self.decay)
        self._pending, self._staged = None, False

    def state_dict(self) -> dict[str, torch.Tensor]:
        self._fold()
        return {name: tensor.detach().cpu().clone() for name, tensor in self.shadow.items()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        missing = sorted(set(self.shadow) - set(state))
        if missing:
            raise KeyError(f"the backup's EMA lacks {missing[0]} (and {len(missing) - 1} more)")
        with torch.no_grad():
            for name, tensor in self.shadow.items():
                tensor.copy_(state[name])
        self._pending, self._staged = None, False

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """Within the block the parameters hold the averaged weights; afterwards exactly the trained ones."""
        self._fold()
        kept = {name: p.detach().clone() for name, p in self.params.items()}
        with torch.no_grad():
            for name, param in self.params.items():
                param.copy_(self.shadow[name].to(param.device, param.dtype))
        try:
            yield
        finally:
            with torch.no_grad():
                for name, param in self.params.items():
                    param.copy_(kept[name])
