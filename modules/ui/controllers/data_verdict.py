"""The data verdict beside each concept: what start-up's one data check (dataLoader/verdict.py, the same that
`dataset_stats.py`, *Count clips* and the trainer use) says of it — "5 files: 3 usable, 2 skipped (missing file: 2)",
or the reason it stops the run (an Animate-2 copying trap, no usable sample) — shown before Start.

The check probes every clip (about a second per hundred, cached with the latents), so it runs on a worker thread
for the config as it was when asked; the Tk thread reads the result when it is there (`poll`). Once the config
changes it runs again.
"""
from __future__ import annotations

import gc
import json
import threading
from typing import Any

from modules.util.errors import UserError

CHECKING = "checking the data…"


class ConceptVerdicts:
    def __init__(self) -> None:
        self.lines: list[tuple[str, bool]] = []  # per concept: (line, is_error); [] while not checked
        self.checked_for = ""  # the config the lines are of (its JSON)
        self._asked_for = ""
        self._thread: threading.Thread | None = None
        self._result: list[tuple[str, bool]] | None = None
        self._lock = threading.Lock()

    @property
    def checking(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def line(self, index: int) -> tuple[str, bool]:
        if 0 <= index < len(self.lines):
            return self.lines[index]
        return (CHECKING, False) if self.checking else ("", False)

    def errors(self) -> dict[str, str]:
        """concepts[i] -> why that concept stops the run (start-up refuses it): blocks Start, marks the tab."""
        return {f"concepts[{i}]": line for i, (line, error) in enumerate(self.lines) if error}

    def ask(self, config: Any, data: dict) -> None:
        """Check `config` (a TrainConfig; None while the editor's config has errors) unless its verdicts are known
        or being made. `data`: its dict, whose JSON says whether it changed."""
        signature = signature_of(data)
        if signature in (self.checked_for, self._asked_for) or self.checking:
            return
        if config is None or config.dataset_config or not config.concepts:  # E2V datasets: their own check
            self.lines, self.checked_for = [], signature
            return
        self._asked_for = signature
        gc.collect()  # on the Tk thread: a collection in the worker would run Tk objects' __del__ there
        self._thread = threading.Thread(target=self._work, args=(config, signature), name="data verdict",
                                        daemon=True)
        self._thread.start()

    def poll(self) -> bool:
        """Take the worker's result (Tk thread); True when new lines arrived."""
        with self._lock:
            result, self._result = self._result, None
        if result is None:
            return False
        self.lines, self.checked_for, self._asked_for = result, self._asked_for, ""
        return True

    def wait(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _work(self, config: Any, signature: str) -> None:
        result = verdict_lines(config)
        with self._lock:
            self._result = result


def signature_of(data: dict) -> str:
    """Which config a verdict is of: its JSON."""
    return json.dumps(data, sort_keys=True, default=str)


def verdict_lines(config: Any) -> list[tuple[str, bool]]:
    """(line, is_error) per concept of `config`: the data verdict's one line; a concept that stops the run is an
    error. A problem the check cannot get past (the base folder) is every concept's line."""
    from modules.dataLoader.verdict import concept_verdict  # here: it probes clips (torch, av, cv2)

    count = 1 if isinstance(config.concepts, str) else len(config.concepts)
    lines = []
    for index in range(count):
        if not isinstance(config.concepts, str) and not config.concepts[index].enabled:
            lines.append(("disabled: not trained on", False))
            continue
        try:
            verdict = concept_verdict(config, index)
            lines.append((verdict.summary(), bool(verdict.error)))
        except UserError as e:
            lines.append((f"cannot check this concept: {e}", False))
        except Exception as e:  # noqa: BLE001 - a check that fails must not take the editor down
            lines.append((f"cannot check this concept: {type(e).__name__}: {e}", False))
    return lines
