"""Row editors for the config's lists of records: concepts and samples.

Rows are the plain dicts of the config (`ConceptConfig().to_dict()` ...); their fields come from the
record class's metadata like every other field. Errors are reported per row and field with the key
the strict config check names (``concepts[1].path``).
"""
from __future__ import annotations

import copy
from typing import Any

from modules.dataLoader.concept_selection import concept_path_problem
from modules.model.sample_inputs import CONDITIONING_FIELDS
from modules.ui.controllers.config_controller import LIST_KEYS, ConfigController
from modules.ui.controllers.fields import (
    RESOLUTION,
    FieldError,
    FieldSpec,
    field_specs,
    format_value,
    parse_text,
    short_error,
)


class RecordListController:
    def __init__(self, config: ConfigController, key: str):
        self.config = config
        self.key = key
        self.item_cls = LIST_KEYS[key]
        self.specs: dict[str, FieldSpec] = field_specs(self.item_cls)

    # --- rows --------------------------------------------------------------------------------------
    @property
    def rows(self) -> list[dict[str, Any]]:
        value = self.config.data.get(self.key)
        return value if isinstance(value, list) else []

    def __len__(self) -> int:
        return len(self.rows)

    def add(self, **values: Any) -> int:
        row = self.item_cls().to_dict()
        row.update(values)
        rows = copy.deepcopy(self.rows) + [row]
        self.config.set_list(self.key, rows)
        return len(rows) - 1

    def duplicate(self, index: int) -> int:
        rows = copy.deepcopy(self.rows)
        rows.insert(index + 1, copy.deepcopy(rows[index]))
        self.config.set_list(self.key, rows)
        return index + 1

    def remove(self, index: int) -> None:
        rows = copy.deepcopy(self.rows)
        del rows[index]
        self.config.set_list(self.key, rows)

    def move(self, index: int, delta: int) -> int:
        """Move row `index` by `delta` places (clamped); returns its new index."""
        rows = copy.deepcopy(self.rows)
        target = max(0, min(len(rows) - 1, index + delta))
        rows.insert(target, rows.pop(index))
        self.config.set_list(self.key, rows)
        return target

    # --- fields --------------------------------------------------------------------------------------
    def path(self, index: int, name: str) -> str:
        return f"{self.key}[{index}].{name}"

    def display(self, index: int, name: str) -> Any:
        path = self.path(index, name)
        if path in self.config.pending:
            return self.config.pending[path]
        return format_value(self.specs[name], self.rows[index].get(name))

    def set(self, index: int, name: str, value: Any) -> None:
        self.config.set_item(self.key, index, name, value)

    def error(self, index: int, name: str) -> str:
        path = self.path(index, name)
        return short_error(self.config.errors.get(path) or self.config.start_problems.get(path, ""), path)

    def shows(self, index: int, name: str) -> bool:
        return True

    def row_source(self, index: int) -> "RowSource":
        return RowSource(self, index)


# A sample's frame size, one field as everywhere else ("832x480"); the config keeps its height and width.
SIZE_SPEC = FieldSpec("size", "Size (W x H)", RESOLUTION, "Width x height in pixels, e.g. 832x480 (multiples of 16).")


class SampleListController(RecordListController):
    """The sample list: a row's size is one field written 832x480, and a row shows the inputs the base follows
    (an image for I2V, a driving video for Animate-2, a control video for VACE, elements for E2V), and an input set
    for another base, with its error, until it is cleared."""

    def __init__(self, config: ConfigController):
        super().__init__(config, "samples")
        fields = list(self.specs.items())
        at = next(i for i, (name, _) in enumerate(fields) if name == "height")
        fields = [item for item in fields if item[0] not in ("height", "width")]
        fields.insert(at, ("size", SIZE_SPEC))
        self.specs = dict(fields)
        self.defaults = self.item_cls().to_dict()

    def display(self, index: int, name: str) -> Any:
        if name != "size":
            return super().display(index, name)
        path = self.path(index, "size")
        if path in self.config.pending:
            return self.config.pending[path]
        row = self.rows[index]
        return format_value(SIZE_SPEC, [row.get("height"), row.get("width")])

    def set(self, index: int, name: str, value: Any) -> None:
        if name != "size":
            return super().set(index, name, value)
        try:
            size = parse_text(SIZE_SPEC, value)
            if not (isinstance(size, list) and len(size) == 2 and all(isinstance(v, int) for v in size)):
                raise FieldError("must be one size, width x height, e.g. 832x480")
        except FieldError as e:
            self.config.set_item_values(self.key, index, {}, pending={"size": (value, str(e))})
        else:
            self.config.set_item_values(self.key, index, {"height": size[0], "width": size[1]}, cleared=("size",))

    def error(self, index: int, name: str) -> str:
        if name != "size":
            return super().error(index, name)
        return next(filter(None, (super(SampleListController, self).error(index, part)
                                  for part in ("size", "height", "width"))), "")

    def shows(self, index: int, name: str) -> bool:
        if name not in CONDITIONING_FIELDS or self.path(index, name) in self.config.errors:
            return True
        used = self.config.sample_fields_used()
        return used is None or name in used or self.rows[index].get(name) != self.defaults[name]


