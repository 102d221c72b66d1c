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

LOSS, LR, VALIDATION = "loss", "lr", "loss/validation"
DEFAULT_SMOOTHING = 0.6  # TensorBoard's default

Point = tuple[float, float]


class ScalarHistory:
    """Every (step, value) received for each scalar name, in arrival order (steps increase within a run)."""

    def __init__(self) -> None:
        self.series: dict[str, list[Point]] = {}
        self.version = 0  # changes with every change (views compare it)

    def add(self, name: str, value: float, step: int) -> None:
        """A new value. Non-finite values are dropped (the trainer skips those steps); a value for a step already
        held replaces it (a step logged twice, e.g. validation after "Sample now" and the schedule)."""
        if not math.isfinite(value):
            return
        points = self.series.setdefault(name, [])
        while points and points[-1][0] >= step:  # a resumed run starting before the last held step
            points.pop()
        points.append((float(step), float(value)))
        self.version += 1

    def points(self, name: str) -> list[Point]:
        return list(self.series.get(name, ()))

    def clear(self) -> None:
        self.series.clear()
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


def read_tensorboard_scalars(logdir: str | os.PathLike, history: ScalarHistory) -> bool:
    """Replace `history` with the scalars of a run's event files in `logdir` (its tensorboard folder), oldest
    file first: each start of the run (a resume) begins a new file, and its values replace those the earlier
    file holds from the resumed step on. False, leaving `history` as it is, when there is none or tensorboard is
    not installed."""
    files = sorted(Path(logdir).glob("events.out.tfevents.*"), key=lambda p: (p.stat().st_mtime, p.name)) \
        if Path(logdir).is_dir() else []
    if not files:
        return False
    try:
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
        from tensorboard.util.tensor_util import make_ndarray
    except ImportError:
        return False
    values: list[tuple[str, float, int]] = []
    for file in files:
        try:
            for event in EventFileLoader(str(file)).Load():
                for value in event.summary.value:  # the loader turns add_scalar's simple values into scalar tensors
                    if value.HasField("simple_value"):
                        values.append((value.tag, float(value.simple_value), int(event.step)))
                    elif value.metadata.plugin_data.plugin_name == "scalars" and value.HasField("tensor"):
                        values.append((value.tag, float(make_ndarray(value.tensor)), int(event.step)))
        except Exception:  # noqa: BLE001 - a log being written or cut short: show what was read
            continue
    history.clear()
    for name, value, step in values:
        history.add(name, value, step)
    return True
