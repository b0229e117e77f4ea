"""Step markers: Keras fit without code changes (Keras 3 and tf_keras), tfobs.step loops."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import statistics
import time

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import tfobs  # noqa: E402
from tests.support.memory_exporter import MemoryExporter  # noqa: E402
from tfobs.capture import markers  # noqa: E402
from tfobs.config import Config  # noqa: E402
from tfobs.once import Once  # noqa: E402
from tfobs.runtime import Runtime  # noqa: E402


def _runtime(config: Config) -> Runtime:
    exporter = MemoryExporter()
    return Runtime(config, sinks=[exporter], step_sink=exporter)


@pytest.fixture
def runtime(tmp_path):
    config = Config.load(environ={}, metrics_port=-1, interval_steps=1000, window_steps=6,
                         first_window_step=10**6, overhead_budget=0.5,
                         capture_dir=str(tmp_path))
    rt = _runtime(config).start()
    yield rt
    rt.stop(5.0)


def begun_steps(runtime: Runtime) -> list[int]:
    """The step numbers the runtime is told of from now on, in order (the runtime still
    gets each one)."""
    seen: list[int] = []
    original = runtime.step_begin
    runtime.step_begin = lambda n: (seen.append(n), original(n))[1]
    return seen


def _keras3_model():
    keras = tf.keras
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def _dataset():
    return tf.data.Dataset.from_tensors((tf.ones((8, 4)), tf.ones((8, 2)))).repeat()


def test_keras3_fit_is_marked_without_code_changes(runtime):
    exporter = runtime.sinks[0]
    model = _keras3_model()
    model.fit(_dataset(), steps_per_epoch=5, epochs=2, verbose=0)
    assert len(exporter.all_steps()) == 10  # every step timed, not only profiled ones
    assert all(d > 0 for d, _ in exporter.all_steps())
    # a window: exemplars while it is open, and the capture has marker steps
    assert runtime.capture_now()
    model.fit(_dataset(), steps_per_epoch=10, epochs=1, verbose=0)
    assert runtime.wait_idle(30)
    with_exemplar = [e for _, e in exporter.all_steps()[10:] if e]
    assert len(with_exemplar) == 6
    assert set(with_exemplar[0]) == {"trace_id", "span_id"}
    assert len({e["span_id"] for e in with_exemplar}) == 6  # one span per step
    assert runtime.health.windows == {"captured": 1}, runtime.health
    summary = runtime.last_summary
    assert summary.steps.method == "markers" and summary.steps.count >= 3


def test_step_numbers_continue_across_fits_and_callbacks_are_not_doubled(runtime):
    seen = begun_steps(runtime)
    model = _keras3_model()
    cb = markers.keras3_callback_class()()
    model.fit(_dataset(), steps_per_epoch=3, epochs=1, verbose=0, callbacks=[cb])
    # callbacks passed positionally (fit's 6th argument) also work
    model.fit(_dataset(), None, None, 1, 0, [], steps_per_epoch=3)
    assert len(seen) == 6  # the explicit callback was not joined by a second one
    assert seen[3:] == [seen[2] + 1, seen[2] + 2, seen[2] + 3]  # optimizer iterations


def test_tf_keras_fit_is_marked(runtime):
    tf_keras = pytest.importorskip("tf_keras")
    markers.install_fit_hooks()  # tf_keras imported after enable(): hook it now
    exporter = runtime.sinks[0]
    before = len(exporter.all_steps())
    model = tf_keras.Sequential([tf_keras.Input((4,)), tf_keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(_dataset(), steps_per_epoch=4, epochs=1, verbose=0)
    assert len(exporter.all_steps()) - before == 4


def test_keras3_callback_in_a_tf_keras_fit_times_steps_once(runtime):
    """`tfobs.KerasCallback` is Keras 3's; passed to a tf_keras fit (TF_USE_LEGACY_KERAS
    scripts) it must not break the fit (tf_keras asks callbacks `_implements_*`), must not
    be joined by the tf_keras one, and must leave step markers to tf_keras."""
    tf_keras = pytest.importorskip("tf_keras")
    markers.install_fit_hooks()
    seen = begun_steps(runtime)
    model = tf_keras.Sequential([tf_keras.Input((4,)), tf_keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    cb = tfobs.KerasCallback()
    model.fit(_dataset(), steps_per_epoch=4, epochs=1, verbose=0, callbacks=[cb])
    assert seen == [0, 1, 2, 3]  # each step once: no second tfobs callback was added
    assert cb._emit_markers is False  # tf_keras's own "train" markers, not a second set


def test_fit_is_restored_after_stop(tmp_path):
    keras = tf.keras
    before = keras.Model.fit
    config = Config.load(environ={}, metrics_port=-1, capture_dir=str(tmp_path))
    rt = _runtime(config).start()
    assert keras.Model.fit is not before
    assert keras.Model.fit.__wrapped__ is before
    rt.stop(2.0)
    assert keras.Model.fit is before
    assert markers.current_hooks() is None


def test_train_on_batch_is_restored_after_stop(tmp_path):
    keras = tf.keras
    before = keras.Model.train_on_batch
    config = Config.load(environ={}, metrics_port=-1, capture_dir=str(tmp_path))
    rt = _runtime(config).start()
    assert keras.Model.train_on_batch.__wrapped__ is before
    rt.stop(2.0)
    assert keras.Model.train_on_batch is before


def test_train_on_batch_loop_is_marked_and_profiled(runtime):
    """A hand-written Keras loop (`train_on_batch`, as GAN and RL scripts train) gets steps,
    a window and XProf's marker steps without code changes; numbers start at the
    optimizer's iteration count."""
    exporter = runtime.sinks[0]
    seen = begun_steps(runtime)
    model = _keras3_model()
    model.fit(_dataset(), steps_per_epoch=3, epochs=1, verbose=0)  # optimizer at 3
    x, y = tf.ones((8, 4)), tf.ones((8, 2))
    assert runtime.capture_now()
    for _ in range(10):
        model.train_on_batch(x, y)
    assert runtime.wait_idle(30)
    assert seen == list(range(13))  # fit's 0..2, then one step per call from 3
    assert len(exporter.all_steps()) == 13
    assert runtime.health.windows == {"captured": 1}, runtime.health
    summary = runtime.last_summary
    assert summary.steps.method == "markers" and summary.steps.count >= 3
    assert runtime.last_record.first_step == 3


