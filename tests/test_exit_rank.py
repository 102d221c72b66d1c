"""A finished torchrun rank leaves without the interpreter's teardown (modules/util/distributed.exit_rank, against
gloo threads that abort a rank at exit): what it printed and logged must still reach its pipes and its log file, and
its exit code the launcher."""
from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO_ROOT

RANK_END = """import logging, sys
from modules.util.distributed import exit_rank
logging.getLogger().addHandler(logging.FileHandler(sys.argv[1]))
logging.getLogger().setLevel(logging.INFO)
logging.info("logged line")
print("printed line", end="")  # a pipe is block-buffered: lost unless flushed
print("error line", end="", file=sys.stderr)
exit_rank(3)
print("after the end")
"""


def test_a_rank_flushes_its_output_then_exits_with_its_code(tmp_path):
    log = tmp_path / "rank.log"
    result = subprocess.run([sys.executable, "-c", RANK_END, str(log)], capture_output=True, text=True,
                            cwd=REPO_ROOT, timeout=120)
    assert result.returncode == 3, result.stderr[-2000:]
    assert result.stdout == "printed line"
    assert result.stderr.endswith("error line")
    assert log.read_text() == "logged line\n"
