"""The runtime: lifecycle, threads, the real per-step and per-window sink paths, failures
counted once in the health ledger, exit and fork."""

from __future__ import annotations

import glob
import importlib.util
import os
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request

import pytest

tf = pytest.importorskip("tensorflow")

import tfobs  # noqa: E402
from tests.support.memory_exporter import MemoryExporter  # noqa: E402
from tfobs import runtime as runtime_mod  # noqa: E402
from tfobs.capture import markers  # noqa: E402
from tfobs.config import Config  # noqa: E402
from tfobs.runtime import Runtime  # noqa: E402
from tfobs.summary import Steps, WindowSummary  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@tf.function
def _train(x):
    return tf.reduce_sum(x * x)


def _steps(n: int, start: int = 0) -> None:
    x = tf.ones((32,))
    for i in range(start, start + n):
        with tfobs.step(i):
            _train(x)


def _config(tmp_path, **kw):
    opts = {"metrics_port": -1, "interval_steps": 1000, "window_steps": 5,
            "first_window_step": 10**6, "overhead_budget": 0.5, "capture_dir": str(tmp_path)}
    opts.update(kw)
    return Config.load(environ={}, **opts)


def _tfobs_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("tfobs-")]


@pytest.fixture
def make_runtime(tmp_path):
    made = []

    def make(exporter=None, reducer=None, clock=time.monotonic, **kw):
        exporter = exporter or MemoryExporter()
        rt = Runtime(_config(tmp_path, **kw), sinks=[exporter], step_sink=exporter,
                     reducer=reducer, clock=clock)
        made.append(rt)
        return rt.start()

    yield make
    for rt in made:
        rt.stop(5.0)


def _sink(rt: Runtime) -> MemoryExporter:
    sink = rt.sinks[0]
    assert isinstance(sink, MemoryExporter)
    return sink


@pytest.mark.slow  # starts the metrics HTTP server
def test_enable_is_idempotent_serves_metrics_and_disable_cleans_up(tmp_path):
    rt = tfobs.enable(metrics_port=0, metrics_bind="127.0.0.1", capture_dir=str(tmp_path),
                      window_steps=5, first_window_step=3, interval_steps=1000,
                      overhead_budget=0.5, nvml=False)
    try:
        assert tfobs.enable() is rt  # second call: same handle, no second server or threads
        threads = _tfobs_threads()
        assert threads.count("tfobs-capture") == 1 and threads.count("tfobs-reduce") == 1
        _steps(12)
        assert rt.wait_idle(30)
        assert rt.metrics_url == f"http://127.0.0.1:{rt.metrics_port}/metrics"
        body = urllib.request.urlopen(rt.metrics_url, timeout=10).read().decode()
        count_line = [ln for ln in body.splitlines()
                      if ln.startswith("tfobs_step_duration_seconds_count")]
        assert count_line and count_line[0].endswith(" 12.0"), count_line
        # The windows counter is read from the health ledger on scrape: one count, two views.
        assert ('tfobs_windows_total{local_rank="0",outcome="captured",tf_cluster="none",'
                'tf_job="local",tf_task="0"} 1.0') in body
        assert rt.health.windows == {"captured": 1}
        assert rt.last_summary is not None and rt.last_summary.steps.count > 0
    finally:
        tfobs.disable()
    assert runtime_mod.current() is None
    assert _tfobs_threads() == []
    assert markers.current_hooks() is None
    assert glob.glob(str(tmp_path / "tfobs-*")) == []


def test_bad_option_raises_at_enable():
    with pytest.raises(tfobs.ConfigError, match="window_steps"):
        tfobs.enable(window_steps=-3)
    assert runtime_mod.current() is None


@pytest.mark.slow  # starts the metrics HTTP server
def test_taken_port_serves_another_with_one_clear_line(tmp_path, caplog):
    import socket
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        rt = tfobs.enable(metrics_port=port, metrics_bind="127.0.0.1", nvml=False,
                          capture_dir=str(tmp_path))
        try:
            assert rt is not None and rt.metrics_port not in (port, -1)
            said = [r.getMessage() for r in caplog.records if f"port {port} " in r.getMessage()]
            assert len(said) == 1 and "TFOBS_METRICS_PORT" in said[0], said
            assert f"serving on port {rt.metrics_port} instead: {rt.metrics_url}" in said[0]
            with urllib.request.urlopen(rt.metrics_url, timeout=10) as resp:
                assert b"tfobs_windows_total" in resp.read()
        finally:
            tfobs.disable()
    assert runtime_mod.current() is None and _tfobs_threads() == []