def test_train_on_batch_of_two_models_numbers_calls_in_turn(runtime):
    """A GAN's discriminator and generator each train_on_batch once per iteration, with
    optimizers of their own: the calls are numbered in turn, never the same number twice."""
    seen = begun_steps(runtime)
    d, g = _keras3_model(), _keras3_model()
    x, y = tf.ones((8, 4)), tf.ones((8, 2))
    for _ in range(3):
        d.train_on_batch(x, y)
        g.train_on_batch(x, y)
    assert seen == sorted(set(seen)) and len(seen) == 6


def test_train_on_batch_inside_a_marked_step_is_not_a_step_of_its_own(runtime):
    exporter = runtime.sinks[0]
    model = _keras3_model()
    x, y = tf.ones((8, 4)), tf.ones((8, 2))
    for i in range(4):
        with tfobs.step(100 + i):  # the user's marking (docs/usage.md) stays in charge
            model.train_on_batch(x, y)
            model.train_on_batch(x, y)
    assert len(exporter.all_steps()) == 4
    model.train_on_batch(x, y)  # outside a step again: marked
    assert len(exporter.all_steps()) == 5


def test_train_on_batch_errors_reach_the_caller_and_end_the_step(runtime):
    exporter = runtime.sinks[0]
    model = _keras3_model()
    with pytest.raises(Exception):  # noqa: B017 - Keras's own error for a wrong shape
        model.train_on_batch(tf.ones((8, 3)), tf.ones((8, 2)))
    assert len(exporter.all_steps()) == 1
    assert markers._step_depth() == 0  # the step is closed: the next call is marked
    model.train_on_batch(tf.ones((8, 4)), tf.ones((8, 2)))
    assert len(exporter.all_steps()) == 2


