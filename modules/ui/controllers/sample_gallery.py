"""The samples the viewer can show, and which one it shows: pure logic, no Tk.

Records come from two places, read the same way (`modules/util/sample_record.py`): the trainer's `on_sample`
callback while a run goes (through the training controller's queue), and the sidecars already in
`workspace_dir/samples` (earlier steps, earlier runs). The viewer shows one sample at a time, chosen by training
step and by its index in the sample list, so the same prompt can be compared across steps. While the user looks
at the newest step, a new sample moves the view to it ("follow"); once they browse back, it stays where they are.

`Playback` maps elapsed time to a frame index of the shown video (looping), so the view only draws.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from modules.util.resolution_text import clip_text
from modules.util.sample_record import SampleRecord, read_records

NO_STEP = -1  # the step key of a record made outside a run (scripts/sample.py writes none; kept for safety)


def step_key(record: SampleRecord) -> int:
    return NO_STEP if record.step is None else record.step


class SampleGallery:
    def __init__(self) -> None:
        self._records: dict[tuple[int, int], SampleRecord] = {}  # (step, index) -> the newest record there
        self.folder: Path | None = None
        self.step: int | None = None  # the shown step
        self.index: int = 0  # the shown sample of that step
        self.wanted_index: int = 0  # the sample the user chose: kept when a later step is shown
        self.follow = True  # a new sample at a later step is shown at once
        self.version = 0  # changes whenever what the viewer should show changes (views compare it)

    # --- filling ---------------------------------------------------------------------------------------
    def load_folder(self, folder: str | os.PathLike | None) -> None:
        """Show the samples of `folder` (workspace_dir/samples); the newest step is shown. Reloading the same
        folder keeps the current choice."""
        folder = Path(folder) if folder else None
        same = folder == self.folder
        if not same:
            self._records.clear()
            self.step, self.index, self.wanted_index, self.follow = None, 0, 0, True
        self.folder = folder
        for record in read_records(folder) if folder is not None else []:
            self._records[(step_key(record), record.index)] = record
        if not same or self.step is None:
            self._show_latest()
        self.version += 1

    def add(self, record: SampleRecord) -> None:
        """A sample just written (the trainer's callback). Shown when following, or when nothing is shown; a sample of
        another run than the one shown (the runs tab shows another) is not this gallery's."""
        if self.folder is not None and Path(record.video).resolve().parent != self.folder.resolve():
            return
        key = (step_key(record), record.index)
        self._records[key] = record
        if self.follow or self.step is None:
            self.step = key[0]
            indexes = self.indexes()
            self.index = self.wanted_index if self.wanted_index in indexes else indexes[0]
        self.version += 1

    # --- what there is ------------------------------------------------------------------------------------
    @property
    def records(self) -> list[SampleRecord]:
        return [self._records[key] for key in sorted(self._records)]

    def __len__(self) -> int:
        return len(self._records)

    def steps(self) -> list[int]:
        return sorted({step for step, _ in self._records})

    def indexes(self, step: int | None = None) -> list[int]:
        """The sample indexes written at `step` (default: the shown step)."""
        step = self.step if step is None else step
        return sorted(index for s, index in self._records if s == step)

    def current(self) -> SampleRecord | None:
        if self.step is None:
            return None
        return self._records.get((self.step, self.index))

    def history(self, index: int | None = None) -> list[SampleRecord]:
        """The sample `index` (default: the shown one) at every step it was written, oldest first: what changed."""
        index = self.index if index is None else index
        return [self._records[key] for key in sorted(self._records) if key[1] == index]

    # --- choosing -------------------------------------------------------------------------------------------
    def select_step(self, step: int) -> None:
        """Show `step`; the same sample index when that step has it, else its first. The newest step follows."""
        steps = self.steps()
        if step not in steps:
            raise ValueError(f"no sample at step {step}")
        self.step = step
        indexes = self.indexes(step)
        self.index = self.wanted_index if self.wanted_index in indexes else indexes[0]
        self.follow = step == steps[-1]
        self.version += 1

    def select_index(self, index: int) -> None:
        if index not in self.indexes():
            raise ValueError(f"no sample {index} at step {self.step}")
        self.index = self.wanted_index = index
        self.version += 1

    def previous_step(self) -> bool:
        """One step back; False at the oldest."""
        return self._move(-1)

    def next_step(self) -> bool:
        """One step forward; False at the newest."""
        return self._move(1)

    def _move(self, delta: int) -> bool:
        steps = self.steps()
        if self.step not in steps:
            return False
        position = steps.index(self.step) + delta
        if not 0 <= position < len(steps):
            return False
        self.select_step(steps[position])
        return True

    def _show_latest(self) -> None:
        steps = self.steps()
        if not steps:
            self.step, self.index, self.follow = None, 0, True
            return
        self.select_step(steps[-1])


def step_label(step: int) -> str:
    return "outside a run" if step == NO_STEP else f"step {step}"


def record_title(record: SampleRecord) -> str:
    """One line above the player: step, epoch, sample index, size and the settings it was made with."""
    where = step_label(step_key(record)) + (f" · epoch {record.epoch + 1}" if record.epoch is not None else "")
    size = clip_text(record.frames, record.height, record.width)
    return f"{where} · sample {record.index} · {size} · {record.steps} steps · CFG {record.cfg_scale:g} · seed {record.seed}"


@dataclasses.dataclass
class Playback:
    """Which frame of a looping video to show `elapsed` seconds after playback started (or resumed)."""
    frame_count: int
    fps: float
    paused: bool = False
    frame: int = 0  # the frame shown while paused, and where playing resumes
    _origin: float = 0.0  # the clock time at which `frame` 0 would have played

    def start(self, now: float) -> None:
        self._origin = now - self.frame / self._fps()
        self.paused = False

    def pause(self, now: float) -> None:
        self.frame = self.frame_at(now)
        self.paused = True

    def toggle(self, now: float) -> None:
        self.start(now) if self.paused else self.pause(now)

    def seek(self, frame: int, now: float) -> None:
        self.frame = frame % max(1, self.frame_count)
        self._origin = now - self.frame / self._fps()

    def frame_at(self, now: float) -> int:
        if self.frame_count <= 0:
            return 0
        if self.paused:
            return self.frame
        return int((now - self._origin) * self._fps() + 1e-6) % self.frame_count  # 1e-6: float time stamps

    def delay_ms(self) -> int:
        """How long one frame stays (the view's timer)."""
        return max(10, round(1000 / self._fps()))

    def _fps(self) -> float:
        return self.fps if self.fps > 0 else 16.0


def fit_size(width: int, height: int, max_width: int, max_height: int, max_upscale: float = 8.0) -> tuple[int, int]:
    """The largest size of the same aspect ratio inside max_width × max_height; small images (a tiny test
    sample of 32 × 32) are enlarged, by at most `max_upscale`."""
    if width <= 0 or height <= 0:
        return max(1, max_width), max(1, max_height)
    scale = min(max_width / width, max_height / height, max_upscale)
    return max(1, round(width * scale)), max(1, round(height * scale))
