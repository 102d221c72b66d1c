"""Every command-line option of every script in scripts/ says what it does in `--help`."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO_ROOT

# Runs each script as `python scripts/X.py --help` would, but stops it where it parses its arguments and lists, for
# every parser (sub-commands included), the options and positionals that have no help text.
LIST_UNHELPED = r"""
import argparse, json, os, runpy, sys

class Parsed(Exception):
    pass

parsers = []

def stop(self, *args, **kwargs):
    parsers.append(self)
    raise Parsed

argparse.ArgumentParser.parse_known_args = stop
found = {}
for path in sys.argv[1:]:
    parsers.clear()
    sys.argv = [path, "--help"]
    sys.path.insert(0, os.path.dirname(path))  # as `python scripts/X.py` has it
    try:
        runpy.run_path(path, run_name="__main__")
    except Parsed:
        pass
    except SystemExit:
        pass
    missing, todo = [], list(parsers)
    while todo:
        parser = todo.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo.extend(action.choices.values())
            elif not isinstance(action, (argparse._HelpAction, argparse._VersionAction)) and not action.help:
                missing.append("/".join(action.option_strings) or action.dest)
    found[path] = {"parsers": len(parsers), "missing": missing}
print(json.dumps(found))
"""


def test_every_option_of_every_script_has_help_text():
    scripts = sorted(p for p in (REPO_ROOT / "scripts").glob("*.py")
                     if "add_argument" in p.read_text(encoding="utf-8") and not p.name.startswith("_"))
    assert len(scripts) >= 12  # the project's command-line scripts, not an empty listing
    result = subprocess.run([sys.executable, "-c", LIST_UNHELPED, *map(str, scripts)], capture_output=True, text=True,
                            cwd=REPO_ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert all(entry["parsers"] for entry in found.values()), {k: v for k, v in found.items() if not v["parsers"]}
    missing = {name.split("/")[-1]: entry["missing"] for name, entry in found.items() if entry["missing"]}
    assert not missing, f"options without help text: {missing}"
