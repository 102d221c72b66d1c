"""The E2V dataset JSON being edited (seed 000 format): datasets, elements, processors, visualization.

The document is kept as the plain nested dict of the file, so keys the GUI does not know survive a
load / save unchanged. `TrainConfig.dataset_config` holds the file's path; the GUI saves the file
atomically. The pathway settings split in two: the processors (VAE / CLIP resolution, preprocessing,
frame conditioning) live here in the dataset JSON, the training-side options (`e2v_type`, posterior,
target layout) in the train config's `e2v`.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
from pathlib import Path
from typing import Any

from modules.config.e2v_dataset_config import (
    FRAME_CONDITIONING_MODES,
    PREPROCESS_METHODS,
    VISUALIZATION_DATA,
    VISUALIZATION_FORMATS,
    VISUALIZATION_TYPES,
    E2VDatasetConfig,
    E2VDatasetFile,
    VisualizationProcessorConfig,
    normalize_flat_form,
)
from modules.config.loading import read_json
from modules.ui.controllers.elements_controller import COLUMNS, ElementsController, Problem
from modules.ui.controllers.fields import (
    CHOICE,
    INT_LIST,
    TEXT_LIST,
    FieldError,
    FieldSpec,
    field_specs,
    format_value,
    get_path,
    key_of_error,
    parse_text,
    set_path,
    short_error,
)
from modules.ui.controllers.observable import Observable
from modules.util.atomic import atomic_write_text
from modules.util.base_config import ConfigError
from modules.util.errors import UserError

DEFAULT = "default"
# Choices the typed config checks in code rather than in its field types.
_CHOICES = {
    "dataset_type": ("e2v",),
    "reshape_mode": ("bicubic",),
    "processors.vae.combine": ("before",),
    "processors.vae.default_preprocess": PREPROCESS_METHODS,
    "processors.vae.frame_conditioning": FRAME_CONDITIONING_MODES,
    "processors.clip.default_preprocess": PREPROCESS_METHODS,
}
# Keys edited by their own tables, not as fields.
_TABLES = ("elements", "visualization.processors")


def _with_choices(specs: dict[str, FieldSpec], choices: dict[str, tuple[str, ...]]) -> dict[str, FieldSpec]:
    return {key: (dataclasses.replace(spec, kind=CHOICE, choices=choices[key]) if key in choices else spec)
            for key, spec in specs.items() if key not in _TABLES}


# Fields of one dataset ("processors.vae.resolution" is datasets[i]["processors"]["vae"]["resolution"]),
# generated from the typed dataset config's metadata like the train config's fields.
DATASET_SPECS: dict[str, FieldSpec] = _with_choices(field_specs(E2VDatasetConfig), _CHOICES)

VISUALIZATION_COLUMNS: dict[str, FieldSpec] = {
    key: spec for key, spec in _with_choices(field_specs(VisualizationProcessorConfig), {
        "type": VISUALIZATION_TYPES, "format": (DEFAULT,) + VISUALIZATION_FORMATS}).items()
}
VISUALIZATION_COLUMNS["data"] = dataclasses.replace(
    VISUALIZATION_COLUMNS["data"], doc="Comma-separated: " + ", ".join(VISUALIZATION_DATA))
assert VISUALIZATION_COLUMNS["data"].kind == TEXT_LIST and VISUALIZATION_COLUMNS["frames"].kind == INT_LIST


def template_dataset(data_root: str = "") -> dict[str, Any]:
    """A2's layout: main subject, object and background (repeats 1 / 4 / 4), both pathways."""
    return {
        "data_root": data_root,
        "dataset_type": "e2v",
        "target_resolution": [480, 832],
        "auto_frame_buckets": True,
        "max_frames": 81,
        "elements": [
            {"name": "main_subject", "suffixes": ["_person.png", "_subject.png"], "required": True,
             "vae": {"repeat": 1, "position": 0}, "clip": {"preprocess": "pad_white"}},
            {"name": "object", "suffixes": ["_object.png"], "required": False,
             "vae": {"repeat": 4, "position": 1}, "clip": {"preprocess": "pad_white"}},
            {"name": "background", "suffixes": ["_background.png"], "required": False,
             "vae": {"repeat": 4, "position": 2, "preprocess": "center_crop"}, "clip": {"preprocess": "pad_white"}},
        ],
        "processors": {
            "vae": {"combine": "before", "default_preprocess": "pad_white", "frame_conditioning": "full",
                    "frame_index": 0, "concatenate_mask": True},
            "clip": {"resolution": [512, 512], "default_preprocess": "pad_white"},
        },
        "visualization": {"enabled": False, "output_dir": "visualizations/{run_id}", "frequency": 100,
                          "processors": []},
    }