def test_no_tfobs_thread_in_the_job_is_niced(make_runtime):
    """A niced thread preempted while it holds the GIL (a garbage collection it triggered)
    stalls the training thread until it runs again: tfobs's threads keep the job's
    priority; only the reduce helper process is niced (DESIGN.md)."""
    rt = make_runtime(first_window_step=5, window_steps=3)
    _steps(20)
    assert rt.wait_idle(30)
    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    threads = [t for t in threading.enumerate() if t.name.startswith("tfobs")]
    assert {"tfobs-capture", "tfobs-reduce"} <= {t.name for t in threads}
    for t in threads:
        with open(f"/proc/self/task/{t.native_id}/stat") as fh:
            nice = int(fh.read().rsplit(")", 1)[1].split()[16])
        assert nice == own, t.name


def test_every_step_reaches_the_step_sink_and_window_steps_carry_exemplars(make_runtime):
    rt = make_runtime(first_window_step=10, window_steps=5)
    _steps(30)
    assert rt.wait_idle(30)
    steps = _sink(rt).all_steps()
    assert len(steps) == 30 == rt.health.steps
    (summary, record), = _sink(rt).published
    with_exemplar = [ex for _, ex in steps if ex is not None]
    assert len(with_exemplar) == 5  # steps 10..14, the window's
    assert {ex["trace_id"] for ex in with_exemplar} == {f"{record.trace_id:032x}"}
    assert (record.first_step, record.last_step) == (10, 14)
    assert rt.last_summary is summary and rt.last_record is record


def test_a_window_is_published_on_the_wall_clock_whatever_the_tensorflow(make_runtime):
    """TensorFlow 2.16 writes no profile start time into a capture (its events count from
    the profiler's start; the compatibility job runs this there): the published summary is
    still placed on the wall clock, inside the window the runtime recorded, as the spans and
    exemplars need it."""
    rt = make_runtime(first_window_step=10, window_steps=5)
    before = time.time_ns()
    _steps(20)
    assert rt.wait_idle(30)
    (summary, record), = _sink(rt).published
    assert before <= record.start_ns <= summary.start_ns + 10**9  # the same clock
    assert summary.duration_s > 0
    slack = 2 * 10**9
    for step in summary.steps.items:
        assert record.start_ns - slack <= step.start_ns <= record.end_ns + slack, step
        for event in step.top_events:
            assert record.start_ns - slack <= event.start_ns <= record.end_ns + slack


def test_sink_failures_are_counted_once_never_raised(make_runtime):
    exporter = MemoryExporter(fail_on=("publish", "observe"))
    rt = make_runtime(exporter)
    assert rt.capture_now()
    _steps(8)  # observe raises on each of the window's 5 steps: training goes on
    assert rt.wait_idle(30)
    assert rt.health.windows == {"captured": 1}
    assert rt.health.errors == {"export_memory": 6}  # 5 steps + 1 publish
    assert len(exporter.all_steps()) == 3  # the steps after the window still arrive


def test_reducer_failure_is_a_failed_window(make_runtime):
    def broken(data, **kw):
        raise ValueError("bad capture")

    rt = make_runtime(reducer=broken)
    assert rt.capture_now()
    _steps(6)
    assert rt.wait_idle(30)
    assert rt.health.windows == {"failed": 1}
    assert rt.health.errors == {"reduce": 1}
    assert "bad capture" in rt.last_record.reason


def test_the_reduction_is_asked_for_the_spans_a_trace_holds(make_runtime):
    """`trace_max_spans` bounds the top events a window's summary keeps (and
    `trace_top_n` those per step): the runtime hands both to the reduction."""
    asked = []

    def reducer(data, **kw):
        asked.append(kw)
        return WindowSummary(steps=Steps(count=0))

    rt = make_runtime(reducer=reducer, trace_max_spans=33, trace_top_n=2)
    assert rt.capture_now()
    _steps(6)
    assert rt.wait_idle(30)
    assert asked and asked[0]["max_top_events"] == 33 and asked[0]["top_n"] == 2


def test_empty_window_and_too_many_events(make_runtime):
    rt = make_runtime(reducer=lambda data, **kw: WindowSummary(steps=Steps(count=0)))
    assert rt.capture_now()
    _steps(6)
    assert rt.wait_idle(30)
    assert rt.health.windows == {"empty": 1}
    rt.stop(5.0)
    rt2 = make_runtime(max_capture_events=10)
    assert rt2.capture_now()
    _steps(6)
    assert rt2.wait_idle(30)
    assert rt2.health.windows == {"dropped_too_large": 1}, rt2.health


