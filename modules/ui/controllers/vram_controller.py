"""The VRAM estimate beside Start (the host RAM estimate on a second line), kept current as fields change: each new
config is estimated on a worker
thread (the first estimate of a model folder takes a few seconds; later ones are cached), and the view polls
`text()`."""
from __future__ import annotations

import gc
import json
import logging
import threading
import time

from modules.ui.controllers.config_controller import ConfigController
from modules.util.errors import UserError

logger = logging.getLogger(__name__)

ESTIMATING = "VRAM: estimating…"
SETTLE_S = 0.3


class VramEstimate:
    def __init__(self, config: ConfigController, gpu_gib: float | None = None, detect: bool = True,
                 capability: tuple[int, int] | None = None):
        self.config = config
        self.gpu_gib = gpu_gib
        self.capability = capability  # compute capability AUTO plans for (None: the detected GPU's, if detect)
        self.detect = detect  # take the GPU's size from torch when gpu_gib is not given
        self._lock = threading.Lock()
        self._result: tuple[str, str, dict, float | None] = ("", "", {}, None)  # (config key, text, AUTO's changes, GPU)
        self._running: str | None = None
        self._pending: tuple[str, float] = ("", 0.0)  # the newest config key and when it appeared

    def text(self) -> str:
        """The estimate of the config as it is now. While a field holds an error the estimate stays, made with that
        field at its default (and says so); '' only when no config near it checks."""
        note = ""
        try:
            train = self.config.build()
        except UserError:
            train = self.config.build_nearest()
            if train is None:
                self.config.set_auto_choices({}, None)  # no plan for a config that does not check
                return ""
            note = " (fields with errors counted at their defaults)"
        key = json.dumps([train.to_dict(), self.capability], sort_keys=True, default=str)
        with self._lock:
            if self._result[0] == key:
                self.config.set_auto_choices(*self._result[2:])  # the Tk thread: the switches show AUTO's choices
                first, _, rest = self._result[1].partition("\n")
                return first + note + ("\n" + rest if rest else "")
            now = time.monotonic()
            if self._pending[0] != key:  # typing: wait until the config stays the same a moment
                self._pending = (key, now)
            elif self._running != key and now - self._pending[1] >= SETTLE_S:
                self._running = key
                # Garbage of destroyed widgets must be freed here, on the Tk thread: a collection in the worker
                # would run Tk objects' __del__ there, which Tk refuses or stalls on.
                gc.collect()
                threading.Thread(target=self._estimate, args=(train, key), daemon=True).start()
        return ESTIMATING

    def wait(self, timeout: float = 60.0) -> str:
        """Blocks until the current config's estimate is in (tests, scripts)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            text = self.text()
            if text != ESTIMATING:
                return text
            time.sleep(0.05)
        raise TimeoutError("the VRAM estimate took too long")

    def _estimate(self, train, key: str) -> None:
        from modules.config.e2v_dataset_config import with_dataset_shapes
        from modules.modelSetup.memory_estimate import detected_gpu_gib
        from modules.modelSetup.memory_plan import detected_capability, planned_estimate

        changes: dict = {}
        gpu = None
        try:
            gpu = self.gpu_gib if self.gpu_gib is not None else (
                train.gpu_memory_gib or (detected_gpu_gib() if self.detect else None))
            capability = self.capability or (detected_capability() if self.detect else None)
            # E2V: the dataset's resolution and frames
            result, plan = planned_estimate(with_dataset_shapes(train), gpu, capability=capability)
            verdict = "" if result.fits is None else (f", fits {gpu:.0f} GiB" if result.fits
                                                      else f", over {gpu:.0f} GiB: {result.suggestions[0]}"
                                                      if result.suggestions else f", over {gpu:.0f} GiB")
            phases = " / ".join(f"{name} {sum(terms.values()):.1f}" for name, terms in result.phases.items())
            text = f"VRAM ≈ {result.peak_gib:.1f} GiB ({phases}){verdict}"
            if plan.estimate is not None:
                text += f"; {plan.short()}"
                changes = dict(plan.changes)
            text += f"\n{plan.host.line()}" + (f" — AUTO will not start: {plan.refusal}" if plan.refusal else "")
        except UserError as e:  # e.g. a base_model_name without configs
            text = f"VRAM: no estimate ({e})"
        except Exception as e:  # noqa: BLE001 - a config the model cannot read must not leave it "estimating"
            logger.warning("VRAM estimate failed: %s: %s", type(e).__name__, e)
            text = f"VRAM: no estimate ({type(e).__name__}: {e})"
        with self._lock:
            if self._running == key:
                self._result, self._running = (key, text, changes, gpu), None