def template_document(data_root: str = "") -> dict[str, Any]:
    return {"datasets": [template_dataset(data_root)]}


_ROW_ERROR = re.compile(r"^elements\[(\d+)\]\.(name|suffixes|required|vae\.\w+|clip)")


def locate(key: str, message: str, index: int) -> Problem:
    """Place an error of the typed config (key "datasets[0].elements[1].vae.position") in the editor."""
    text = short_error(message, key)
    prefix = f"datasets[{index}]."
    if not key.startswith(prefix):
        return Problem(key or "dataset", text)
    rest = key[len(prefix):]
    row = _ROW_ERROR.match(rest)
    if row:
        column = row.group(2)
        if column.startswith("vae.") and column not in COLUMNS:
            column = "vae.position"
        return Problem(f"elements[{row.group(1)}].{column}", text, int(row.group(1)), column)
    if rest.startswith("visualization.processors["):
        rest = re.sub(r"^(visualization\.processors\[\d+\]\.\w+).*$", r"\1", rest)
    return Problem(rest, text)


class DatasetController(Observable):
    def __init__(self) -> None:
        super().__init__()
        self.document: dict[str, Any] = template_document()
        self.path: Path | None = None  # the file it was loaded from / saved to
        self.index = 0  # the dataset shown
        self.dirty = False
        self.pending: dict[str, Any] = {}  # key -> text that did not parse
        self.parse_errors: dict[str, str] = {}
        self.elements = ElementsController(self)

    # --- document ------------------------------------------------------------------------------------
    @property
    def datasets(self) -> list[dict[str, Any]]:
        return self.document["datasets"]

    @property
    def current(self) -> dict[str, Any]:
        return self.datasets[self.index]

    def new(self, data_root: str = "") -> None:
        self._replace(template_document(data_root), None)
        self.dirty = True

    def load(self, path: str | os.PathLike) -> None:
        document = read_json(path, "dataset config")
        if not isinstance(document, dict) or not isinstance(document.get("datasets"), list) or not document["datasets"] \
                or not all(isinstance(d, dict) for d in document["datasets"]):
            raise ConfigError(f"dataset config '{path}' must be an object with a non-empty 'datasets' list "
                              "(see docs/gui.md for the format)")
        try:
            document = normalize_flat_form(document)  # seed 001's flat keys -> the nested form the table edits
        except ConfigError as e:
            raise ConfigError(f"dataset config '{path}': {e}") from None
        self._replace(document, Path(path))

    def _replace(self, document: dict[str, Any], path: Path | None) -> None:
        self.document = document
        self.path = path
        self.index = 0
        self.dirty = False
        self.pending.clear()
        self.parse_errors.clear()
        self.elements.pending.clear()
        self.notify(None)

    def save(self, path: str | os.PathLike | None = None) -> Path:
        """Write the document atomically, as edited (refused while it has problems: what is written
        always loads with `load_dataset_config`)."""
        target = Path(path) if path else self.path
        if target is None:
            raise UserError("choose where to save the E2V dataset config first (dataset_config)")
        problems = self.problems()
        if problems:
            raise ConfigError(f"E2V dataset: {problems[0]}")
        atomic_write_text(target, json.dumps(self.document, indent=2) + "\n")
        self.path = target
        self.dirty = False
        self.notify("saved")
        return target

    def select(self, index: int) -> None:
        self.index = max(0, min(len(self.datasets) - 1, index))
        self.pending.clear()
        self.parse_errors.clear()
        self.elements.pending.clear()
        self.notify(None)

    def add_dataset(self) -> int:
        self.datasets.append(template_dataset())
        self.index = len(self.datasets) - 1
        self.changed(None)
        return self.index

    def remove_dataset(self, index: int) -> None:
        if len(self.datasets) == 1:
            raise UserError("an E2V dataset config needs at least one dataset")
        del self.datasets[index]
        self.index = min(self.index, len(self.datasets) - 1)
        self.changed(None)

    def changed(self, what: Any) -> None:
        """Called after any edit of the document (by this controller or its element table)."""
        self.dirty = True
        self.notify(what)

    def data_root_path(self) -> Path | None:
        """data_root as the data loader reads it (as given: relative paths from the working folder)."""
        root = str(self.current.get("data_root", "") or "").strip()
        return Path(root) if root else None

    # --- fields (dataset level, processors, visualization) ------------------------------------------
    def spec(self, key: str) -> FieldSpec:
        return DATASET_SPECS[key]

    def display(self, key: str) -> Any:
        if key in self.pending:
            return self.pending[key]
        spec = DATASET_SPECS[key]
        return format_value(spec, get_path(self.current, key, spec.default))

    def _parse(self, key: str, spec: FieldSpec, value: Any) -> tuple[bool, Any]:
        """(ok, parsed); text that does not parse stays pending beside its error."""
        try:
            parsed = parse_text(spec, value)
        except FieldError as e:
            self.pending[key] = value
            self.parse_errors[key] = str(e)
            return False, None
        self.pending.pop(key, None)
        self.parse_errors.pop(key, None)
        return True, parsed

    def set(self, key: str, value: Any) -> None:
        ok, parsed = self._parse(key, DATASET_SPECS[key], value)
        if ok:
            set_path(self.current, key, parsed)
        self.changed(key)

    def error(self, key: str) -> str:
        for problem in self.problems():
            if problem.path == key:
                return problem.message
        return ""

    def visualization_error(self, index: int) -> str:
        prefix = f"visualization.processors[{index}]."
        return "; ".join(f"{p.path[len(prefix):]}: {p.message}" for p in self.problems() if p.path.startswith(prefix))

    # --- visualization processors -------------------------------------------------------------------
    @property
    def visualization_rows(self) -> list[dict[str, Any]]:
        vis = self.current.setdefault("visualization", {})
        if not isinstance(vis.get("processors"), list):
            vis["processors"] = []
        return vis["processors"]

    def add_visualization(self) -> int:
        self.visualization_rows.append({"type": "vae_decode", "data": ["input_latents", "predicted_latents"],
                                        "frames": [0, -1]})
        self.pending = {k: v for k, v in self.pending.items() if not k.startswith("visualization.processors[")}
        self.changed("visualization")
        return len(self.visualization_rows) - 1

    def remove_visualization(self, index: int) -> None:
        del self.visualization_rows[index]
        self.pending = {k: v for k, v in self.pending.items() if not k.startswith("visualization.processors[")}
        self.parse_errors = {k: v for k, v in self.parse_errors.items()
                             if not k.startswith("visualization.processors[")}
        self.changed("visualization")

    def visualization_display(self, index: int, column: str) -> Any:
        key = f"visualization.processors[{index}].{column}"
        if key in self.pending:
            return self.pending[key]
        value = self.visualization_rows[index].get(column, VISUALIZATION_COLUMNS[column].default)
        if column == "data":
            return ", ".join(str(v) for v in value or [])
        if column == "format" and value is None:
            return DEFAULT
        return format_value(VISUALIZATION_COLUMNS[column], value)

    def set_visualization(self, index: int, column: str, value: Any) -> None:
        ok, parsed = self._parse(f"visualization.processors[{index}].{column}", VISUALIZATION_COLUMNS[column], value)
        if ok:
            row = self.visualization_rows[index]
            if (column == "frames" and not parsed) or (column == "format" and parsed == DEFAULT):
                row.pop(column, None)
            else:
                row[column] = parsed
        self.changed("visualization")

    # --- checks -------------------------------------------------------------------------------------
    def problems(self) -> list[Problem]:
        """Every problem of the shown dataset (the element table reports all of its own at once), then
        the typed dataset config's verdict on the whole file — the check the trainer makes."""
        found = [Problem(key, message) for key, message in self.parse_errors.items()]
        found += self.elements.problems()
        try:
            E2VDatasetFile.from_dict(copy.deepcopy(self.document))
        except ConfigError as e:
            problem = locate(key_of_error(str(e)), str(e), self.index)
            if not any((p.row, p.field, p.path) == (problem.row, problem.field, problem.path) or
                       (problem.row is not None and (p.row, p.field) == (problem.row, problem.field)) for p in found):
                found.append(problem)
        return found
