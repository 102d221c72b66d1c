"""The E2V element table: plain dict rows in the dataset JSON's nested form, and a live preview.

A row is exactly what the dataset JSON holds (seed 000 / docs/e2v.md §1):
``{"name", "suffixes": [...], "required", "vae": {"repeat", "position", "preprocess"?},
"clip": {"preprocess"?} | false}``. The table edits these dicts in place (add / remove / reorder /
edit), checks them all at once (unique names and positions, non-empty image suffixes, known
preprocess names, repeat >= 1; the typed dataset config then checks the whole file) and previews,
for a dataset folder, which file each element matches for each video and how many samples are
complete.

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
from typing import Any, Protocol

from modules.config.e2v_dataset_config import IMAGE_SUFFIX_EXTENSIONS, PREPROCESS_METHODS, ElementConfig
from modules.ui.controllers.fields import (
    BOOL,
    CHOICE,
    INT,
    TEXT,
    TEXT_LIST,
    FieldError,
    FieldSpec,
    field_specs,
    parse_text,
)

DEFAULT, OFF = "default", "off"

_ELEMENT_DOCS = field_specs(ElementConfig)  # docs and defaults come from the typed dataset config


def _column(key: str, label: str, kind: str, choices: tuple[str, ...] = ()) -> FieldSpec:
    generated = _ELEMENT_DOCS.get(key)
    doc = generated.doc if generated else ""
    default = generated.default if generated else None
    return FieldSpec(key, label, kind, doc, default, choices)


# Table columns: key in the row dict -> FieldSpec. "vae.preprocess" and "clip" offer "default"
# (the processor's default_preprocess: the key is absent) and "clip" also "off" (clip: false).
COLUMNS: dict[str, FieldSpec] = {spec.key: spec for spec in (
    _column("name", "Name", TEXT),
    _column("suffixes", "Suffixes", TEXT_LIST),
    _column("required", "Required", BOOL),
    _column("vae.position", "VAE pos", INT),
    _column("vae.repeat", "Repeat", INT),
    _column("vae.preprocess", "VAE prep", CHOICE, (DEFAULT,) + PREPROCESS_METHODS),
    dataclasses.replace(_column("clip", "CLIP", CHOICE, (DEFAULT,) + PREPROCESS_METHODS + (OFF,)),
                        doc="CLIP pathway: the element's preprocess, default (processors.clip.default_preprocess), "
                            "or off to leave the element out of CLIP."),
)}


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
    skipped: str = ""  # why the data loader skips this video ("" = it trains)

    @property
    def complete(self) -> bool:
        """The loader trains it: every required element is there (a missing caption trains as "")."""
        return not self.skipped


@dataclasses.dataclass
class Preview:
    folder: str
    samples: list[SampleMatch]
    counts: dict[str, int]  # element name -> videos where it was found
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
        uncaptioned = sum(1 for s in self.samples if not s.caption)
        if uncaptioned:
            parts.append(f"{uncaptioned} without caption")
        parts += [f"{name} {count}/{self.total}" for name, count in self.counts.items()]
        return " · ".join(parts)


def index_folder(folder: Path) -> dict[tuple[str, str], Path]:
    """(name without extension, lower-case extension) -> file, for suffix matching."""
    index: dict[tuple[str, str], Path] = {}
    for path in sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")):
        stem, ext = os.path.splitext(path.name)
        index.setdefault((stem, ext.lower()), path)
    return index


def find_file(index: dict[tuple[str, str], Path], base: str, suffixes: list[Any]) -> Path | None:
    """The first suffix, in list order, for which ``base + suffix`` exists (extension case-insensitive)."""
    for suffix in suffixes:
        if isinstance(suffix, str) and suffix:
            stem, ext = os.path.splitext(suffix)
            found = index.get((base + stem, ext.lower()))
            if found is not None:
                return found
    return None


def scan_dataset(folder: str | os.PathLike, elements: list[dict[str, Any]]) -> Preview:
    """Which file each element (plain rows) matches for each video of `folder`, by the loader's rule.

    Used for rows the typed config cannot parse yet; otherwise `preview_with_loader` asks the E2V data
    loader's own discovery.
    """
    from modules.dataLoader.video_io import VIDEO_EXTENSIONS  # the loader's list (.gif too); imports FFmpeg

    folder = Path(folder)
    names = [str(e.get("name", "")) for e in elements]
    if not folder.is_dir():
        return Preview(str(folder), [], {n: 0 for n in names}, f"dataset folder '{folder}' does not exist")
    index = index_folder(folder)
    samples: list[SampleMatch] = []
    counts = {n: 0 for n in names}
    for (base, ext), video in sorted(index.items(), key=lambda item: item[1].name):
        if ext not in VIDEO_EXTENSIONS:
            continue
        files: dict[str, str | None] = {}
        missing: list[str] = []
        for element, name in zip(elements, names):
            found = find_file(index, base, element.get("suffixes") or [])
            files[name] = found.name if found else None
            if found:
                counts[name] += 1
            elif element.get("required"):
                missing.append(name)
        skipped = f"required element '{missing[0]}' not found" if missing else ""
        samples.append(SampleMatch(base, video.name, (base, ".txt") in index, files, skipped))
    return Preview(str(folder), samples, counts)


def preview_with_loader(folder: str | os.PathLike, elements: list[dict[str, Any]]) -> Preview | None:
    """The preview from the E2V loader's own discovery (modules/dataLoader/e2v/discovery.py); None when
    the rows do not parse as typed elements yet (then `scan_dataset` answers)."""
    from modules.dataLoader.e2v.discovery import discover_e2v_samples, find_element_image
    from modules.util.base_config import ConfigError

    folder = Path(folder)
    try:
        typed = [ElementConfig.from_dict(row, f"elements[{i}]") for i, row in enumerate(elements)]
    except ConfigError:
        return None
    names = [e.name for e in typed]
    if not folder.is_dir():
        return Preview(str(folder), [], {n: 0 for n in names}, f"dataset folder '{folder}' does not exist")
    found, skipped = discover_e2v_samples(folder, typed)
    index = index_folder(folder)
    samples = [SampleMatch(s.id, s.video.name, s.caption_path is not None,
                           {name: (p.name if p else None) for name, p in s.element_images.items()}) for s in found]
    for video, reason in skipped:
        base = os.path.splitext(video.name)[0]
        files = {}
        for element in typed:
            match = find_element_image(index, base, element.suffixes)
            files[element.name] = match.name if match else None
        samples.append(SampleMatch(base, video.name, (base, ".txt") in index, files, reason))
    samples.sort(key=lambda s: s.video)
    counts = {n: sum(1 for s in samples if s.files.get(n)) for n in names}
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


class DatasetDocument(Protocol):
    """What the table needs of the dataset it edits (`e2v_dataset.DatasetController`, which owns the table)."""

    @property
    def current(self) -> dict[str, Any]: ...  # the selected dataset entry of the JSON

    def changed(self, what: Any) -> None: ...  # after an edit: marks the document dirty, tells the views

    def data_root_path(self) -> Path | None: ...


class ElementsController:
    """The element table of the selected dataset of a `DatasetController`."""

    def __init__(self, dataset: DatasetDocument):
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
        """The cell's value, with the typed config's defaults for absent keys."""
        row = self.rows[index]
        if column == "clip":
            clip = row.get("clip", {})
            if clip is False:
                return OFF
            return (clip.get("preprocess") or DEFAULT) if isinstance(clip, dict) else DEFAULT
        if column.startswith("vae."):
            vae = row.get("vae") if isinstance(row.get("vae"), dict) else {}
            value = vae.get(column[4:])
            if value is None:
                return {"vae.position": index, "vae.repeat": 1, "vae.preprocess": DEFAULT}[column]
            return value
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
    def problems(self) -> list[Problem]:
        """Everything wrong with the table, all at once (the typed config stops at the first error)."""
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
            add(None, "", "is empty: add at least one element")
        names: dict[str, int] = {}
        positions: dict[int, int] = {}
        suffix_owner: dict[tuple[str, str], int] = {}
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                add(i, "name", "must be an object with name, suffixes, required, vae and clip")
                continue
            name = row.get("name")
            if not isinstance(name, str) or not name.strip():
                add(i, "name", "is empty: give the element a name")
            elif name in names:
                add(i, "name", f"'{name}' is also the name of element {names[name] + 1}: names must be unique")
            else:
                names[name] = i
            suffixes = row.get("suffixes")
            if not isinstance(suffixes, list) or not suffixes:
                add(i, "suffixes", "is empty: give at least one file suffix, e.g. _person.png")
            else:
                for suffix in suffixes:
                    if not isinstance(suffix, str) or not suffix.strip():
                        add(i, "suffixes", "a suffix is empty")
                    elif not suffix.lower().endswith(IMAGE_SUFFIX_EXTENSIONS):
                        add(i, "suffixes", f"'{suffix}' must end in an image extension "
                                           f"({', '.join(IMAGE_SUFFIX_EXTENSIONS)})")
                    else:
                        stem, ext = os.path.splitext(suffix)
                        owner = suffix_owner.setdefault((stem, ext.lower()), i)
                        if owner != i:
                            add(i, "suffixes", f"'{suffix}' is also a suffix of element '{rows[owner].get('name')}'")
                        elif suffixes.count(suffix) > 1:
                            add(i, "suffixes", f"'{suffix}' is listed twice")
            if not isinstance(row.get("required", False), bool):
                add(i, "required", "must be true or false")
            vae = row.get("vae", {})
            if not isinstance(vae, dict):
                add(i, "vae.position", "vae must be an object like {\"repeat\": 4, \"position\": 1}")
                vae = {}
            position = vae.get("position", i)  # the typed config defaults a missing position to the row index
            if position is None:
                position = i
            if not isinstance(position, int) or isinstance(position, bool) or position < 0:
                add(i, "vae.position", f"must be a whole number >= 0, got {position!r}")
            elif position in positions:
                add(i, "vae.position", f"{position} is also the position of '{rows[positions[position]].get('name')}'")
            else:
                positions[position] = i
            repeat = vae.get("repeat", 1)
            if not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 1:
                add(i, "vae.repeat", f"must be at least 1, got {repeat!r}")
            preprocess = vae.get("preprocess")
            if preprocess is not None and preprocess not in PREPROCESS_METHODS:
                add(i, "vae.preprocess", f"must be one of {', '.join(PREPROCESS_METHODS)}, got {preprocess!r}")
            clip = row.get("clip", {})
            if clip is not False and clip is not True and not isinstance(clip, dict):
                add(i, "clip", "must be an object like {\"preprocess\": \"pad_white\"} or false")
            elif isinstance(clip, dict) and clip.get("preprocess") is not None \
                    and clip["preprocess"] not in PREPROCESS_METHODS:
                add(i, "clip", f"must be one of {', '.join(PREPROCESS_METHODS)}, got {clip['preprocess']!r}")
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
            self._preview = preview_with_loader(folder, self.rows) or scan_dataset(folder, self.rows)
            self._preview_key = key
        return self._preview
