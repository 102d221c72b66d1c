"""The test-time budget check (`pytest --time-budget SECONDS`, which scripts/test.sh passes): at the end of the run,
its wall time against the budget, and the slowest test files with their sum, so a file that grows shows where the
time went. Per file: its tests' setup + call + teardown time (wall, on whichever xdist worker ran them) and the CPU
time they took (the test process's and its child programs'), which a busy machine stretches far less than the wall
time: the CPU sum over the worker count is the wall time the run would take on free cores."""
from __future__ import annotations

import os
import time
from collections import defaultdict

import pytest

SHOWN = 15  # slowest files printed (--time-budget-files)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--time-budget", type=float, default=None, metavar="SECONDS",
                     help="print the run's wall time against SECONDS and the slowest test files at the end")
    parser.addoption("--time-budget-files", type=int, default=SHOWN, metavar="N",
                     help=f"how many of the slowest test files --time-budget prints (default {SHOWN})")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("time_budget") is None:
        return
    config.pluginmanager.register(CpuTime(), "time-budget-cpu")
    if not hasattr(config, "workerinput"):  # the xdist controller, or a run without xdist
        config.pluginmanager.register(TimeBudget(config), "time-budget")


def _cpu_seconds() -> float:
    """CPU time of this process and of its children that have ended (tests that run scripts, torchrun...)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


class CpuTime:
    """Runs where the tests run (each worker): adds each phase's CPU seconds to its report."""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        started = item.stash.get(_STARTED, None)
        if started is not None:
            outcome.get_result().user_properties.append(("cpu_s", _cpu_seconds() - started))
            item.stash[_STARTED] = _cpu_seconds()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item):
        item.stash[_STARTED] = _cpu_seconds()


_STARTED = pytest.StashKey[float]()


class TimeBudget:
    def __init__(self, config: pytest.Config):
        self.budget_s = config.getoption("time_budget")
        self.shown = config.getoption("time_budget_files")
        workers = getattr(config.option, "numprocesses", None)
        self.workers = workers if isinstance(workers, int) and workers > 0 else 1
        self.start = time.monotonic()
        self.wall: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        name = report.nodeid.split("::")[0]
        self.wall[name] += report.duration
        self.cpu[name] += sum(value for key, value in report.user_properties if key == "cpu_s")

    def pytest_terminal_summary(self, terminalreporter) -> None:
        wall = time.monotonic() - self.start
        slowest = sorted(self.wall, key=lambda name: -self.wall[name])[:self.shown]
        write = terminalreporter.write_line
        terminalreporter.section("test-time budget")
        write("    wall      CPU  test file (its tests' setup + call + teardown, summed over workers)")
        for name in slowest:
            write(f"{self.wall[name]:7.1f} s {self.cpu[name]:7.1f} s  {name}")
        write(f"{sum(self.wall[n] for n in slowest):7.1f} s {sum(self.cpu[n] for n in slowest):7.1f} s  "
              f"the {len(slowest)} slowest files")
        total_cpu = sum(self.cpu.values())
        write(f"{sum(self.wall.values()):7.1f} s {total_cpu:7.1f} s  all {len(self.wall)} files; CPU / {self.workers} "
              f"worker(s) = {total_cpu / self.workers:.0f} s")
        verdict = "within" if wall <= self.budget_s else "OVER"
        write(f"wall {wall:.0f} s of a {self.budget_s:.0f} s budget: {verdict} budget", bold=True,
              red=verdict == "OVER", green=verdict == "within")
