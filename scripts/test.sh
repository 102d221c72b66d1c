#!/usr/bin/env bash
# Installs (first run only) and runs the test suite on one pytest-xdist worker per core (2 unless
# WANTRAINER_TEST_WORKERS says otherwise), each on one torch thread (tests/conftest.py), and prints at the end the
# run's wall time against its budget and the slowest test files (tests/time_budget.py).
#   (no option)  everything, the slow end-to-end and learning tests included: what CI (.ci/run) runs
#   --fast       everything but the `slow` and `learning` tests: a developer's edit loop (about 5 minutes)
# Other arguments go to pytest (e.g. -q, -x, a test file, -k NAME, -n 1).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --locked  # the hashed lock: CI installs exactly what it was made with
selection=()
budget=1500  # seconds: CI's whole suite on 2 cores
args=()
for arg in "$@"; do
  if [ "$arg" = --fast ]; then
    selection=(-m "not slow and not learning")
    budget=300
  else
    args+=("$arg")
  fi
done
# --dist loadgroup: the tests of one trained learning model share a worker (their xdist_group), so it trains once,
# and tests/conftest.py pins each learning run to a worker by its cost (tests/xdist_pinning.py);
# --no-loadscope-reorder keeps conftest's order (the longest work first) instead of xdist's by-group-size one.
exec .venv/bin/python -m pytest -n "${WANTRAINER_TEST_WORKERS:-2}" --dist loadgroup --no-loadscope-reorder \
  --time-budget "$budget" "${selection[@]}" "${args[@]}"