class ConceptListController(RecordListController):
    """Concepts are a list, or the path of a JSON file holding one (`concepts: "my_concepts.json"`)."""

    def __init__(self, config: ConfigController):
        super().__init__(config, "concepts")
        self._kept_rows: list[dict[str, Any]] = []

    @property
    def concept_file(self) -> str:
        value = self.config.data.get("concepts")
        return value if isinstance(value, str) else ""

    def path_problems(self) -> dict[str, str]:
        """key -> what is wrong with the path of each enabled concept whose folder (or manifest) is not there, checked
        as it is typed with the loader's own test (the run would stop on it after loading the model)."""
        problems = {}
        for index, row in enumerate(self.rows):
            path = str(row.get("path") or "").strip()
            problem = concept_path_problem(path) if path and row.get("enabled", True) else ""
            if problem:
                problems[self.path(index, "path")] = problem
        return problems

    def error(self, index: int, name: str) -> str:
        shown = super().error(index, name)
        if shown or name != "path":
            return shown
        return self.path_problems().get(self.path(index, name), "")

    def has_data(self) -> bool:
        """A concept file, or at least one enabled concept in the list."""
        return bool(self.concept_file.strip()) or any(row.get("enabled", True) for row in self.rows)

    def empty_note(self) -> str:
        """What the empty list says: with `dataset_config` set the run trains on the E2V dataset instead."""
        if str(self.config.data.get("dataset_config") or "").strip():
            return ("(none: this config trains on the E2V dataset set in the E2V elements tab; concepts are "
                    "not used while dataset_config is set)")
        return ("(none yet: add a concept folder or .jsonl manifest; for Elements-to-Video, set a dataset in the "
                "E2V elements tab instead)")

    def statistics(self) -> list[str]:
        """What the concepts train on (scripts/dataset_stats.py's table), from the config as it is now; probes
        the clips (cached like training does), loads no model. A config problem is the one line returned."""
        from pathlib import Path

        from modules.dataLoader.statistics import dataset_statistics, describe, model_facts
        from modules.util.errors import UserError

        try:
            config = self.config.build()
            fps, tokenizer = model_facts(Path(config.base_model_name), config.fps)
            return describe(dataset_statistics(config, fps, tokenizer))
        except UserError as e:
            return [f"cannot count the concepts: {e}"]

    def set_concept_file(self, path: str) -> None:
        """A non-empty path replaces the list (kept aside); clearing it brings the list back."""
        if path.strip():
            if isinstance(self.config.data.get("concepts"), list):
                self._kept_rows = copy.deepcopy(self.config.data["concepts"])
            self.config.set_list("concepts", path)
        else:
            self.config.set_list("concepts", self._kept_rows)


class RowSource:
    """One row seen as a field source (spec / display / set / error by field name), for generated forms."""

    def __init__(self, rows: RecordListController, index: int):
        self.rows, self.index = rows, index

    def spec(self, name: str) -> FieldSpec:
        return self.rows.specs[name]

    def display(self, name: str) -> Any:
        return self.rows.display(self.index, name)

    def set(self, name: str, value: Any) -> None:
        self.rows.set(self.index, name, value)

    def error(self, name: str) -> str:
        return self.rows.error(self.index, name)

    def shows(self, name: str) -> bool:
        return self.rows.shows(self.index, name)