@pytest.mark.slow  # seconds of training or waiting: the full suite, not the quick one
@pytest.mark.waits
def test_window_time_cap_closes_a_window_without_steps(make_runtime):
    rt = make_runtime(window_max_s=0.3)
    assert rt.capture_now()
    _steps(2)  # far fewer than window_steps; then training pauses
    t0 = time.monotonic()
    assert rt.wait_idle(30)
    assert time.monotonic() - t0 < 10
    assert sum(rt.health.windows.values()) == 1
    assert rt.last_record.last_step == 1


def test_budget_skips_windows_while_one_is_reduced(make_runtime):
    gate = threading.Event()

    def slow(data, **kw):
        gate.wait(20)
        return WindowSummary(steps=Steps(count=3))

    rt = make_runtime(reducer=slow, interval_steps=10, window_steps=2, first_window_step=0)
    _steps(35)  # windows due at 0, 10, 20, 30: the first is still being reduced
    gate.set()
    assert rt.wait_idle(30)
    assert rt.health.windows.get("captured") == 1
    assert rt.health.windows.get("skipped_budget") == 3
    assert len(_sink(rt).published) == 1


def test_aligned_windows_and_cost_published(make_runtime):
    hours = iter(range(0, 10**9, 3600))  # the budget's clock: an hour between its reads,
    rt = make_runtime(interval_steps=20, window_steps=4, first_window_step=5,  # never a pause
                      overhead_budget=0.5, clock=lambda: float(next(hours)))
    for start in range(0, 60, 10):
        _steps(10, start)
        rt.wait_idle(30)
    assert rt.health.windows == {"captured": 3}, rt.health
    assert [r.first_step for _, r in _sink(rt).published] == [5, 20, 40]  # aligned
    health = rt.health.snapshot()
    assert health.duty_cycle_ratio is not None and health.overhead_ratio is not None
    assert 0 < health.duty_cycle_ratio < 1 and 0 < health.overhead_ratio < 1
    assert health.info["tensorflow_version"] == tf.__version__
    assert health.info["devices"]  # known once a step has run


def test_budget_is_charged_for_the_per_step_work_between_windows(make_runtime):
    rt = make_runtime(first_window_step=0, window_steps=2, interval_steps=10**6)
    own0 = markers.own_seconds()
    _steps(10)
    assert rt.wait_idle(30)
    assert rt.health.windows.get("captured") == 1
    # Both charges of the window (capture, then reduction) took the per-step work timed by
    # the markers so far (at most all of it, and at least a microsecond a step for two
    # steps) and the window's end on the training thread (the wait for the device, the stop).
    spent = markers.own_seconds() - own0
    ended = rt.last_record.end_on_training_thread_s
    assert ended > 0 and rt.last_record.end_thread == "MainThread"
    assert 2e-6 + ended <= rt.budget.steps_cost_s <= spent + ended
    assert spent / 10 < 0.01  # microseconds a step, not milliseconds
    assert rt.budget.cost_s > rt.budget.steps_cost_s


def test_background_work_is_charged_by_cpu_time_not_wall_time(make_runtime):
    def waits(data, **kw):  # a reduction that waits a second (starved of CPU, say)
        time.sleep(1.0)
        return WindowSummary(steps=Steps(count=2))

    rt = make_runtime(reducer=waits, first_window_step=0, window_steps=2)
    _steps(3)
    assert rt.wait_idle(30)
    record = rt.last_record
    assert record.reduce_s >= 1.0
    assert record.background_cpu_s < 0.5
    # At wall time the reduction alone would cost 1.0 s / cores; CPU time charges far less.
    assert rt.budget.cost_s < 0.5 * rt.policy.background_cost


def test_window_open_at_shutdown_is_counted_as_dropped(make_runtime):
    rt = make_runtime(first_window_step=0, window_steps=100)
    _steps(3)  # the window waits for 97 more steps that never come
    assert not rt.idle
    rt.stop(5.0)
    assert rt.health.dropped == {"window": 1}
    assert rt.health.windows == {}
    assert _sink(rt).published == [] and _sink(rt).shutdown_calls


