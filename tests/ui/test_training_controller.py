"""The training worker thread and its queue, with a stand-in trainer (the real one runs in
test_gui_training.py): updates reach the UI thread only through poll(), Stop returns the backup path
and the idle state, a UserError becomes one line."""
from __future__ import annotations

import threading
import time

import pytest

from modules.trainer.GenericTrainer import TrainingStopped
from modules.ui.controllers.training_controller import (
    IDLE,
    STARTING,
    TRAINING,
    Event,
    TrainingController,
    TrainState,
    format_duration,
)
from modules.util.commands import TrainCommands, TrainUpdate
from modules.util.errors import UserError


class FakeTrainer:
    """Reports a step at a time until stopped; optionally fails."""

    def __init__(self, config, callbacks, commands, fail=None, steps=1000):
        self.callbacks, self.commands, self.fail, self.steps = callbacks, commands, fail, steps
        self.closed = False
        self.thread = None

    def start(self):
        self.thread = threading.current_thread()
        self.callbacks.on_phase("loading model", 0, 0)
        if self.fail:
            raise self.fail

    def train(self):
        for step in range(1, self.steps + 1):
            self.callbacks.on_update(TrainUpdate(step, self.steps, 0, 1, 0.5 / step, 10.0, "training"))
            if self.commands.stop_requested:
                raise TrainingStopped("workspace/backup/step-00000001")
            time.sleep(0.005)

    def end(self):
        return ["output/lora.safetensors"]

    def close(self):
        self.closed = True


def run_until(controller, condition, timeout=10.0):
    events = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        events += controller.poll()
        if condition():
            return events
        time.sleep(0.005)
    raise AssertionError("timed out")


def test_updates_arrive_only_through_poll_on_the_calling_thread():
    made = []
    controller = TrainingController(lambda *a: made.append(FakeTrainer(*a, steps=3)) or made[-1])
    controller.start(object())
    assert controller.wait(10)
    assert controller.state.step == 0  # nothing applied until the UI thread polls
    events = controller.poll()
    assert [e.kind for e in events] == ["phase", "phase", "update", "update", "update", "finished", "done"]
    assert made[0].thread is not threading.current_thread()
    state = controller.state
    assert (state.phase, state.step, state.total_steps) == (IDLE, 3, 3)
    assert state.outputs == ["output/lora.safetensors"] and state.status.startswith("done")


def test_stop_reports_the_backup_and_returns_to_idle():
    made = []
    controller = TrainingController(lambda *a: made.append(FakeTrainer(*a)) or made[-1])
    controller.start(object())
    run_until(controller, lambda: controller.state.step >= 1)
    controller.stop()
    assert controller.state.phase == "stopping"
    events = run_until(controller, lambda: not controller.running)
    assert [e.kind for e in events][-2:] == ["stopped", "done"]
    assert controller.state.backup_path == "workspace/backup/step-00000001"
    assert "backup written" in controller.state.status and made[0].closed


@pytest.mark.parametrize("error, expected", [
    (UserError("config key 'base_model_name' is empty: set it"), "config key 'base_model_name' is empty: set it"),
    (RuntimeError("boom"), "RuntimeError: boom (the log has the details)"),
])
def test_errors_in_the_worker_become_one_line(error, expected):
    controller = TrainingController(lambda *a: FakeTrainer(*a, fail=error))
    controller.start(object())
    events = run_until(controller, lambda: not controller.running)
    assert [e.payload for e in events if e.kind == "error"] == [expected]
    assert controller.state.error == expected and controller.state.phase == IDLE


def test_a_second_start_while_running_is_refused():
    controller = TrainingController(lambda *a: FakeTrainer(*a))
    controller.start(object())
    try:
        with pytest.raises(UserError, match="already running"):
            controller.start(object())
    finally:
        controller.stop()
        run_until(controller, lambda: not controller.running)


def test_backup_and_sample_requests_only_while_running():
    controller = TrainingController(lambda *a: FakeTrainer(*a))
    assert not controller.backup_now() and not controller.sample_now()
    controller.start(object())
    assert controller.backup_now() and controller.sample_now()
    assert controller.commands.take_backup() and controller.commands.take_sample()
    controller.stop()
    run_until(controller, lambda: not controller.running)


def test_progress_texts():
    state = TrainState(step=3, total_steps=10, epoch=1, epochs=2, loss=0.123456, eta_seconds=3725)
    assert state.progress_text() == "step 3/10 · epoch 2/2"
    assert state.loss_text() == "loss 0.1235"
    assert state.eta_text() == "ETA 1:02:05"
    assert format_duration(59.6) == "1:00"
    assert state.fraction == 0.3


def test_a_message_said_during_a_run_stays_under_the_runs_progress():
    controller = TrainingController(lambda *a: FakeTrainer(*a))
    controller.start(object())
    try:
        run_until(controller, lambda: controller.state.step >= 2)
        controller.say("tensorboard serves http://127.0.0.1:6006/")  # an action's result while training
        step = controller.state.step
        run_until(controller, lambda: controller.state.step > step + 1)
        line, news = controller.state.shown_status().splitlines()
        assert line == f"training step {controller.state.step}/1000"  # the progress now, not an old phase
        assert news == "tensorboard serves http://127.0.0.1:6006/"
        controller.queue.put(Event("status", "validation loss 0.12345"))  # the run's news replaces the message
        controller.poll()
        assert controller.state.shown_status().splitlines()[1] == "validation loss 0.12345"
    finally:
        controller.stop()
        run_until(controller, lambda: not controller.running)


