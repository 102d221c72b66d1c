"""The E2V element table: plain dict rows in the dataset JSON's nested form, and a live preview.

A row is exactly what the dataset JSON holds (seed 000 / E2V_SPEC.md §1):
``{"name", "suffixes": [...], "required", "vae": {"repeat", "position", "preprocess"?},
"clip": {"preprocess"?} | false}``. The table edits these dicts in place (add / remove / reorder /
edit), checks them (unique names and positions, non-empty suffixes, known preprocess names,
repeat >= 1, the reference frames fit the clip) and previews, for a dataset folder, which file each
element matches for each video and how many samples are complete.

Matching (the loader's rule): a sample is a video (``001.mp4``) with its caption (``001.txt``); for
each element the first suffix, in list order, for which ``<base><suffix>`` exists wins; the
extension is compared case-insensitively (``001_dog.PNG`` matches ``_dog.png``).
"""
from __future__ import annotations

import copy
import dataclasses
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modules.ui.controllers.fields import BOOL, CHOICE, INT, TEXT, TEXT_LIST, FieldError, FieldSpec, parse_text

if TYPE_CHECKING:
    from modules.ui.controllers.e2v_dataset import DatasetController

PREPROCESS = ("pad_white", "center_crop", "resize", "letterbox")
DEFAULT, OFF = "default", "off"
VIDEO_EXTENSIONS = (".mp4", ".mov", ".mkv", ".webm", ".avi")
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp", ".bmp")

# Table columns: key in the row dict -> FieldSpec. "vae.preprocess" and "clip" offer "default"
# (the processor's default_preprocess: the key is absent) and "clip" also "off" (clip: false).
COLUMNS: dict[str, FieldSpec] = {
    "name": FieldSpec("name", "Name", TEXT, "Unique name of the element (main_subject, object, background, ...)."),
    "suffixes": FieldSpec("suffixes", "Suffixes", TEXT_LIST,
                          "File suffixes after the sample's base name, comma-separated; the first that exists wins.",
                          []),
    "required": FieldSpec("required", "Required", BOOL, "A sample without this element is skipped.", False),
    "vae.position": FieldSpec("vae.position", "VAE pos", INT,
                              "Place in the VAE reference clip (ascending; 0 = main subject).", 0),
    "vae.repeat": FieldSpec("vae.repeat", "Repeat", INT, "Frames this element fills in the VAE reference clip.", 1),
    "vae.preprocess": FieldSpec("vae.preprocess", "VAE prep", CHOICE,
                                "Fit to the VAE resolution; default = processors.vae.default_preprocess.",
                                DEFAULT, (DEFAULT,) + PREPROCESS),
    "clip": FieldSpec("clip", "CLIP", CHOICE,
                      "Fit to the CLIP resolution, or off to leave the element out of CLIP.",
                      DEFAULT, (DEFAULT,) + PREPROCESS + (OFF,)),
}


@dataclasses.dataclass(frozen=True)
class Problem:
    """One thing to fix; `row`/`field` place it in the table (row None: the dataset as a whole)."""

    path: str  # "elements[1].vae.position", "processors.vae.resolution"
    message: str
    row: int | None = None
    field: str = ""

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclasses.dataclass
class SampleMatch:
    base: str  # "001"
    video: str  # "001.mp4"
    caption: bool
    files: dict[str, str | None]  # element name -> matched file name (None: not found)
    missing_required: tuple[str, ...]

    @property
    def complete(self) -> bool:
        return self.caption and not self.missing_required


@dataclasses.dataclass
class Preview:
    folder: str
    samples: list[SampleMatch]
    counts: dict[str, int]  # element name -> samples where it was found
    error: str = ""

    @property
    def total(self) -> int:
        return len(self.samples)

    @property
    def complete(self) -> int:
        return sum(1 for s in self.samples if s.complete)

    def summary(self) -> str:
        if self.error:
            return self.error
        if not self.samples:
            return f"no videos in {self.folder}"
        parts = [f"{self.complete} of {self.total} samples complete"]
        parts += [f"{name} {count}/{self.total}" for name, count in self.counts.items()]
        return " · ".join(parts)


def split_suffix(suffix: str) -> tuple[str, str]:
    """'_dog.png' -> ('_dog', '.png'); a suffix without an extension matches any image extension."""
    stem, ext = os.path.splitext(suffix)
    if ext and not stem:  # ".png": no name part
        return "", ext.lower()
    return stem, ext.lower()


