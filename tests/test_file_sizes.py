"""Code for the next engineer: no Python file of the project over 600 lines (split by concern instead)."""
import subprocess

from tests.conftest import REPO_ROOT

LIMIT = 600


def test_no_python_file_is_over_600_lines():
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO_ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    assert len(files) > 100  # the project's files, not an empty listing
    long = {name: n for name in files
            if (n := len((REPO_ROOT / name).read_text(encoding="utf-8").splitlines())) > LIMIT}
    assert not long, f"over {LIMIT} lines: {long}"
