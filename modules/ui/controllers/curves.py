"""Live training curves: the values the trainer logs, smoothing, and charts laid out in pixels. No Tk.

The values are the trainer's own scalars — every one it writes to tensorboard goes through
`GenericTrainer._scalar`, which also calls `TrainCallbacks.on_scalar` (with tensorboard on or off) — so the
curves show exactly what TensorBoard shows: "loss" (each optimizer step's loss), "lr" (the first parameter
group's learning rate), "loss/validation" when validation concepts exist.

Why a canvas plot of our own and not matplotlib: matplotlib is not a dependency (it would add ~40 MB and a
compiled package to every install for two line charts). The charts need lines, ticks and a legend; all the
arithmetic is here, where it is unit-tested, and the view (modules/ui/views/curves_tab.py) only draws the
pixel coordinates this module returns.
"""
from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Iterable, Sequence

from modules.util.run_folder import read_run

LOSS, LR, VALIDATION = "loss", "lr", "loss/validation"
DEFAULT_SMOOTHING = 0.6  # TensorBoard's default

Point = tuple[float, float]


class ScalarHistory:
    """A run's curves: what its event files hold (every start of the run: `load_run`) and, while this window trains
    it, the values the trainer sends (`add`), which replace the files' from the first step they cover: a resumed
    run shows its whole history at once, and the steps it trains again after its backup replace the old ones."""

    def __init__(self) -> None:
        self.logged: dict[str, list[Point]] = {}  # from the shown run's event files
        self.live: dict[str, list[Point]] = {}  # sent by the trainer of this window since its start
        self.live_from: float | None = None  # the first step of the live values
        self.run: Path | None = None  # the run folder shown (None: none loaded)
        self.live_run: Path | None = None  # the run the live values belong to
        self.version = 0  # changes with every change (views compare it)

    def add(self, name: str, value: float, step: int) -> None:
        """A new value from the trainer. Non-finite values are dropped (the trainer skips those steps); a value for
        a step already held replaces it and the ones after (a step logged twice: validation after "Sample now" and
        the schedule; a resume starting before the last held step)."""
        if not math.isfinite(value):
            return
        points = self.live.setdefault(name, [])
        while points and points[-1][0] >= step:
            points.pop()
        points.append((float(step), float(value)))
        self.live_from = float(step) if self.live_from is None else min(self.live_from, float(step))
        self.version += 1

    def points(self, name: str) -> list[Point]:
        logged = self.logged.get(name, [])
        if self.run != self.live_run:  # another run is shown than the one this window trains
            return list(logged)
        live = self.live.get(name, [])
        cut = self.live_from if self.live_from is not None else math.inf
        return [p for p in logged if p[0] < cut] + live

    def names(self) -> list[str]:
        live = self.live if self.run == self.live_run else {}
        return sorted(set(self.logged) | set(live))

    def start_run(self, run_folder: str | os.PathLike) -> bool:
        """The run this window trains (its folder, once the trainer chose it; again when the trainer follows it to
        a new name): the live values are its, shown over what its earlier starts logged."""
        self.live_run = Path(run_folder)
        return self.load_run(run_folder)

    def load_run(self, run_folder: str | os.PathLike) -> bool:
        """Show `run_folder`'s curves: every start's event files in its tensorboard folder (none: no logged values),
        with the live values when it is the run this window trains. False when it has no event file."""
        values = read_event_scalars(Path(run_folder) / "tensorboard")
        self.run = Path(run_folder)
        self.logged = values or {}
        self.version += 1
        return values is not None

    def replace(self, series: dict[str, list[Point]]) -> None:
        """Hold exactly `series` (no live values)."""
        self.logged, self.live, self.live_from = series, {}, None
        self.version += 1

    def clear(self) -> None:
        self.logged, self.live, self.live_from = {}, {}, None
        self.run = self.live_run = None
        self.version += 1


def smooth(values: Sequence[float], weight: float) -> list[float]:
    """TensorBoard's smoothing: an exponential moving average with `weight` (0 = none, <1), debiased so the first
    values are not pulled towards zero."""
    if not 0 <= weight < 1:
        raise ValueError(f"smoothing weight must be in [0, 1), got {weight}")
    smoothed, last = [], 0.0
    for count, value in enumerate(values, start=1):
        last = last * weight + (1 - weight) * value
        smoothed.append(last / (1 - weight ** count))
    return smoothed