def scan_dataset(folder: str | os.PathLike, elements: list[dict[str, Any]]) -> Preview:
    """Which file each element matches for each video of `folder` (see the module doc for the rule)."""
    folder = Path(folder)
    names = [str(e.get("name", "")) for e in elements]
    if not str(folder) or not folder.is_dir():
        return Preview(str(folder), [], {n: 0 for n in names}, f"dataset folder '{folder}' does not exist")
    index: dict[tuple[str, str], str] = {}
    videos: list[tuple[str, str]] = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.startswith(".") or not entry.is_file():
                continue
            stem, ext = os.path.splitext(entry.name)
            index.setdefault((stem, ext.lower()), entry.name)
            if ext.lower() in VIDEO_EXTENSIONS:
                videos.append((stem, entry.name))
    videos.sort()
    samples: list[SampleMatch] = []
    counts = {n: 0 for n in names}
    for base, video in videos:
        files: dict[str, str | None] = {}
        missing: list[str] = []
        for element, name in zip(elements, names):
            found = None
            for suffix in element.get("suffixes") or []:
                if not isinstance(suffix, str) or not suffix:
                    continue
                stem, ext = split_suffix(suffix)
                for candidate in ([ext] if ext else IMAGE_EXTENSIONS):
                    found = index.get((base + stem, candidate))
                    if found:
                        break
                if found:
                    break
            files[name] = found
            if found:
                counts[name] += 1
            elif element.get("required"):
                missing.append(name)
        samples.append(SampleMatch(base, video, (base, ".txt") in index, files, tuple(missing)))
    return Preview(str(folder), samples, counts)


