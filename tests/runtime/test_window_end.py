"""Where and when a window's tracing ends (real TensorFlow profiler, in-process).

Stopping the profiler tears down XLA's CUPTI tracer; done from a side thread while the job's
compiled steps ran, it killed GPU jobs, and TensorFlow's export from a side thread aborted
multi-worker CPU jobs. So tracing must end on the training thread, between two steps, right
after the job's queued device work drained. Each test records every call of the backend's
`drain` and `stop` (thread, whether a step was open on it) and checks that rule; the first
test also runs the old window end (the capture thread stops tracing while steps run) and
shows the same check catching it.
"""

from __future__ import annotations

import threading
import time

import pytest

tf = pytest.importorskip("tensorflow")

import tfobs  # noqa: E402
from tests.support.memory_exporter import MemoryExporter  # noqa: E402
from tfobs.capture import markers  # noqa: E402
from tfobs.capture.tf_profiler import TfBackend  # noqa: E402
from tfobs.config import Config  # noqa: E402
from tfobs.runtime import Runtime  # noqa: E402
from tfobs.runtime.windows import UNSAFE_END_ENV  # noqa: E402


@tf.function
def _train(x):
    return tf.reduce_sum(tf.matmul(x, x))


@pytest.fixture
def calls(monkeypatch):
    """Every drain and stop of the TF backend: (call, thread name, step open on it)."""
    seen: list[tuple[str, str, bool]] = []
    for name in ("drain", "stop"):
        original = getattr(TfBackend, name)

        def recorded(self, *args, _name=name, _original=original):
            seen.append((_name, threading.current_thread().name, markers._step_depth() > 0))
            return _original(self, *args)

        monkeypatch.setattr(TfBackend, name, recorded)
    return seen


@pytest.fixture
def make_runtime(tmp_path):
    made = []

    def make(**kw):
        opts = {"metrics_port": -1, "interval_steps": 20, "window_steps": 3,
                "first_window_step": 5, "overhead_budget": 0.5, "capture_dir": str(tmp_path),
                "framework": "tensorflow", "nvml": False, "reduce_in": "thread"}
        opts.update(kw)
        exporter = MemoryExporter()
        rt = Runtime(Config(**opts), sinks=[exporter], step_sink=exporter)
        made.append(rt)
        return rt.start()

    yield make
    for rt in made:
        rt.stop(5.0)


def _steps(n: int, start: int = 0, sleep_s: float = 0.0) -> None:
    x = tf.ones((64, 64))
    for i in range(start, start + n):
        with tfobs.step(i):
            _train(x)
            if sleep_s:
                time.sleep(sleep_s)


def ended_between_steps(calls: list[tuple[str, str, bool]]) -> list[str]:
    """What breaks the rule: each stop on MainThread, no step open, after a drain there."""
    problems = []
    for i, (call, thread, in_step) in enumerate(calls):
        if call != "stop":
            continue
        if thread != "MainThread":
            problems.append(f"stop on {thread}")
        if in_step:
            problems.append("stop inside a step")
        if i == 0 or calls[i - 1][:2] != ("drain", thread):
            problems.append(f"stop on {thread} without a drain before it")
    return problems


@pytest.mark.slow  # seconds of training or waiting: the full suite, not the quick one
@pytest.mark.waits
@pytest.mark.parametrize("end", ["step_boundary", "capture_thread (old)"])
def test_tracing_ends_on_the_training_thread_between_steps_after_the_device_drained(
        make_runtime, calls, monkeypatch, end):
    if end.startswith("capture_thread"):
        monkeypatch.setenv(UNSAFE_END_ENV, "capture_thread")
    rt = make_runtime()
    _steps(45, sleep_s=0.1)  # each window reduced before the next is due
    assert rt.wait_idle(30)
    records = [r for _, r in rt.sinks[0].published]
    assert [r.first_step for r in records] == [5, 20, 40]
    stops = [c for c in calls if c[0] == "stop"]
    assert len(stops) == 3, calls
    problems = ended_between_steps(calls)
    if end == "step_boundary":
        assert problems == [], calls
        assert {r.end_at for r in records} == {"step_boundary"}
        assert {r.end_thread for r in records} == {"MainThread"}
        ends = rt.health.snapshot()
        assert ends.window_ends == {"step_boundary": 3}
        assert ends.window_end_s["stop"] > 0 and ends.window_end_s["drain"] > 0
    else:  # the old end: the same check fails, so it can
        assert "stop on tfobs-capture" in problems, calls
        assert {r.end_at for r in records} == {"capture_thread"}


