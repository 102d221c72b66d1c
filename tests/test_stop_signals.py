"""Ctrl-C / SIGTERM handling: one stop per burst of signals, a later second signal stops at once."""
from __future__ import annotations

import pytest

from modules.util.commands import StopSignalHandler, TrainCommands


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_signals_in_one_burst_are_one_stop_and_a_later_one_stops_at_once(capsys):
    commands, clock = TrainCommands(), FakeClock()
    handler = StopSignalHandler(commands, repeat_after_s=2.0, clock=clock)
    handler(2, None)  # SIGINT from the terminal
    assert commands.stop_requested
    clock.now += 0.05
    handler(15, None)  # the same Ctrl-C, forwarded by torchrun: not a second request
    clock.now += 5.0
    with pytest.raises(KeyboardInterrupt):
        handler(2, None)  # the user pressed Ctrl-C again
    assert capsys.readouterr().err.count("stopping after this step") == 1