def test_window_reduced_during_shutdown_is_counted_as_dropped(make_runtime):
    entered, gate = threading.Event(), threading.Event()

    def slow(data, **kw):
        entered.set()
        gate.wait(20)
        return WindowSummary(steps=Steps(count=2))

    rt = make_runtime(reducer=slow, first_window_step=0, window_steps=2)
    _steps(3)
    assert entered.wait(30)
    timer = threading.Timer(0.5, gate.set)  # the reduction ends while stop() waits for it
    timer.start()
    rt.stop(5.0)
    timer.join()
    # Counted once: stop() wakes the capture thread, which must not finish the window again.
    assert rt.health.dropped == {"window": 1}
    assert _sink(rt).published == []


def test_fork_child_goes_quiet_and_parent_keeps_working(tmp_path):
    rt = tfobs.enable(metrics_port=-1, capture_dir=str(tmp_path), window_steps=3,
                      first_window_step=10**6, overhead_budget=0.5, nvml=False)
    try:
        assert rt.metrics_url == "" and rt.metrics_port == -1  # no server
        pid = os.fork()
        if pid == 0:  # child: no tfobs threads, hooks or runtime; leave at once
            ok = runtime_mod.current() is None and markers.current_hooks() is None
            tfobs.disable()
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert rt.capture_now()
        _steps(5)
        assert rt.wait_idle(30)
        assert rt.health.windows.get("captured") == 1
    finally:
        tfobs.disable()


EXIT_SCRIPT = textwrap.dedent("""
    import sys, tensorflow as tf, tfobs
    rt = tfobs.enable(metrics_port=0, metrics_bind="127.0.0.1", capture_dir=sys.argv[1],
                      window_steps=1000, interval_steps=5000, first_window_step=2,
                      window_max_s=60, nvml=False)
    @tf.function
    def train(x):
        return tf.reduce_sum(x * x)
    for i in range(10):
        with tfobs.step(i):
            train(tf.ones((8,)))
    assert not rt.idle  # a window is open when the script ends
    print("ending", flush=True)
""")


@pytest.mark.slow  # runs a training process
def test_process_exit_with_open_window_does_not_hang_or_leave_files(tmp_path):
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", EXIT_SCRIPT, str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ending" in proc.stdout
    assert elapsed < 60
    assert os.listdir(tmp_path) == []


def test_doctor_reports_a_verdict_per_check(capsys, monkeypatch):
    import argparse

    from tfobs.commands import doctor

    monkeypatch.setenv("TFOBS_NVML", "false")
    assert doctor.run(argparse.Namespace(port=-1)) == 0
    out = capsys.readouterr().out
    for name, _ in doctor.CHECKS:
        assert f"] {name}: " in out
    assert "[  ok] profiler: captured" in out and "steps found (markers)" in out
    assert out.strip().endswith("all checks passed")


NO_STEPS_SCRIPT = textwrap.dedent("""
    import sys, time, tensorflow as tf, tfobs
    from tfobs.runtime import capture_thread
    capture_thread.NO_STEPS_WARN_S = 1.0
    tfobs.enable(metrics_port=0, metrics_bind="127.0.0.1", capture_dir=sys.argv[1],
                 nvml=False)
    tf.constant(1.0) + 1.0  # the job has set TensorFlow up
    if sys.argv[2] == "long_first_step":  # an XLA compile of minutes: begun, not ended
        with tfobs.step(0):
            time.sleep(4)
    else:  # "unmarked": a loop tfobs cannot see
        time.sleep(4)
    print("done", flush=True)
""")