def test_a_capped_window_ends_at_the_next_step_boundary(make_runtime, calls):
    """A window past its time cap is not stopped under a running step: the capture thread
    asks, and the training thread ends it where its next step would begin."""
    rt = make_runtime(window_steps=50, window_max_s=0.3, first_window_step=2,
                      interval_steps=10**6)
    _steps(12, sleep_s=0.1)
    assert rt.wait_idle(30)
    (record,) = [r for _, r in rt.sinks[0].published]
    assert 2 <= record.last_step - record.first_step + 1 < 10  # capped, well before 50
    assert ended_between_steps(calls) == [], calls
    assert record.end_at == "step_boundary"


def test_train_end_ends_the_window_on_the_calling_thread(make_runtime, calls):
    rt = make_runtime(window_steps=50, first_window_step=2, interval_steps=10**6)
    _steps(6)
    rt.train_end()  # Keras's on_train_end, on the training thread
    assert rt.wait_idle(30)
    (record,) = [r for _, r in rt.sinks[0].published]
    assert (record.first_step, record.last_step, record.end_at) == (2, 5, "train_end")
    assert ended_between_steps(calls) == [], calls


@pytest.mark.slow  # seconds of training or waiting: the full suite, not the quick one
@pytest.mark.waits
def test_a_loop_that_stops_stepping_is_ended_by_the_capture_thread_and_counted(
        make_runtime, calls):
    rt = make_runtime(window_steps=50, window_max_s=0.2, first_window_step=2,
                      interval_steps=10**6)
    _steps(5)  # then no step, no train_end: the job does something else
    assert rt.wait_idle(30)
    (record,) = [r for _, r in rt.sinks[0].published]
    assert record.end_at == "capture_thread" and record.end_thread == "tfobs-capture"
    assert rt.health.snapshot().window_ends == {"capture_thread": 1}
    assert record.end_on_training_thread_s == 0.0


@pytest.mark.slow  # seconds of training or waiting: the full suite, not the quick one
@pytest.mark.waits
def test_keras_fit_windows_end_on_the_training_thread(make_runtime, calls):
    import keras

    rt = make_runtime(first_window_step=4, interval_steps=20, window_steps=3)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
    model.compile(optimizer="sgd", loss="mse")
    x = tf.random.uniform((32 * 45, 8), seed=1)
    slow = keras.callbacks.LambdaCallback(on_train_batch_end=lambda *_, **__: time.sleep(0.1))
    model.fit(x, x[:, :4], batch_size=32, epochs=1, verbose=0, callbacks=[slow])
    assert rt.wait_idle(30)
    records = [r for _, r in rt.sinks[0].published]
    assert [r.first_step for r in records] == [4, 20, 40]
    assert ended_between_steps(calls) == [], calls
    assert {r.end_at for r in records} == {"step_boundary"}


class _Bodies:
    """The threads whose step body runs now (the test's own bookkeeping, kept inside each
    `tfobs.step`), and at each profiler stop which others' bodies ran."""

    def __init__(self) -> None:
        self.running: set[str] = set()
        self.lock = threading.Lock()
        self.at_stops: list[tuple[str, list[str]]] = []

    def stopped(self) -> None:
        me = threading.current_thread().name
        with self.lock:
            self.at_stops.append((me, sorted(self.running - {me})))

    def step(self, i: int, x, step_s: float, gap_s: float) -> None:
        me = threading.current_thread().name
        with tfobs.step(i):
            with self.lock:
                self.running.add(me)
            _train(x)
            time.sleep(step_s)
            with self.lock:
                self.running.discard(me)
        time.sleep(gap_s)


@pytest.fixture
def bodies(monkeypatch):
    seen = _Bodies()
    original = TfBackend.stop

    def stop(self, *args):
        seen.stopped()
        return original(self, *args)

    monkeypatch.setattr(TfBackend, "stop", stop)
    return seen


