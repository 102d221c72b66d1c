"""What one written sample is: its video, its contact sheet, the settings it was generated with, and when in
the run it was made. One definition for the three places that meet it: the sampler writes it as a JSON sidecar
beside the video (`step-00000010-0.json` next to `step-00000010-0.mp4` and `.png`), the trainer hands it to its
`on_sample` callback, and the GUI's sample viewer shows it (live from the callback, earlier ones from the
sidecars in the run folder's `samples/`).

The sidecar names the video and the contact sheet relative to its own folder, so a moved workspace still reads.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from modules.util.atomic import atomic_write_text
from modules.util.run_folder import SAMPLES_DIR

logger = logging.getLogger(__name__)

SIDECAR_SUFFIX = ".json"
FORMAT_VERSION = 1


@dataclasses.dataclass(frozen=True)
class SampleRecord:
    video: Path  # the mp4 (or .gif / .webp)
    contact_sheet: Path  # the PNG strip beside it (E2V: the reference frames, then the generated ones)
    prompt: str
    negative_prompt: str = ""
    image: str = ""  # the first-frame image of an I2V sample
    elements: tuple[str, ...] = ()  # E2V element images, in layout order
    frames: int = 0
    height: int = 0
    width: int = 0
    steps: int = 0  # denoising steps
    cfg_scale: float = 0.0
    sampler: str = ""  # ComfyUI's sampler name, or diffusers_*
    scheduler: str = ""  # ComfyUI's sigma schedule
    shift: float | None = None  # the flow shift it ran at (the default resolved: 8, or the model folder's)
    seed: int = 0
    fps: float = 16.0
    step: int | None = None  # the training step it was sampled at (None: outside a run, e.g. scripts/sample.py)
    epoch: int | None = None
    index: int = 0  # its position in the run's sample list
    written_at: float = 0.0  # time.time() when written

    @classmethod
    def of(cls, sample: Any, video: str | os.PathLike, fps: float, step: int | None = None,
           epoch: int | None = None, index: int = 0) -> "SampleRecord":
        """The record of `sample` (a SampleConfig) written to `video`, its contact sheet beside it."""
        video = Path(video)
        return cls(video=video, contact_sheet=video.with_suffix(".png"), prompt=sample.prompt,
                   negative_prompt=sample.negative_prompt, image=sample.image,
                   elements=tuple(str(path) for path in sample.elements), frames=sample.frames,
                   height=sample.height, width=sample.width, steps=sample.steps, cfg_scale=float(sample.cfg_scale),
                   sampler=sample.sampler, scheduler=sample.scheduler, shift=float(sample.shift) if sample.shift else None,
                   seed=sample.seed, fps=float(fps), step=step, epoch=epoch, index=index, written_at=time.time())

    @property
    def sidecar(self) -> Path:
        return sidecar_path(self.video)

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["video"], data["contact_sheet"] = self.video.name, self.contact_sheet.name
        data["elements"] = list(self.elements)
        return {"version": FORMAT_VERSION, **data}

    @classmethod
    def from_json(cls, data: dict[str, Any], folder: str | os.PathLike) -> "SampleRecord":
        """The record a sidecar in `folder` holds; unknown keys are ignored (a newer writer may add some)."""
        names = {field.name for field in dataclasses.fields(cls)}
        values = {key: value for key, value in data.items() if key in names}
        for key in ("video", "contact_sheet", "prompt"):
            if not isinstance(values.get(key), str):
                raise ValueError(f"'{key}' is missing or not a string")
        values["video"] = Path(folder) / values["video"]
        values["contact_sheet"] = Path(folder) / values["contact_sheet"]
        values["elements"] = tuple(str(path) for path in values.get("elements") or ())
        return cls(**values)

    def write(self) -> Path:
        """Write the sidecar atomically (after the video and the sheet: a sidecar means both are complete)."""
        atomic_write_text(self.sidecar, json.dumps(self.to_json(), indent=1) + "\n")
        return self.sidecar

    @classmethod
    def read(cls, path: str | os.PathLike) -> "SampleRecord":
        path = Path(path)
        return cls.from_json(json.loads(path.read_text(encoding="utf-8")), path.parent)


def samples_folder(run_dir: str | os.PathLike) -> Path:
    """Where a run writes its samples: `<run folder>/samples` (util/run_folder.py)."""
    return Path(run_dir) / SAMPLES_DIR


def sample_video_path(run_dir: str | os.PathLike, step: int, index: int) -> Path:
    """The video of sample `index` (its place in the sample list) at training step `step` of the run."""
    return samples_folder(run_dir) / f"step-{step:08d}-{index}.mp4"


def sidecar_path(video: str | os.PathLike) -> Path:
    return Path(video).with_suffix(SIDECAR_SUFFIX)


def read_records(folder: str | os.PathLike) -> list[SampleRecord]:
    """Every readable sample record in `folder` whose video exists, oldest step first. A sidecar that cannot
    be read (half-copied, foreign) is skipped with a debug line: the viewer shows what it can."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    records = []
    for path in sorted(folder.glob("*" + SIDECAR_SUFFIX)):
        try:
            record = SampleRecord.read(path)
        except (OSError, ValueError, TypeError) as e:
            logger.debug("not a sample record: %s (%s)", path, e)
            continue
        if record.video.is_file():
            records.append(record)
    return sorted(records, key=lambda r: (r.step if r.step is not None else -1, r.index, r.written_at))