@pytest.mark.slow  # runs a process
@pytest.mark.waits
@pytest.mark.parametrize("kind", ["unmarked", "long_first_step"])
def test_a_job_that_marks_no_step_is_told_how_once(tmp_path, kind):
    """Without steps no window opens; a custom loop without `tfobs.step` must not leave
    the dashboards empty with nothing saying why. A first step still running is a step."""
    proc = subprocess.run([sys.executable, "-c", NO_STEPS_SCRIPT, str(tmp_path), kind],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = [line for line in proc.stderr.splitlines() if "no training step" in line]
    if kind == "unmarked":
        assert len(said) == 1, proc.stderr[-2000:]
        assert "with tfobs.step(step_num):" in said[0] and "train_on_batch" in said[0]
        assert "inference are not training steps" in said[0]  # a predict-only job is told
    else:
        assert said == [], said


EPOCH_NUMBERS_SCRIPT = textwrap.dedent("""
    import sys, time, tensorflow as tf, tfobs
    rt = tfobs.enable(metrics_port=-1, capture_dir=sys.argv[1], nvml=False,
                      first_window_step=5, interval_steps=20, window_steps=5,
                      overhead_budget=0.5)
    w = tf.Variable(tf.ones((64, 64)))
    @tf.function
    def step():
        w.assign(tf.tanh(w @ w) * 0.5)
    for epoch in range(6):  # each epoch numbers its steps from 0, as enumerate(dataset) does
        for i in range(30):
            with tfobs.step(i):
                step()
                time.sleep(0.02)
    rt.wait_idle(60)
    print("captured", rt.health.windows.get("captured", 0), flush=True)
""")


@pytest.mark.slow  # runs a process
@pytest.mark.waits
def test_windows_go_on_when_step_numbers_start_over_each_epoch(tmp_path):
    """A custom loop numbering each epoch's steps from 0 (or a job calling fit again): the
    windows were planned by number only forward, so after the first epoch's none opened
    again and nothing said why (2 windows in 4 epochs). Planned again from the new count."""
    proc = subprocess.run([sys.executable, "-c", EPOCH_NUMBERS_SCRIPT, str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    captured = int(proc.stdout.split("captured")[-1].split()[0])
    # Two planned per epoch, at steps 5 and 20; the first epoch alone holds two, so a third
    # is a later epoch's (on a busy machine the budget skips some of the rest).
    assert captured >= 3, proc.stderr[-3000:]
    said = [line for line in proc.stderr.splitlines() if "step numbers went back" in line]
    assert len(said) == 1 and "from 29 to 0" in said[0], said


JAX_AFTER_TF_SCRIPT = textwrap.dedent("""
    import os, sys, time
    os.environ["JAX_PLATFORMS"] = "cpu"
    import numpy as np, tensorflow as tf, jax, jax.numpy as jnp, tfobs
    from tfobs.runtime import capture_thread
    capture_thread.NO_STEPS_WARN_S = 1.0
    # A JAX job that builds its tf.data pipeline before enable(), without framework="jax".
    batches = tf.data.Dataset.from_tensor_slices(np.ones((64, 8), np.float32)).batch(8)
    batches = batches.repeat().as_numpy_iterator()
    rt = tfobs.enable(metrics_port=-1, capture_dir=sys.argv[1], nvml=False)
    w = jnp.ones((8, 8))
    end = time.monotonic() + 4
    i = 0
    while time.monotonic() < end:
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            w = (w @ next(batches).T @ next(batches)).block_until_ready()
        i += 1
    print(rt.framework, flush=True)
""")


@pytest.mark.slow  # runs a process
@pytest.mark.waits
def test_a_jax_job_profiled_as_tensorflow_is_told_the_framework_fix(tmp_path):
    """TensorFlow ran before enable(), so tfobs profiles it; the job's steps are JAX's,
    which TensorFlow's profiler never sees. The no-step line names the framework option,
    not `tfobs.step`."""
    if importlib.util.find_spec("jax") is None:
        pytest.skip("needs JAX beside TensorFlow")
    proc = subprocess.run([sys.executable, "-c", JAX_AFTER_TF_SCRIPT, str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-1:] == ["tensorflow"], proc.stdout
    said = [line for line in proc.stderr.splitlines() if "no training step" in line]
    assert len(said) == 1, proc.stderr[-2000:]
    assert 'tfobs.enable(framework="jax") or TFOBS_FRAMEWORK=jax' in said[0]
    assert "tfobs.step" not in said[0]


def test_a_window_opening_while_another_thread_makes_the_backend_waits_for_it(
        make_runtime) -> None:
    """The capture thread's import watch chooses the framework and then makes its backend;
    a window opening on the training thread in between must get that backend, not "no
    framework to profile" (seen in CI: a job whose only window failed so)."""
    rt = make_runtime()
    backend, rt.slot.backend = rt.slot.backend, None
    framework_was, rt.framework = rt.framework, "tensorflow"  # chosen, backend not yet made
    got: list[object] = []
    with rt._framework_lock:  # the other thread, mid-way
        waiter = threading.Thread(target=lambda: got.append(rt.resolve_framework()))
        waiter.start()
        time.sleep(0.2)
        assert waiter.is_alive() and not got  # waits, does not answer None
        rt.slot.backend = backend or object()
    waiter.join(5.0)
    assert got == [rt.slot.backend] and got[0] is not None
    rt.framework = framework_was