def _in_threads(*targets) -> None:
    threads = [threading.Thread(target=t, name=f"trainer{k}") for k, t in enumerate(targets)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


@pytest.mark.slow  # seconds of training: the full suite, not the quick one
@pytest.mark.waits
def test_two_threads_steps_a_window_ends_while_neither_step_runs(make_runtime, bodies):
    """Two threads marking steps (two models trained side by side): a window ends at a
    step boundary of one of them while the other's step does not run, and the other's
    next step begins after the stop."""
    rt = make_runtime(first_window_step=5, interval_steps=15, window_steps=3)
    x = tf.ones((64, 64))

    def trainer() -> None:
        # 80 steps: windows at 5, 20, 35, 50 and 65; on a loaded machine a window still
        # being reduced when the next is due skips it (one CI run of 50 steps kept one).
        for i in range(80):
            bodies.step(i, x, step_s=0.01, gap_s=0.004)

    _in_threads(trainer, trainer)
    assert rt.wait_idle(30)
    records = [r for _, r in rt.sinks[0].published]
    assert len(records) >= 2 and {r.outcome for r in records} == {"captured"}
    assert len(bodies.at_stops) == len(records)
    # the old end stopped the profiler under the other thread's step, most windows
    assert [others for _, others in bodies.at_stops] == [[]] * len(records), bodies.at_stops
    assert {r.end_at for r in records} == {"step_boundary"}


@pytest.mark.slow  # seconds of training: the full suite, not the quick one
@pytest.mark.waits
def test_a_window_under_another_threads_long_step_ends_after_a_bounded_wait(
        make_runtime, bodies, caplog):
    """One thread's step outlasts the other's whole window: the end waits for a boundary
    none straddles, then, OVERLAP_END_WAIT_S later, ends at one and says so once."""
    from tfobs.runtime.windows import OVERLAP_END_WAIT_S

    rt = make_runtime(first_window_step=3, interval_steps=10**6, window_steps=3)
    x = tf.ones((64, 64))

    def quick() -> None:
        for i in range(60):
            bodies.step(i, x, step_s=0.02, gap_s=0.0)

    def long() -> None:
        time.sleep(0.02)
        bodies.step(0, x, step_s=OVERLAP_END_WAIT_S + 1.5, gap_s=0.0)

    caplog.set_level("INFO", logger="tfobs.progress")
    _in_threads(quick, long)
    assert rt.wait_idle(30)
    (record,) = [r for _, r in rt.sinks[0].published]
    assert record.outcome == "captured" and record.end_at == "steps_open"
    # the window ran past its 3 steps while it waited, by about the wait
    assert record.last_step - record.first_step + 1 >= OVERLAP_END_WAIT_S / 0.03
    assert [others for _, others in bodies.at_stops] == [["trainer1"]]
    assert rt.health.snapshot().window_ends == {"steps_open": 1}
    said = [r.getMessage() for r in caplog.records if "steps of several threads" in
            r.getMessage()]
    assert len(said) == 1 and "mark the steps of one thread only" in said[0]


@pytest.mark.slow  # seconds of training: the full suite, not the quick one
@pytest.mark.waits
def test_threads_each_numbering_their_own_steps_keep_windows_of_the_opener_s_steps(
        make_runtime, bodies, caplog):
    """Four threads, each a loop of its own numbered from 0, started apart: their numbers
    interleave (12 on one, 4 on another). That is no new count ("step numbers went back"
    re-planned the windows and ended them), and the window counts the steps of the thread
    that opened it: the others' numbers kept one window open over the whole run
    ("steps 5-277")."""
    rt = make_runtime(first_window_step=5, interval_steps=40, window_steps=3)
    x = tf.ones((64, 64))

    def trainer(delay_s: float):
        def run() -> None:
            time.sleep(delay_s)
            for i in range(60):
                bodies.step(i, x, step_s=0.005, gap_s=0.002)
        return run

    caplog.set_level("INFO", logger="tfobs.progress")
    _in_threads(*(trainer(0.12 * k) for k in range(4)))
    assert rt.wait_idle(30)
    records = [r for _, r in rt.sinks[0].published]
    assert [m for m in (r.getMessage() for r in caplog.records) if "went back" in m] == []
    assert [r.first_step for r in records] == [5, 40], records
    # Each window: its opener's 3 steps, and those it ran on while the others' steps were
    # open at its boundaries (at most OVERLAP_END_WAIT_S, about 140 of these steps).
    assert all(r.outcome == "captured" and r.last_step >= r.first_step + 2 for r in records)
    assert all(r.last_step < 60 for r in records)
