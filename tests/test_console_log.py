"""Log lines and progress bars share the console (issue #25: a skipped clip's WARNING was printed glued onto the
tqdm caching line). The scripts' one logging setup (`_bootstrap.run_main` -> `console_log`) writes through tqdm."""
from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import REPO_ROOT

SCRIPT = """
import logging, sys
sys.path.insert(0, "scripts")
from _bootstrap import run_main
from tqdm import tqdm

def main():
    with tqdm(total=3, desc="caching") as bar:
        bar.update(1)
        bar.refresh()
        logging.getLogger("modules.dataLoader.skips").warning("skipped clip 'a.mp4': cannot be decoded")
        bar.update(2)
    return 0

run_main(main)
"""


def test_a_warning_during_a_progress_bar_starts_its_own_line():
    result = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO_ROOT, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    err = result.stderr
    assert "caching:  33%" in err  # the bar was drawn before the warning
    at = err.index("WARNING modules.dataLoader.skips: skipped clip 'a.mp4': cannot be decoded\n")
    assert at == 0 or err[at - 1] in "\r\n", repr(err[max(0, at - 60):at + 20])  # the bar was cleared first
    assert re.search(r"cannot be decoded\n.*caching: 100%", err, re.S)  # and drawn again below it