def nice_step(span: float, max_ticks: int) -> float:
    """The tick spacing 1, 2 or 5 × 10^k that puts at most `max_ticks` ticks on `span`."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / max(1, max_ticks)
    magnitude = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if factor * magnitude >= raw:
            return factor * magnitude
    return 10 * magnitude


def nice_ticks(low: float, high: float, max_ticks: int = 5, integer: bool = False) -> list[float]:
    """Round tick values inside [low, high]."""
    spacing = nice_step(high - low, max_ticks)
    if integer:
        spacing = max(1.0, round(spacing))
    first = math.ceil(low / spacing - 1e-9) * spacing
    ticks, value = [], first
    while value <= high + spacing * 1e-9:
        ticks.append(0.0 if abs(value) < spacing * 1e-9 else value)
        value = first + len(ticks) * spacing
    return ticks


def format_value(value: float, spacing: float) -> str:
    """A tick label with as many decimals as the spacing needs (scientific for tiny or huge numbers: an lr)."""
    if value == 0:
        return "0"
    if abs(value) < 1e-3 or abs(value) >= 1e6:
        return f"{value:.1e}".replace("e-0", "e-").replace("e+0", "e")
    decimals = max(0, -math.floor(math.log10(spacing))) if spacing > 0 else 0
    return f"{value:.{decimals}f}"


def value_range(values: Iterable[float], pad: float = 0.05) -> tuple[float, float]:
    """[min, max] of the values widened by `pad` of the span (a flat series gets a visible band)."""
    values = list(values)
    if not values:
        return 0.0, 1.0
    low, high = min(values), max(values)
    span = high - low
    if span <= 0:
        span = abs(high) * 0.2 or 1.0
        return low - span / 2, high + span / 2
    return low - span * pad, high + span * pad


@dataclasses.dataclass(frozen=True)
class Box:
    """The plotting area inside the chart, in pixels (y grows downwards, as on a canvas)."""
    left: float
    top: float
    right: float
    bottom: float


def to_pixels(points: Sequence[Point], x_range: tuple[float, float], y_range: tuple[float, float],
              box: Box) -> list[Point]:
    (x0, x1), (y0, y1) = x_range, y_range
    sx = (box.right - box.left) / (x1 - x0) if x1 > x0 else 0.0
    sy = (box.bottom - box.top) / (y1 - y0) if y1 > y0 else 0.0
    return [(box.left + (x - x0) * sx, box.bottom - (y - y0) * sy) for x, y in points]


def decimate(pixels: Sequence[Point], max_points: int) -> list[Point]:
    """At most about `max_points` points drawing the same line: where several fall in one pixel column, keep the
    first, lowest, highest and last of them (the envelope stays: no spike disappears)."""
    if len(pixels) <= max_points:
        return list(pixels)
    kept: list[Point] = []
    column: list[Point] = []

    def flush() -> None:
        if not column:
            return
        chosen = [column[0], min(column, key=lambda p: p[1]), max(column, key=lambda p: p[1]), column[-1]]
        for point in chosen:
            if not kept or kept[-1] != point:
                kept.append(point)

    current = None
    for point in pixels:
        key = int(point[0])
        if key != current:
            flush()
            column, current = [], key
        column.append(point)
    flush()
    return kept


@dataclasses.dataclass(frozen=True)
class Line:
    label: str
    style: str  # raw | smooth | validation | lr (the view picks colours and widths by style)
    data: tuple[Point, ...]  # (step, value): what is plotted
    pixels: tuple[Point, ...]  # where it is drawn


@dataclasses.dataclass(frozen=True)
class Tick:
    pixel: float
    label: str


@dataclasses.dataclass(frozen=True)
class Chart:
    title: str
    width: int
    height: int
    box: Box
    lines: tuple[Line, ...]
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    empty_text: str = ""  # shown instead when there is nothing to draw

    def line(self, label: str) -> Line | None:
        return next((line for line in self.lines if line.label == label), None)


MARGIN = Box(left=64, top=28, right=16, bottom=28)  # room for the y labels, the title, the x labels


def layout_chart(title: str, series: Sequence[tuple[str, str, Sequence[Point]]], width: int, height: int,
                 empty_text: str = "no values yet") -> Chart:
    """A chart of `series` ((label, style, points) each) in a `width` × `height` pixel area: shared axes over
    every series, round ticks, each line in pixels (decimated to the plot's width)."""
    box = Box(MARGIN.left, MARGIN.top, max(MARGIN.left + 1, width - MARGIN.right),
              max(MARGIN.top + 1, height - MARGIN.bottom))
    drawn = [(label, style, list(points)) for label, style, points in series if points]
    if not drawn:
        return Chart(title, width, height, box, (), (), (), empty_text)
    xs = [x for _, _, points in drawn for x, _ in points]
    ys = [y for _, _, points in drawn for _, y in points]
    x_range = (min(xs), max(xs)) if max(xs) > min(xs) else (min(xs) - 1, max(xs) + 1)
    y_range = value_range(ys)
    columns = max(1, int(box.right - box.left))
    lines = tuple(Line(label, style, tuple(points),
                       tuple(decimate(to_pixels(points, x_range, y_range, box), 4 * columns)))
                  for label, style, points in drawn)
    x_values = nice_ticks(*x_range, max_ticks=max(2, columns // 90), integer=True)
    y_values = nice_ticks(*y_range, max_ticks=max(2, int(box.bottom - box.top) // 40))
    x_spacing = x_values[1] - x_values[0] if len(x_values) > 1 else 1.0
    y_spacing = y_values[1] - y_values[0] if len(y_values) > 1 else abs(y_range[1] - y_range[0])
    x_ticks = tuple(Tick(px, format_value(x, x_spacing))
                    for x, (px, _) in zip(x_values, to_pixels([(x, y_range[0]) for x in x_values], x_range, y_range, box)))
    y_ticks = tuple(Tick(py, format_value(y, y_spacing))
                    for y, (_, py) in zip(y_values, to_pixels([(x_range[0], y) for y in y_values], x_range, y_range, box)))
    return Chart(title, width, height, box, lines, x_ticks, y_ticks)


def loss_chart(history: ScalarHistory, smoothing: float, width: int, height: int) -> Chart:
    """Raw and smoothed loss, and the validation loss when there is one."""
    raw = history.points(LOSS)
    smoothed = list(zip([x for x, _ in raw], smooth([y for _, y in raw], smoothing)))
    series = [("loss", "raw", raw), (f"smoothed ({smoothing:g})", "smooth", smoothed),
              ("validation loss", "validation", history.points(VALIDATION))]
    return layout_chart("loss", series, width, height, empty_text="the loss appears after the first training step")


def lr_chart(history: ScalarHistory, width: int, height: int) -> Chart:
    return layout_chart("learning rate", [("learning rate", "lr", history.points(LR))], width, height,
                        empty_text="the learning rate appears after the first training step")


def run_title(run_folder: Path | None) -> str:
    """The curves tab's line naming whose curves it shows."""
    if run_folder is None:
        return "no run yet"
    if read_run(run_folder) is not None:
        return f"run {run_folder.name}"
    if (run_folder / "tensorboard").is_dir():  # the flat layout of an older WanTrainer
        return f"{run_folder} (a workspace of an older WanTrainer)"
    return f"no run yet in {run_folder}"


def event_files(logdir: str | os.PathLike) -> list[Path]:
    """A tensorboard folder's event files, the first start's first: by the start time in the name (tensorboard
    writes `events.out.tfevents.<seconds>.<host>.<pid>.<n>`), then by last write, then by name."""
    folder = Path(logdir)
    files = list(folder.glob("events.out.tfevents.*")) if folder.is_dir() else []

    def order(path: Path) -> tuple[int, float, str]:
        stamp = path.name.split(".")[3] if path.name.count(".") >= 3 else ""
        try:
            written = path.stat().st_mtime
        except OSError:
            written = 0.0
        return (int(stamp) if stamp.isdigit() else 0, written, path.name)

    return sorted(files, key=order)


def read_event_scalars(logdir: str | os.PathLike) -> dict[str, list[Point]] | None:
    """Every scalar series of a run's tensorboard folder across all its starts (None: no event file, or
    tensorboard is not installed). Each start (a resume) writes a new file; its values replace every series' values
    from its first step on (the steps trained again after the backup), so a series never mixes two starts' values
    for one step. A file being written or cut short gives what it holds."""
    files = event_files(logdir)
    if not files:
        return None
    try:
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
        from tensorboard.util.tensor_util import make_ndarray
    except ImportError:
        return None
    history = ScalarHistory()
    for file in files:
        values: list[tuple[str, float, int]] = []
        try:
            for event in EventFileLoader(str(file)).Load():
                for value in event.summary.value:  # the loader turns add_scalar's simple values into scalar tensors
                    if value.HasField("simple_value"):
                        values.append((value.tag, float(value.simple_value), int(event.step)))
                    elif value.metadata.plugin_data.plugin_name == "scalars" and value.HasField("tensor"):
                        values.append((value.tag, float(make_ndarray(value.tensor)), int(event.step)))
        except Exception:  # noqa: BLE001 - a log being written or cut short: use what was read
            pass
        if not values:
            continue
        first = min(step for _, _, step in values)
        for name in list(history.live):  # this start trained from `first` on: the earlier values there are gone
            history.live[name] = [p for p in history.live[name] if p[0] < first]
        for name, value, step in values:
            history.add(name, value, step)
    return {name: points for name, points in history.live.items() if points}


def read_tensorboard_scalars(logdir: str | os.PathLike, history: ScalarHistory) -> bool:
    """Replace `history` with the scalars of a run's event files in `logdir` (its tensorboard folder; see
    `read_event_scalars`). False, leaving `history` as it is, when there is none or tensorboard is not installed."""
    values = read_event_scalars(logdir)
    if values is None:
        return False
    history.replace(values)
    return True