def test_tf_keras_train_on_batch_is_marked(runtime):
    tf_keras = pytest.importorskip("tf_keras")
    markers.install_fit_hooks()
    exporter = runtime.sinks[0]
    before = len(exporter.all_steps())
    model = tf_keras.Sequential([tf_keras.Input((4,)), tf_keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    for _ in range(3):
        model.train_on_batch(tf.ones((8, 4)), tf.ones((8, 2)))
    assert len(exporter.all_steps()) - before == 3


def test_custom_loop_step_feeds_runtime_and_marks_capture(runtime):
    exporter = runtime.sinks[0]

    @tf.function
    def train(x):
        return tf.reduce_sum(x * x)

    x = tf.ones((16,))
    assert runtime.capture_now()
    for i in range(10):
        with tfobs.step(i):
            train(x)
    assert runtime.wait_idle(30)
    assert len(exporter.all_steps()) == 10
    assert runtime.last_summary.steps.method == "markers"
    assert runtime.last_record.first_step == 0 and runtime.last_record.last_step == 5


def test_step_exception_still_ends_the_step(runtime):
    exporter = runtime.sinks[0]
    with pytest.raises(ZeroDivisionError), tfobs.step(1):
        1 / 0  # noqa: B018
    assert len(exporter.all_steps()) == 1


def test_a_fit_that_died_mid_step_leaves_the_next_fit_counted(runtime):
    # Keras calls neither on_train_batch_end nor on_train_end when fit raises (a bad record,
    # out of memory, Ctrl-C): its open step made every later step on the thread "nested",
    # so uncounted, for the rest of the process.
    exporter = runtime.sinks[0]
    model = _keras3_model()

    def batches():
        for i in range(40):
            if i == 7:
                raise ValueError("a corrupt record")
            yield np.ones((8, 4), "float32"), np.ones((8, 2), "float32")

    ds = tf.data.Dataset.from_generator(batches, output_signature=(
        tf.TensorSpec((8, 4), tf.float32), tf.TensorSpec((8, 2), tf.float32)))
    for stop in (ds, KeyboardInterrupt):
        before = len(exporter.all_steps())
        if stop is KeyboardInterrupt:  # Ctrl-C in a batch: from a callback, as a signal lands
            class Interrupt(tf.keras.callbacks.Callback):
                def on_train_batch_begin(self, batch, logs=None):
                    if batch == 3:
                        raise KeyboardInterrupt

            with pytest.raises(KeyboardInterrupt):
                model.fit(_dataset(), steps_per_epoch=10, epochs=1, verbose=0,
                          callbacks=[Interrupt()])
        else:
            with pytest.raises(Exception, match="corrupt record"):
                model.fit(stop, epochs=1, verbose=0)
        assert markers._step_depth() == 0
        model.fit(_dataset(), steps_per_epoch=5, epochs=1, verbose=0)
        assert len(exporter.all_steps()) - before >= 5


class _InterruptingHooks:
    """Step hooks that raise KeyboardInterrupt in step_begin: a Ctrl-C landing while tfobs
    opens a window (the profiler's start can take seconds)."""

    def __init__(self) -> None:
        self.ends: list[int] = []

    def step_begin(self, step_num: int) -> None:
        if step_num == 2:
            raise KeyboardInterrupt

    def step_end(self, step_num: int, duration_s: float,
                 trace_key: tuple[str, int] | None = None) -> None:
        self.ends.append(step_num)

    def train_end(self) -> None:
        pass


def _marked_inside(num: int) -> None:
    with tfobs.step(num):
        assert markers._step_depth() == 1


def test_a_ctrl_c_in_tfobss_own_step_code_leaves_no_step_open():
    hooks = _InterruptingHooks()
    markers.set_hooks(hooks)
    try:
        for i in range(4):
            try:
                with tfobs.step(i):
                    pass
            except KeyboardInterrupt:
                pass
        assert markers._step_depth() == 0 and hooks.ends == [0, 1, 3]
        # A step inside a live one is part of it.
        with tfobs.step(20):
            _marked_inside(21)  # a marker in a function the step calls: part of step 20
            assert markers._step_depth() == 1
        assert hooks.ends[-1] == 20 and 21 not in hooks.ends
        # the same `with` entered again after its step was left open: the loop's next step
        for i in range(30, 33):
            marker = tfobs.step(i)
            marker.__enter__()  # its exit never runs (a Ctrl-C as it began)
        assert markers._step_depth() == 1  # one open, not three
        marker.__exit__(None, None, None)
        assert markers._step_depth() == 0 and hooks.ends[-1] == 32
    finally:
        markers.set_hooks(None)


@contextlib.contextmanager
def _my_step(num: int):
    """A job's own context manager around tfobs.step (its frame is suspended while the
    step runs)."""
    with tfobs.step(num):
        yield


def test_live_outer_steps_held_by_a_context_manager_or_exitstack_stay_outer():
    # A step opened by a frame that is not running now (a contextmanager's generator, an
    # ExitStack, a Keras callback) is still live: a step inside it is part of it, counted
    # once. Taking such a step for one left open counted every step twice.
    hooks = _InterruptingHooks()
    markers.set_hooks(hooks)
    try:
        for i in range(30, 33):  # (the hooks interrupt step 2 only)
            with _my_step(i), tfobs.step(100 + i):
                assert markers._step_depth() == 1
        with contextlib.ExitStack() as stack:
            stack.enter_context(tfobs.step(40))
            with tfobs.step(140):
                pass
        assert markers._step_depth() == 0 and hooks.ends == [30, 31, 32, 40]
    finally:
        markers.set_hooks(None)


def test_a_jax_annotation_made_and_never_entered_leaves_no_step_open():
    # StepTraceAnnotation begins its step when it is made: one made and dropped (or a Ctrl-C
    # between its making and its `with`) left the thread's step open, and no later step
    # counted. Freed, its step is closed at the next one.
    hooks = _InterruptingHooks()
    with _jax_steps_hooked(hooks) as jax:
        dropped = jax.profiler.StepTraceAnnotation("train", step_num=5)
        assert markers._step_depth() == 1
        del dropped
        for i in range(6, 9):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                pass
    assert markers._step_depth() == 0 and hooks.ends == [6, 7, 8]


@contextlib.contextmanager
def _jax_steps_hooked(hooks):
    """JAX's StepTraceAnnotation wrapped for tfobs (as a running tfobs does) with `hooks`
    as the runtime; JAX itself given to the body."""
    jax = pytest.importorskip("jax")
    from tfobs.capture import jax_steps

    ours = jax_steps.hooks.saved is None
    jax_steps.install()
    markers.set_hooks(hooks)
    try:
        yield jax
    finally:
        markers.set_hooks(None)
        if ours:
            jax_steps.uninstall()


def test_a_step_given_no_usable_number_is_numbered_not_raised(runtime, monkeypatch, caplog):
    # `tfobs.step(None)` (a loop that does not count), a string, NaN: the step still runs and
    # is timed, numbered one past the last step; one warning says what to pass.
    exporter = runtime.sinks[0]
    monkeypatch.setattr(markers, "_said_unnumbered", Once())
    with tfobs.step(tf.constant(7)):
        pass
    nums = []
    for bad in (None, "x", float("nan"), float("inf"), object(), 2**64, -2**63 - 1):
        marker = tfobs.step(bad)
        with marker:
            pass
        nums.append(marker.step_num)
    assert nums == [8, 9, 10, 11, 12, 13, 14]  # past 64 bits: no step number either
    assert len(exporter.all_steps()) == 8
    assert caplog.text.count("not a step number") == 1 and "int(optimizer.iterations)" in \
        caplog.text


@pytest.mark.waits  # times calls: at normal priority in the lanes
def test_marker_is_cheap_without_a_window():
    markers.set_hooks(None)
    with tfobs.step(0):
        pass
    timings = []
    for _ in range(5):
        t0 = time.perf_counter()
        for i in range(2000):
            with markers.step(i):
                pass
        timings.append((time.perf_counter() - t0) / 2000)
    # about 1 us on an idle machine; generous for a busy shared one
    assert statistics.median(timings) < 30e-6


class _SlowHooks:
    """Step hooks that take a known time, to see the markers time tfobs's own work."""

    def step_begin(self, step_num: int) -> None:
        time.sleep(0.002)

    def step_end(self, step_num: int, duration_s: float,
                 trace_key: tuple[str, int] | None = None) -> None:
        time.sleep(0.003)

    def train_end(self) -> None:
        pass


@pytest.mark.waits  # times sleeps: at normal priority in the lanes
def test_markers_time_their_own_work_but_not_the_step():
    markers.set_hooks(_SlowHooks())
    try:
        own0 = markers.own_seconds()
        for i in range(5):
            with tfobs.step(i):
                time.sleep(0.02)  # the training step: not tfobs's work
        spent = markers.own_seconds() - own0
    finally:
        markers.set_hooks(None)
    assert 5 * 0.005 <= spent < 5 * 0.005 + 0.05  # the hooks' 5 ms a step, not the 20 ms


def _marked_loop(monkeypatch, nums):
    """A loop of a traced tf.function step, each marked `tfobs.step(n)` for `nums`, with no
    tfobs running (its markers still write the trace's "train" events)."""
    monkeypatch.setattr(markers, "_backend", None)
    monkeypatch.setattr(markers, "_hooks", None)

    @tf.function
    def train(x):
        return tf.reduce_sum(x * x)

    x = tf.ones((64,))
    train(x)

    def loop():
        for i in nums:
            with tfobs.step(i):
                train(x)

    return loop


def _own_profile(tmp_path, run) -> tfobs.WindowSummary:
    """`run()` under the job's own `tf.profiler.experimental.start/stop` (no tfobs running);
    the capture it wrote, reduced."""
    tf.profiler.experimental.start(str(tmp_path))
    try:
        run()
    finally:
        tf.profiler.experimental.stop()
    (capture,) = tmp_path.rglob("*.xplane.pb")
    return tfobs.analyze(capture)


def test_step_numbers_of_2_to_the_63_or_more_reduce_as_xprof_reads_them(tmp_path,
                                                                      monkeypatch):
    # A uint64 counter or a hashed id as the step number: the marker writes it unsigned,
    # and the reduction failed every window (OverflowError). tfobs reads it as int64 does
    # (wrapped, in order); XProf reads such a number as 0 (a named difference).
    from tests.support.xprof_reference import xprof_steps

    s = _own_profile(tmp_path, _marked_loop(monkeypatch, [2**63 + i for i in range(6)]))
    assert [st.step_num for st in s.steps.items] == [2**63 + i - 2**64 for i in range(1, 5)]
    (capture,) = tmp_path.rglob("*.xplane.pb")
    steps, _ = xprof_steps(capture)
    assert [x["name"] for x in steps] == ["train 0"] * s.steps.count


def test_steps_are_marked_for_the_jobs_own_profiling_without_tfobs_running(
        tmp_path, monkeypatch):
    # No enable(): `tfobs.step` and tfobs's Keras callback still write the "train" markers
    # XProf (and tfobs) read, so TensorBoard's Profile tab shows the steps.
    s = _own_profile(tmp_path / "loop", _marked_loop(monkeypatch, range(20, 30)))
    assert s.steps.method == "markers"
    assert [st.step_num for st in s.steps.items] == list(range(21, 29))  # ends dropped
    model = _keras3_model()
    model.fit(_dataset(), steps_per_epoch=2, epochs=1, verbose=0)
    callback = markers.keras3_callback_class()()
    s = _own_profile(tmp_path / "fit", lambda: model.fit(
        _dataset(), steps_per_epoch=10, epochs=1, verbose=0, callbacks=[callback]))
    assert s.steps.method == "markers" and s.steps.count == 8


_GRAPH_JOB = """
import sys
import numpy as np
import tensorflow as tf
import tfobs

v1 = tf.compat.v1
graph = tf.Graph()
with graph.as_default():
    x = v1.placeholder(tf.float32, (None, 32))
    w = tf.Variable(tf.ones((32, 1)))
    loss = tf.reduce_sum(tf.matmul(x, w) ** 2)
    train_op = v1.train.GradientDescentOptimizer(1e-4).minimize(loss)
    init = v1.global_variables_initializer()
session = v1.Session(graph=graph)
session.run(init)
xs = np.ones((16, 32), np.float32)
tf.profiler.experimental.start(sys.argv[1])
for i in range(12):
    with tfobs.step(i):
        session.run(train_op, feed_dict={x: xs})
tf.profiler.experimental.stop()
"""


def test_a_graph_mode_session_job_is_marked_for_its_own_profiling(tmp_path):
    # A tf.compat.v1 Session job never sets up TensorFlow's eager context: tfobs.step
    # still marks its steps for the job's own profiler, and each step holds the
    # executor work its Session.run started on the thread pool (SessionRun's link).
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", _GRAPH_JOB, str(tmp_path)], check=True,
                   env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, timeout=240)
    (capture,) = tmp_path.rglob("*.xplane.pb")
    s = tfobs.analyze(capture)
    assert s.steps.method == "markers" and s.steps.count == 10
    assert all(st.breakdown_s["host_compute"] > 0 for st in s.steps.items)
    assert (s.steps.calls[0].name, s.steps.calls[0].count) == ("SessionRun", 12)


# One process, both frameworks: each framework's profiler sees only its own markers.
_BOTH_FRAMEWORKS_JOB = """
import json, pathlib, sys
import jax, jax.numpy as jnp
import tensorflow as tf
import tfobs
from tfobs.capture import framework

first, out = sys.argv[1], pathlib.Path(sys.argv[2])
tf_step = tf.function(lambda x: tf.reduce_sum(x * x))
jax_step = jax.jit(lambda x: (x @ x).sum())


def tf_run():
    tf_step(tf.ones((64,)))


def jax_run():
    jax_step(jnp.ones((64, 64))).block_until_ready()


def tf_loop(base):
    tf.profiler.experimental.start(str(out / "tf"))
    for i in range(base, base + 10):
        with tfobs.step(i):
            tf_run()
    tf.profiler.experimental.stop()


def jax_loop(base):
    with jax.profiler.trace(str(out / "jax")):
        for i in range(base, base + 10):
            with tfobs.step(i):
                jax_run()


run = {"tensorflow": (tf_run, tf_loop), "jax": (jax_run, jax_loop)}
other = "jax" if first == "tensorflow" else "tensorflow"
run[first][0]()  # the first framework runs, and steps bind its marker, before the other
for i in range(3):
    with tfobs.step(i):
        run[first][0]()
assert not (framework.jax_running() if other == "jax" else framework.tensorflow_running())
run[other][0]()
run[first][1](20)
run[other][1](40)
found = {}
for name in ("tf", "jax"):
    (capture,) = (out / name).rglob("*.xplane.pb")
    s = tfobs.analyze(capture)
    found[name] = [s.steps.method, [st.step_num for st in s.steps.items]]
print(json.dumps(found))
"""


@pytest.mark.parametrize("first", ["tensorflow", "jax"])
def test_a_process_running_both_frameworks_marks_steps_for_whichever_profiler_records(
        tmp_path, first):
    """No enable(): a job that ran one framework's steps first and the other's later (a JAX
    job fed by tf.data; a TensorFlow job that also runs JAX) gets its steps marked under
    each framework's own profiler, not only the one its first step bound."""
    if importlib.util.find_spec("jax") is None:  # not imported here: the job's own process
        pytest.skip("needs JAX")
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _BOTH_FRAMEWORKS_JOB, first, str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    base = {"tf": 20, "jax": 40} if first == "tensorflow" else {"jax": 20, "tf": 40}
    for name, (method, nums) in found.items():
        assert method == "markers", (name, found)
        assert nums == list(range(base[name] + 1, base[name] + 9)), (name, found)


class _NamedHooks:
    """Step hooks that keep each ended step's number and name in the trace."""

    def __init__(self) -> None:
        self.ended: list[tuple[int, tuple[str, int] | None]] = []

    def step_begin(self, step_num: int) -> None:
        pass

    def step_end(self, step_num: int, duration_s: float,
                 trace_key: tuple[str, int] | None = None) -> None:
        self.ended.append((step_num, trace_key))

    def train_end(self) -> None:
        pass


def test_a_jax_step_annotation_gives_the_runtime_its_own_name():
    # The runtime names a step's exemplar as the trace names the step (marker name and
    # number): a `StepTraceAnnotation("batch", ...)` step is "batch 3", tfobs's own "train 4".
    hooks = _NamedHooks()
    with _jax_steps_hooked(hooks) as jax:
        with jax.profiler.StepTraceAnnotation("batch", step_num=3):
            pass
        with tfobs.step(4):
            pass
    assert hooks.ended == [(3, ("batch", 3)), (4, None)]  # None: tfobs's own ("train", 4)


def test_a_tf_keras_fit_gives_the_runtime_the_numbers_its_own_markers_carry():
    # tf_keras marks its steps itself, numbered from 0 each epoch; the runtime numbers them
    # by the optimizer's iterations (the same on every worker) and names each exemplar as
    # the trace does: step 4 is "train 1" of the second epoch.
    tf_keras = pytest.importorskip("tf_keras")
    hooks = _NamedHooks()
    markers.set_hooks(hooks)
    try:
        model = tf_keras.Sequential([tf_keras.Input((4,)), tf_keras.layers.Dense(2)])
        model.compile(optimizer="sgd", loss="mse")
        model.fit(_dataset(), steps_per_epoch=3, epochs=2, verbose=0,
                  callbacks=[tfobs.KerasCallback()])
    finally:
        markers.set_hooks(None)
    assert hooks.ended == [(n, ("train", n % 3)) for n in range(6)]


_JAX_TFDATA_JOB = r"""
import json, os, sys
os.environ["JAX_PLATFORMS"] = "cpu"
order, logdir = sys.argv[1], sys.argv[2]
import numpy as np
import jax, jax.numpy as jnp
import tensorflow as tf
import tfobs

def pipeline():
    return (tf.data.Dataset.from_tensor_slices(np.ones((2048, 32), np.float32))
            .map(tf.sin).batch(32).repeat().prefetch(2).as_numpy_iterator())

step = jax.jit(lambda w, x: w - 0.01 * jax.grad(lambda w: ((x @ w) ** 2).mean())(w))
w = jnp.ones((32, 32)) if order == "jax_ran_first" else None
batches = pipeline() if order == "pipeline_first_with_option" else None
option = {"framework": "jax"} if order == "pipeline_first_with_option" else {}
rt = tfobs.enable(metrics_port=-1, interval_steps=15, window_steps=5, first_window_step=5,
                  overhead_budget=0.5, nvml=False, quiet=True, capture_dir=logdir, **option)
if batches is None:  # enable() first, as the README asks: the pipeline, then the model
    batches = pipeline()
if w is None:
    w = jnp.ones((32, 32))
windows = []
rt.add_listener(lambda rec, s: windows.append(
    [rec.outcome, s.steps.count if s else 0, s.environment.framework if s else ""]))
for i in range(40):
    with jax.profiler.StepTraceAnnotation("train", step_num=i):
        w = step(w, next(batches))
        w.block_until_ready()
rt.wait_idle(60)
chosen = rt.framework
tfobs.disable()
print(json.dumps({"framework": chosen, "windows": windows}))
"""


@pytest.mark.parametrize("order", ["enable_first", "jax_ran_first",
                                   "pipeline_first_with_option"])
def test_a_jax_job_fed_by_tf_data_is_profiled_with_jax(tmp_path, order):
    """A JAX job that reads its batches from tf.data imports both frameworks (and
    TensorFlow's import loads JAX). enable() first, as the README asks, once made tfobs
    profile TensorFlow, whose profiler sees none of JAX's steps: no window at all. With both
    imported and neither running, the first step's annotation decides. A pipeline built
    before enable() sets TensorFlow up first: that job says framework="jax"
    (docs/frameworks.md)."""
    if importlib.util.find_spec("jax") is None:  # not imported here: the job's own process
        pytest.skip("needs JAX")
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _JAX_TFDATA_JOB, order, str(tmp_path)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["framework"] == "jax", found
    captured = [w for w in found["windows"] if w[0] == "captured"]
    assert captured, found
    assert all(n >= 3 and fw == "jax" for _, n, fw in captured), found


_JAX_TFDATA_WAIT_JOB = r"""
import json, os, sys, urllib.request
os.environ["JAX_PLATFORMS"] = "cpu"
where, logdir = sys.argv[1], sys.argv[2]
import numpy as np
import jax, jax.numpy as jnp
import tfobs
rt = tfobs.enable(metrics_port=0, interval_steps=15, window_steps=6, first_window_step=5,
                  overhead_budget=0.5, nvml=False, quiet=True, capture_dir=logdir)
import tensorflow as tf
from tensorflow.python.data.ops import iterator_ops
own_next = iterator_ops.OwnedIterator.__dict__["__next__"]
# A serial map of 1,024 sines per value: slower than the step by a margin a loaded CI VM
# keeps (at 256 the step, descheduled there, let the pipeline catch up: 8 % waiting).
waves = tf.linspace(0.0, 1.0, 1024)[:, None]
batches = (tf.data.Dataset.from_tensor_slices(np.ones((4096, 128), np.float32))
           .map(lambda r: tf.reduce_mean(tf.sin(r[None, :] * waves), 0))
           .batch(64).repeat().prefetch(2).as_numpy_iterator())
step = jax.jit(lambda w, x: w - 0.01 * jax.grad(lambda w: ((x @ w) ** 2).mean())(w))
w = jnp.ones((128, 128))
wrapped = False  # from the first step on (the step's annotation says JAX)
windows = []
rt.add_listener(lambda rec, s: windows.append(None if s is None else {
    "count": s.steps.count, "mean_s": s.steps.mean_s, "interval_s": s.steps.interval_s,
    "next_s": s.steps.python_tfdata_next_s, "between_s": s.steps.input_between_s,
    "verdict": s.input_bound.verdict, "input": s.breakdown_ratio.get("input", 0.0),
    "advice": {a.code: a.severity for a in s.advice}}))
for i in range(40):
    if where == "between":
        x = next(batches)
    with jax.profiler.StepTraceAnnotation("train", step_num=i):
        if where == "inside":
            x = next(batches)
        w = step(w, x)
        w.block_until_ready()
    wrapped = wrapped or iterator_ops.OwnedIterator.__dict__["__next__"] is not own_next
rt.wait_idle(60)
page = urllib.request.urlopen(f"http://127.0.0.1:{rt.metrics_port}/metrics").read().decode()
metric = {line.split("{")[0]: float(line.rsplit(" ", 1)[1]) for line in page.splitlines()
          if line.startswith(("tfobs_window_tfdata_next_ratio",
                              "tfobs_window_input_between_steps_ratio"))}
tfobs.disable()
print(json.dumps({"windows": windows, "metric": metric, "wrapped": wrapped,
                  "restored": iterator_ops.OwnedIterator.__dict__["__next__"] is own_next}))
"""


@pytest.mark.parametrize("where", ["inside", "between"])
def test_a_jax_steps_wait_for_tf_data_is_measured_live(tmp_path, where):
    """A live JAX window records no TensorFlow op and no Python: tfobs's own event around
    tf.data's next() holds the wait, inside the step (its own figure, metric and advice:
    XProf's breakdown calls it host compute) or before the marker opens (between the
    steps). tf.data's iterator gets its own methods back at disable()."""
    import importlib.util
    import json
    import subprocess
    import sys

    if importlib.util.find_spec("jax") is None:
        pytest.skip("needs JAX beside TensorFlow")
    done = subprocess.run([sys.executable, "-c", _JAX_TFDATA_WAIT_JOB, where, str(tmp_path)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["wrapped"] and found["restored"], found
    windows = [w for w in found["windows"] if w]
    assert windows and all(w["count"] >= 3 for w in windows), found
    last, metric = windows[-1], found["metric"]
    assert last["input"] == 0.0  # XProf's figure: no TensorFlow op in a JAX capture
    if where == "inside":
        assert 0.5 * last["mean_s"] < last["next_s"] <= last["mean_s"], last
        assert last["between_s"] == 0.0
        assert metric["tfobs_window_tfdata_next_ratio"] == pytest.approx(
            last["next_s"] / last["mean_s"], rel=1e-6)
        assert last["advice"]["input_bound"] in ("warning", "critical"), last
    else:
        assert last["next_s"] == 0.0 and metric["tfobs_window_tfdata_next_ratio"] == 0.0
        assert last["between_s"] > 0.3 * last["interval_s"], last
        assert metric["tfobs_window_input_between_steps_ratio"] == pytest.approx(
            last["between_s"] / last["interval_s"], rel=1e-6)
        assert "input_outside_steps" in last["advice"], last


def test_steps_open_on_other_threads_are_counted_and_a_forked_child_has_none() -> None:
    import threading

    inside, leave = threading.Event(), threading.Event()

    def other() -> None:
        with tfobs.step(7):
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=other)
    t.start()
    try:
        assert inside.wait(10)
        assert markers.steps_open_elsewhere() == 1
        with tfobs.step(8):  # this thread's own step is no other thread's
            assert markers.steps_open_elsewhere() == 1
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: only the forking thread, with no step open
            os.write(write, str(markers.steps_open_elsewhere()).encode())
            os._exit(0)
        os.waitpid(pid, 0)
        assert os.read(read, 16) == b"0"
    finally:
        leave.set()
        t.join(10)
    assert markers.steps_open_elsewhere() == 0
