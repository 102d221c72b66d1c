"""Imports point downward (ARCHITECTURE.md §4): util, optimizer, adapter (their type names and options are part
of the config) < model < dataLoader, modelSetup (which do not import
each other) < modelSaver, modelLoader, modelSampler < trainer < ui. The test reads every module's imports,
function-level ones included.

`PENDING` lists the upward imports that exist today, each with what removes it (issue #12, deliverable 6).
A new upward import fails; so does an entry that no longer exists, so the list stays the true debt.
"""
from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO_ROOT

LAYERS = {"util": 0, "optimizer": 0, "adapter": 0, "model": 1, "dataLoader": 2, "modelSetup": 2, "modelSaver": 3, "modelLoader": 3,
          "modelSampler": 3, "trainer": 4, "evaluation": 4, "ui": 5}
SIBLINGS_APART = {frozenset({"dataLoader", "modelSetup"})}

PENDING: dict[tuple[str, str], str] = {}  # (importing file, imported module): what removes it


def upward_imports(root: Path = REPO_ROOT) -> set[tuple[str, str]]:
    found = set()
    for path in sorted((root / "modules").rglob("*.py")):
        relative = path.relative_to(root)
        package = relative.parts[1] if len(relative.parts) > 2 else None
        if package not in LAYERS:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                parts = name.split(".")
                if parts[0] != "modules" or len(parts) < 2 or parts[1] not in LAYERS:
                    continue
                target = parts[1]
                if LAYERS[target] > LAYERS[package] or frozenset({package, target}) in SIBLINGS_APART:
                    found.add((relative.as_posix(), name))
    return found


def test_no_new_upward_import():
    new = sorted(upward_imports() - set(PENDING))
    assert new == [], "imports pointing to a higher layer (move the shared code down instead)"


def test_the_pending_list_is_the_true_debt():
    gone = sorted(set(PENDING) - upward_imports())
    assert gone == [], "these upward imports are gone: remove them from PENDING"


def test_the_reader_finds_function_level_and_sibling_imports(tmp_path):
    (tmp_path / "modules" / "util").mkdir(parents=True)
    (tmp_path / "modules" / "dataLoader").mkdir()
    (tmp_path / "modules" / "util" / "a.py").write_text(
        "import torch\nfrom modules.util import b\n\ndef f():\n    from modules.trainer.GenericTrainer import X\n")
    (tmp_path / "modules" / "dataLoader" / "c.py").write_text("import modules.modelSetup.step_inputs\n")
    assert upward_imports(tmp_path) == {("modules/util/a.py", "modules.trainer.GenericTrainer"),
                                        ("modules/dataLoader/c.py", "modules.modelSetup.step_inputs")}