def new_element(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A fresh row with a free name and the next free position."""
    taken = {r.get("name") for r in rows}
    n = len(rows) + 1
    while f"element_{n}" in taken:
        n += 1
    positions = [r.get("vae", {}).get("position") for r in rows if isinstance(r.get("vae"), dict)]
    position = max([p for p in positions if isinstance(p, int)], default=-1) + 1
    return {"name": f"element_{n}", "suffixes": [f"_element{n}.png"], "required": False,
            "vae": {"repeat": 1 if not rows else 4, "position": position}, "clip": {"preprocess": "pad_white"}}


class ElementsController:
    """The element table of the selected dataset of a `DatasetController`."""

    def __init__(self, dataset: "DatasetController"):
        self.dataset = dataset
        self.pending: dict[tuple[int, str], str] = {}  # (row, column) -> text that did not parse
        self._preview_key: Any = None
        self._preview: Preview | None = None

    @property
    def rows(self) -> list[dict[str, Any]]:
        current = self.dataset.current
        if not isinstance(current.get("elements"), list):
            current["elements"] = []
        return current["elements"]

    def __len__(self) -> int:
        return len(self.rows)

    # --- structure -------------------------------------------------------------------------------
    def add(self, row: dict[str, Any] | None = None) -> int:
        self.rows.append(copy.deepcopy(row) if row is not None else new_element(self.rows))
        self._changed()
        return len(self.rows) - 1

    def remove(self, index: int) -> None:
        del self.rows[index]
        self._changed()

    def move(self, index: int, delta: int) -> int:
        """Move a row up (delta < 0) or down; its VAE position moves with it only via renumber()."""
        rows = self.rows
        target = max(0, min(len(rows) - 1, index + delta))
        rows.insert(target, rows.pop(index))
        self._changed()
        return target

    def renumber(self) -> None:
        """Set every VAE position to the row's place in the table (0, 1, 2, ...)."""
        for i, row in enumerate(self.rows):
            vae = row.get("vae") if isinstance(row.get("vae"), dict) else {}
            vae["position"] = i
            row["vae"] = vae
        self._changed()

    def _changed(self) -> None:
        self.pending.clear()
        self.dataset.changed("elements")

    # --- cells -----------------------------------------------------------------------------------
    def value(self, index: int, column: str) -> Any:
        row = self.rows[index]
        if column == "clip":
            clip = row.get("clip", {})
            if clip is False:
                return OFF
            return clip.get("preprocess", DEFAULT) if isinstance(clip, dict) else DEFAULT
        if column.startswith("vae."):
            vae = row.get("vae") if isinstance(row.get("vae"), dict) else {}
            return vae.get(column[4:], DEFAULT if column == "vae.preprocess" else None)
        return row.get(column)

    def display(self, index: int, column: str) -> Any:
        if (index, column) in self.pending:
            return self.pending[(index, column)]
        value = self.value(index, column)
        if column == "suffixes":
            return ", ".join(str(s) for s in value or [])
        if column == "required":
            return bool(value)
        return "" if value is None else str(value)

    def set(self, index: int, column: str, value: Any) -> None:
        spec = COLUMNS[column]
        try:
            parsed = parse_text(spec, value)
        except FieldError:
            self.pending[(index, column)] = value
            self.dataset.changed("elements")
            return
        self.pending.pop((index, column), None)
        row = self.rows[index]
        if column == "clip":
            if parsed == OFF:
                row["clip"] = False
            else:
                clip = row.get("clip") if isinstance(row.get("clip"), dict) else {}
                if parsed == DEFAULT:
                    clip.pop("preprocess", None)
                else:
                    clip["preprocess"] = parsed
                row["clip"] = clip
        elif column.startswith("vae."):
            vae = row.get("vae") if isinstance(row.get("vae"), dict) else {}
            if column == "vae.preprocess" and parsed == DEFAULT:
                vae.pop("preprocess", None)
            else:
                vae[column[4:]] = parsed
            row["vae"] = vae
        else:
            row[column] = parsed
        self.dataset.changed("elements")

    def error(self, index: int, column: str) -> str:
        for problem in self.problems():
            if problem.row == index and problem.field == column:
                return problem.message
        return ""

    # --- checks ------------------------------------------------------------------------------------
    def problems(self, frames: int | None = None) -> list[Problem]:
        """Everything wrong with the table; `frames` (the training clip length) bounds the repeats."""
        found: list[Problem] = []

        def add(row: int | None, column: str, message: str) -> None:
            path = f"elements[{row}].{column}" if row is not None else "elements"
            found.append(Problem(path, message, row, column))

        for (row, column), text in sorted(self.pending.items()):
            try:
                parse_text(COLUMNS[column], text)
            except FieldError as e:
                add(row, column, str(e))
        rows = self.rows
        if not rows:
            add(None, "", "add at least one element")
        names: dict[str, int] = {}
        positions: dict[int, int] = {}
        suffix_owner: dict[str, int] = {}
        total_repeat = 0
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                add(i, "name", "must be an object with name, suffixes, required, vae and clip")
                continue
            name = row.get("name")
            if not isinstance(name, str) or not name.strip():
                add(i, "name", "must not be empty")
            elif name in names:
                add(i, "name", f"'{name}' is also the name of element {names[name] + 1}: names must be unique")
            else:
                names[name] = i
            suffixes = row.get("suffixes")
            if not isinstance(suffixes, list) or not suffixes:
                add(i, "suffixes", "give at least one file suffix, e.g. _person.png")
            else:
                for suffix in suffixes:
                    if not isinstance(suffix, str) or not suffix.strip():
                        add(i, "suffixes", "a suffix must not be empty")
                        continue
                    stem, ext = split_suffix(suffix.strip())
                    owner = suffix_owner.setdefault(stem.lower() + ext, i)
                    if owner != i:
                        add(i, "suffixes", f"'{suffix}' is also a suffix of element '{rows[owner].get('name')}'")
            if not isinstance(row.get("required", False), bool):
                add(i, "required", "must be true or false")
            vae = row.get("vae", {})
            if not isinstance(vae, dict):
                add(i, "vae.position", "vae must be an object with repeat and position")
                vae = {}
            position = vae.get("position", 0)
            if not isinstance(position, int) or isinstance(position, bool) or position < 0:
                add(i, "vae.position", f"must be a whole number >= 0, got {position!r}")
            elif position in positions:
                add(i, "vae.position", f"{position} is also the position of '{rows[positions[position]].get('name')}'")
            else:
                positions[position] = i
            repeat = vae.get("repeat", 1)
            if not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 1:
                add(i, "vae.repeat", f"must be at least 1, got {repeat!r}")
            else:
                total_repeat += repeat
            if "preprocess" in vae and vae["preprocess"] not in PREPROCESS:
                add(i, "vae.preprocess", f"must be one of {', '.join(PREPROCESS)}, got {vae['preprocess']!r}")
            clip = row.get("clip", {})
            if clip is True:
                clip = {}
            if clip is not False and not isinstance(clip, dict):
                add(i, "clip", "must be an object like {\"preprocess\": \"pad_white\"} or false")
            elif isinstance(clip, dict) and "preprocess" in clip and clip["preprocess"] not in PREPROCESS:
                add(i, "clip", f"must be one of {', '.join(PREPROCESS)}, got {clip['preprocess']!r}")
        if frames is not None and total_repeat > frames:
            add(None, "vae.repeat", f"the VAE repeats add up to {total_repeat} reference frames, more than the "
                                    f"{frames} frames of a training clip: lower the repeats or raise frames")
        return found

    # --- preview -----------------------------------------------------------------------------------
    def preview(self) -> Preview:
        """Which files of the dataset folder each element matches (cached until the folder or table changes)."""
        folder = self.dataset.data_root_path()
        if folder is None:
            return Preview("", [], {str(r.get("name", "")): 0 for r in self.rows},
                           "choose the dataset folder (data_root) to see which files each element matches")
        try:
            stamp = folder.stat().st_mtime_ns if folder.is_dir() else None
        except OSError:
            stamp = None

        key = (str(folder), stamp, json.dumps(self.rows, sort_keys=True, default=str))
        if key != self._preview_key or self._preview is None:
            self._preview = self.dataset.discover(folder, self.rows)
            self._preview_key = key
        return self._preview
