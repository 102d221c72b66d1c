"""Controllers hold the GUI's logic and import no Tk, so they run (and are tested) without a display."""
from __future__ import annotations

import ast
import subprocess
import sys

from tests.conftest import REPO_ROOT

CONTROLLERS = REPO_ROOT / "modules" / "ui" / "controllers"


def test_no_controller_module_imports_tk():
    offenders = []
    for path in sorted(CONTROLLERS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names
                          if n.split(".")[0] in ("tkinter", "customtkinter", "_tkinter") or n.startswith("modules.ui.views")]
    assert offenders == []


def test_importing_the_controllers_loads_no_tk():
    code = ("import sys; import modules.ui.controllers.app_controller, modules.ui.controllers.layout; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('tkinter', 'customtkinter', '_tkinter')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