def apply(controller, *events):
    for kind, payload in events:
        controller._apply(Event(kind, payload))
    return controller.state.shown_status()


def update(step, total=600):
    return ("update", TrainUpdate(step, total, 0, 1, 0.1, 5.0, "training"))


def test_the_status_line_shows_what_the_run_does_now_and_goes_back_to_training():
    """Samples every 40 steps and backups every 100: at step 60 the line says training, not "sampling" (as it did
    for most of a run), and a failed backup is red only until the next one is written."""
    controller = TrainingController()
    controller.state = TrainState(phase=STARTING, status="")  # as start() leaves it; the events: the worker's
    assert apply(controller, ("run", ("demo", "/tmp/ws/demo")), ("progress", ("caching (vae)", 13, 40))) == \
        "run demo: caching (vae) 13/40"
    assert apply(controller, update(40)) == "run demo: training step 40/600"
    assert apply(controller, ("phase", ("sampling", 1, 2))) == "run demo: sampling 1/2 at step 40"
    assert apply(controller, ("phase", ("sampling", 2, 2))) == "run demo: sampling 2/2 at step 40"
    assert apply(controller, update(41), update(60)) == "run demo: training step 60/600"
    assert apply(controller, update(100), ("phase", ("writing backup", 0, 0))) == \
        "run demo: writing backup at step 100"
    line = apply(controller, ("status", "backup failed: disk full"), update(101))
    assert line == "run demo: training step 101/600 · backup failed: disk full" and controller.state.shows_error
    line = apply(controller, update(200), ("phase", ("writing backup", 0, 0)), update(201))
    assert line == "run demo: training step 201/600" and not controller.state.shows_error
    controller.state.phase = TRAINING
    assert controller.backup_now() is False  # no worker: nothing to ask
    controller.commands = TrainCommands()
    controller.backup_now()
    assert apply(controller) == "run demo: training step 201/600 · a backup follows this step"
    assert apply(controller, ("phase", ("writing backup", 0, 0))) == "run demo: writing backup at step 201"
    apply(controller, ("finished", ["out/lora.safetensors"]), ("done", None))
    assert controller.state.shown_status() == "done: out/lora.safetensors"


def test_a_new_run_starts_with_nothing_said_of_the_last_one():
    controller = TrainingController(lambda *a: FakeTrainer(*a, fail=UserError("config key 'x' is bad")))
    controller.start(object())
    run_until(controller, lambda: not controller.running)
    assert controller.state.status_is_error
    controller.trainer_factory = lambda *a: FakeTrainer(*a, steps=3000)
    controller.start(object())
    try:
        assert controller.state.shown_status() == "starting" and not controller.state.shows_error
        run_until(controller, lambda: controller.state.step >= 1)
        assert "bad" not in controller.state.shown_status()
    finally:
        controller.stop()
        run_until(controller, lambda: not controller.running)


def test_an_error_is_no_longer_shown_once_a_new_message_comes():
    controller = TrainingController(lambda *a: FakeTrainer(*a, fail=UserError("config key 'x' is bad")))
    controller.start(object())
    run_until(controller, lambda: not controller.running)
    assert controller.state.status_is_error and controller.state.status == "error: config key 'x' is bad"
    controller.say("config exported to /tmp/config.json")
    assert (controller.state.status, controller.state.status_is_error) == ("config exported to /tmp/config.json", False)


class CachingTrainer(FakeTrainer):
    """Caches 3 clips, trains 2 steps, and at the end reports that every preview sample was skipped."""

    def start(self):
        for done in range(4):
            self.callbacks.on_progress("caching (vae)", done, 3)

    def end(self):
        self.callbacks.on_warning("every preview sample (1) was skipped: sample 0: bad")
        return ["output/lora.safetensors"]


def test_the_caching_phase_shows_its_own_progress_until_the_first_step():
    controller = TrainingController(lambda *a: CachingTrainer(*a, steps=2))
    controller.start(object())
    assert controller.wait(10)
    seen = []
    while not controller.queue.empty():  # the events one by one, as polls at any moment would see them
        event = controller.queue.get_nowait()
        controller._apply(event)
        if event.kind in ("progress", "update"):
            seen.append((controller.state.progress_text(), controller.state.fraction))
    assert seen[:4] == [("caching (vae) 0/3", 0.0), ("caching (vae) 1/3", 1 / 3), ("caching (vae) 2/3", 2 / 3),
                        ("caching (vae) 3/3", 1.0)]
    assert seen[4] == ("step 1/2 · epoch 1/1", 0.5)  # the first step: training's own progress from here


def test_what_a_finished_run_skipped_is_said_at_the_end_in_red():
    controller = TrainingController(lambda *a: CachingTrainer(*a, steps=2))
    controller.start(object())
    run_until(controller, lambda: not controller.running)
    state = controller.state
    assert state.warnings == ["every preview sample (1) was skipped: sample 0: bad"]
    assert state.status == "done: output/lora.safetensors; every preview sample (1) was skipped: sample 0: bad"
    assert state.status_is_error
