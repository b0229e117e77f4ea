"""A TensorFlow loop marked as the TensorFlow Profiler guide marks it,
`with tf.profiler.experimental.Trace("train", step_num=step, _r=1):`, needs no tfobs code:
each such trace is a step to the runtime (timed, windows opened and ended on its
boundaries), as it is a step to XProf. Traces without `_r` are not steps, and the traces
Keras makes itself (tf_keras's fit and evaluate) are left to tfobs's Keras callback.
"""

from __future__ import annotations

import threading
import time

import pytest

tf = pytest.importorskip("tensorflow")

import tfobs  # noqa: E402
from tests.support.memory_exporter import MemoryExporter  # noqa: E402
from tfobs.capture import markers, tf_steps  # noqa: E402
from tfobs.capture.tf_profiler import TfBackend  # noqa: E402
from tfobs.config import Config  # noqa: E402
from tfobs.runtime import Runtime  # noqa: E402

Trace = tf.profiler.experimental.Trace


@tf.function
def _train(x):
    return tf.reduce_sum(tf.matmul(x, x))


@pytest.fixture
def runtime(tmp_path):
    config = Config.load(environ={}, metrics_port=-1, interval_steps=20, window_steps=4,
                         first_window_step=5, overhead_budget=0.5, nvml=False,
                         framework="tensorflow", reduce_in="thread",
                         capture_dir=str(tmp_path))
    exporter = MemoryExporter()
    rt = Runtime(config, sinks=[exporter], step_sink=exporter).start()
    yield rt
    rt.stop(5.0)
    assert tf_steps.hooks.saved is None  # the class is TensorFlow's own again


@pytest.fixture
def stops(monkeypatch):
    """At each profiler stop: (thread, whether a step was open on it)."""
    seen: list[tuple[str, bool]] = []
    original = TfBackend.stop

    def stop(self, *args):
        seen.append((threading.current_thread().name, markers._step_depth() > 0))
        return original(self, *args)

    monkeypatch.setattr(TfBackend, "stop", stop)
    return seen


def _guide_loop(steps: int, first: int = 0) -> None:
    x = tf.ones((64, 64))
    for i in range(first, first + steps):
        with Trace("train", step_num=i, _r=1):
            with Trace("load"):  # a plain trace inside the step: no step of its own
                time.sleep(0.002)
            _train(x)
            # 50 ms a step: a second of training between the two windows, so the first
            # window's cost (the profiler's stop and its reduction, seconds on a loaded
            # machine) leaves the duty-cycle budget room for the second
            time.sleep(0.05)


@pytest.mark.slow  # windows reduced: seconds
@pytest.mark.waits
def test_a_loop_marked_with_traces_is_profiled_without_tfobs_code(runtime, stops):
    _guide_loop(30)
    assert runtime.wait_idle(30)
    assert runtime.health.steps == 30  # every marked step timed, nested traces not
    assert len(runtime.sinks[0].all_steps()) == 30
    records = [r for _, r in runtime.sinks[0].published]
    assert [r.first_step for r in records] == [5, 20], runtime.health.snapshot().windows
    assert {r.outcome for r in records} == {"captured"}
    # ended on the training thread between two of its steps, as with tfobs.step
    assert stops == [("MainThread", False)] * 2
    assert {r.end_at for r in records} == {"step_boundary"}
    summary = runtime.last_summary
    assert summary.steps.method == "markers"
    assert summary.steps.count >= 2 and summary.steps.mean_s > 0.02


def test_traces_without_root_or_from_keras_are_no_steps(runtime):
    x = tf.ones((8, 8))
    for i in range(4):
        with Trace("train", step_num=i):  # no _r: XProf takes it for no step either
            _train(x)
    assert runtime.health.steps == 0
    tf_keras = pytest.importorskip("tf_keras")
    markers.install_fit_hooks()  # tf_keras imported after enable(): hook it now
    model = tf_keras.Sequential([tf_keras.Input((4,)), tf_keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    data = tf.data.Dataset.from_tensors((tf.ones((8, 4)), tf.ones((8, 2)))).repeat()
    model.fit(data, steps_per_epoch=3, epochs=1, verbose=0)  # Trace("train", _r=1) inside
    assert runtime.health.steps == 3  # timed once, by tfobs's callback
    model.evaluate(data, steps=4, verbose=0)  # Trace("test", _r=1) inside: no training
    assert runtime.health.steps == 3


@pytest.mark.parametrize("name", ["test", "eval", "Validation"])
def test_an_evaluation_marked_as_a_step_is_no_training_step_live(runtime, name):
    # A loop marking its evaluation `Trace("test", step_num=i, _r=1)` beside its training
    # steps: XProf makes both steps (the reduction's note names each); the live step time,
    # count and window plan are the training's. Other names are the job's own step names.
    x = tf.ones((8, 8))
    for i in range(6):
        with Trace("train", step_num=i, _r=1):
            _train(x)
        if i % 3 == 2:
            with Trace(name, step_num=i, _r=1):
                _train(x)
    assert runtime.health.steps == 6
    with Trace("batch", step_num=6, _r=1):  # a job's own name for its training step
        _train(x)
    assert runtime.health.steps == 7


def test_a_trace_that_fails_to_begin_leaves_no_step_open(runtime, monkeypatch):
    from tensorflow.python.profiler import trace

    class Refusing:
        @staticmethod
        def TraceMe(name, **kwargs):  # TensorFlow's name
            raise ValueError("refused")

    with monkeypatch.context() as m:  # TensorFlow's own TraceMe failing as the trace begins
        m.setattr(trace, "enabled", lambda: True)
        m.setattr(trace, "_pywrap_traceme", Refusing)
        with pytest.raises(ValueError, match="refused"):
            Trace("train", step_num=1, _r=1)
    assert markers._step_depth() == 0
    assert runtime.health.steps == 1  # begun, then ended with the failure
    with Trace("train", step_num=2, _r=1):
        assert markers._step_depth() == 1
    assert markers._step_depth() == 0


def test_a_step_marked_twice_is_one_step(runtime):
    """The job's step trace around `tfobs.step`, or one `tfobs.step` inside another: the
    inner marker is part of the outer step, not a second one."""
    seen: list[int] = []
    original = runtime.step_begin
    runtime.step_begin = lambda n: (seen.append(n), original(n))[1]
    for i in range(3):
        with Trace("train", step_num=i, _r=1), tfobs.step(i):
            assert markers._step_depth() == 1
    for i in range(3, 5):
        with tfobs.step(i), tfobs.step(100 + i):
            pass
    assert seen == [0, 1, 2, 3, 4]
    assert runtime.health.steps == 5
    assert markers._step_depth() == 0
