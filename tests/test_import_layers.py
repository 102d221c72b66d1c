"""Imports point downward (docs/architecture.md, "Layers"), floor by floor:

    util                                   the ground floor: imports nothing of the product above it
    optimizer, adapter                     their registries and typed options (BaseConfig is util's)
    config                                 the typed configs and their loading; names the registries below
    model                                  WanModel, variants, conditioning, the block's attention (model/attention/)
    dataLoader | modelSetup                apart: neither imports the other
    dataTools                              data preparation (clips, captions, elements, masks): reads media and
                                           dataset configs as training does, imports no trainer code
    modelFile                              LoRA and model files: formats, headers, reading, checks, merges
    modelSaver | modelLoader | modelSampler  the saver and the loader apart: what both need is in modelFile
    trainer, evaluation
    ui
    synthetic                              tiny models and shape clips for tests, the demo and benchmarks

The synthetic kit sits above everything: tests, the demo and benchmarks import it, no product module may. The test
reads every module's imports, function-level ones included, and fails on any arrow up or between siblings kept
apart; there is no allow-list of exceptions.

No file may reach itself through imports either: a circle works only while the import order happens to suit it,
and a reader cannot tell which file is the lower one. `TYPE_CHECKING` imports count (a type the lower file needs
belongs below both, or is a Protocol there). The benchmarks are read for circles too.
"""
from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO_ROOT

FLOORS = (("util",), ("optimizer", "adapter"), ("config",), ("model",), ("dataLoader", "modelSetup"), ("dataTools",),
          ("modelFile",),
          ("modelSaver", "modelLoader", "modelSampler"), ("trainer", "evaluation"), ("ui",), ("synthetic",))
LAYERS = {package: floor for floor, packages in enumerate(FLOORS) for package in packages}
SIBLINGS_APART = {frozenset({"dataLoader", "modelSetup"}), frozenset({"modelSaver", "modelLoader"})}


def imported_names(path: Path) -> list[tuple[str, list[str]]]:
    """Every import statement of a file, wherever it sits: (module, the names `from module import` takes)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found.extend((alias.name, []) for alias in node.names)
    return found


def upward_imports(root: Path = REPO_ROOT) -> set[tuple[str, str]]:
    found = set()
    for path in sorted((root / "modules").rglob("*.py")):
        relative = path.relative_to(root)
        package = relative.parts[1] if len(relative.parts) > 2 else None
        if package not in LAYERS:
            continue
        for name in (module for module, _ in imported_names(path)):
            parts = name.split(".")
            if parts[0] != "modules" or len(parts) < 2 or parts[1] not in LAYERS:
                continue
            target = parts[1]
            if LAYERS[target] > LAYERS[package] or frozenset({package, target}) in SIBLINGS_APART:
                found.add((relative.as_posix(), name))
    return found


def test_no_upward_import():
    assert sorted(upward_imports()) == [], "imports pointing to a higher floor (move the shared code down instead)"


def test_every_package_has_a_floor():
    packages = {p.name for p in (REPO_ROOT / "modules").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == set(LAYERS), "a package of modules/ needs its floor in FLOORS (and in docs/architecture.md)"


def test_no_product_module_imports_the_synthetic_kit():
    product = [(file, name) for file, name in upward_imports() if name.startswith("modules.synthetic")]
    assert product == [], "the synthetic kit is for tests, the demo and benchmarks, not the product"
    assert not (REPO_ROOT / "modules" / "util" / "tiny_model.py").exists()
    assert {p.stem for p in (REPO_ROOT / "modules" / "synthetic").glob("*.py")} >= {
        "tiny_model", "tiny_vae", "tiny_tokenizer", "shape_clips", "synthetic_data", "shapes_training", "tiny_eval_models"}


def test_the_reader_finds_function_level_and_sibling_imports(tmp_path):
    (tmp_path / "modules" / "util").mkdir(parents=True)
    (tmp_path / "modules" / "dataLoader").mkdir()
    (tmp_path / "modules" / "util" / "a.py").write_text(
        "import torch\nfrom modules.util import b\n\ndef f():\n    from modules.trainer.GenericTrainer import X\n")
    (tmp_path / "modules" / "dataLoader" / "c.py").write_text("import modules.modelSetup.step_inputs\n")
    assert upward_imports(tmp_path) == {("modules/util/a.py", "modules.trainer.GenericTrainer"),
                                        ("modules/dataLoader/c.py", "modules.modelSetup.step_inputs")}


def module_graph(root: Path = REPO_ROOT) -> dict[str, set[str]]:
    """File -> the files it imports, among modules/, scripts/ and benchmarks/ (`from pkg import sub` is the file
    `sub`)."""
    files = {}
    for path in sorted([*(root / "modules").rglob("*.py"), *(root / "scripts").glob("*.py"),
                        *(root / "benchmarks").rglob("*.py")]):
        parts = path.relative_to(root).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in files.items():
        targets = set()
        for module, taken in imported_names(path):
            targets.update(t for t in (module, *(f"{module}.{n}" for n in taken)) if t in files and t != name)
        graph[name] = targets
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one file (Tarjan, iterative), each as one circle through it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(_circle_through(sorted(group), graph))
    return groups


def _circle_through(group: list[str], graph: dict[str, set[str]]) -> list[str]:
    """The shortest circle from the group's first file back to it, for the message (a group is strongly
    connected, so there is one)."""
    members, start = set(group), group[0]
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & members):
                if target == start:
                    circle = [node]
                    while circle[-1] != start:
                        circle.append(came_from[circle[-1]])
                    return [start, *reversed(circle[:-1]), start]
                if target not in came_from:
                    came_from[target] = node
                    following.append(target)
        frontier = following
    raise AssertionError(f"{group} is not strongly connected")


def test_no_file_reaches_itself_through_imports():
    circles = [" -> ".join(circle) for circle in import_circles(module_graph())]
    assert circles == [], "import circles (move what both need into a lower file, or name it by a Protocol)"


def test_the_circle_finder_sees_type_checking_and_function_level_imports(tmp_path):
    (tmp_path / "modules" / "model").mkdir(parents=True)
    (tmp_path / "scripts").mkdir()
    (tmp_path / "modules" / "model" / "a.py").write_text("from modules.model import b\n")
    (tmp_path / "modules" / "model" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from modules.model.c import C\n")
    (tmp_path / "modules" / "model" / "c.py").write_text("def f():\n    import modules.model.a\n")
    (tmp_path / "modules" / "model" / "d.py").write_text("import modules.model.a\n")  # on no circle
    (tmp_path / "scripts" / "s.py").write_text("from modules.model.d import x\n")
    circles = import_circles(module_graph(tmp_path))
    assert circles == [["modules.model.a", "modules.model.b", "modules.model.c", "modules.model.a"]]
    assert import_circles({"x": {"y"}, "y": set()}) == []
