"""A real JAX training loop (CPU) with `tfobs.enable()`: its windows are captured with JAX's
profiler, ended on the training thread between steps after the device drained, reduced and
published to a real Prometheus, a real OTLP receiver and the page; `tfobs analyze` of its
kept capture gives the summary published live. TensorFlow is made unimportable in the job
(`NO_TF=1`), as in a venv without it (`scripts/jax_venv.sh` runs these tests in one).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time
import urllib.request

import pytest

pytest.importorskip("jax")

from tests.support.otlp_receiver import OtlpReceiver
from tests.support.prometheus_server import PrometheusServer, free_port
from tfobs.export.otel import SPAN_WINDOW

pytestmark = [pytest.mark.slow, pytest.mark.waits, pytest.mark.timeout(400)]

ROOT = pathlib.Path(__file__).resolve().parents[2]
WINDOWS = {"TFOBS_FIRST_WINDOW_STEP": "10", "TFOBS_INTERVAL_STEPS": "25",
           "TFOBS_WINDOW_STEPS": "5", "TFOBS_OVERHEAD_BUDGET": "0.5"}


def launch(tmp: pathlib.Path, env_extra: dict[str, str]) -> tuple[subprocess.Popen, pathlib.Path]:
    out = tmp / "job.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFOBS_")}
    env.update(WINDOWS)
    env.update(NO_TF="1", JAX_PLATFORMS="cpu", TFOBS_NVML="false",
               TFOBS_METRICS_BIND="127.0.0.1", TFOBS_CAPTURE_DIR=str(tmp),
               OTEL_SDK_DISABLED="true", PYTHONPATH=str(ROOT))
    env.update(env_extra)
    log = (tmp / "job.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.jax_job", str(out)],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    return proc, out


def wait_result(proc: subprocess.Popen, out: pathlib.Path, tmp: pathlib.Path,
                timeout_s: float = 240) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if out.exists():
            return json.loads(out.read_text())
        code = proc.poll()
        assert code is None, f"the JAX job ended ({code}):\n{(tmp / 'job.log').read_text()[-3000:]}"
        time.sleep(0.3)
    raise AssertionError(f"no result:\n{(tmp / 'job.log').read_text()[-3000:]}")


def finish(proc: subprocess.Popen, out: pathlib.Path) -> str:
    pathlib.Path(str(out) + ".stop").touch()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
    return proc.returncode


def run_job(tmp: pathlib.Path, **env: str) -> dict:
    proc, out = launch(tmp, {"LINGER_S": "0", **env})
    result = wait_result(proc, out, tmp)
    assert finish(proc, out) == 0, (tmp / "job.log").read_text()[-3000:]
    return result


def assert_ended_between_steps(result: dict) -> None:
    """Every stop of a JAX session ran on the training thread, with no step open, right
    after a drain of the device on the same thread."""
    calls = result["calls"]
    stops = [i for i, c in enumerate(calls) if c["call"] == "stop"]
    assert stops, calls
    for i in stops:
        stop = calls[i]
        assert stop["thread"] == result["main_thread"], calls
        assert not stop["in_step"], calls
        drain = calls[i - 1] if i else None
        assert drain is not None and drain["call"] == "drain", calls
        assert drain["thread"] == stop["thread"] and not drain["in_step"], calls


@pytest.mark.parametrize("mark", ["annotation", "tfobs", "both"])
def test_jax_windows_end_on_the_training_thread_after_the_device_drained(tmp_path, mark):
    result = run_job(tmp_path, MARK=mark)
    assert result["framework"] == "jax"
    assert result["tensorflow_loaded"] is False
    assert result["steps"] == 80  # every step counted once, whichever marker
    captured = [w for w in result["windows"] if w["outcome"] == "captured"]
    # Windows on the aligned steps; on a busy machine one may be skipped for the budget.
    planned = [(10, 14), (25, 29), (50, 54), (75, 79)]
    got = [(w["first"], w["last"]) for w in captured]
    assert len(got) >= 2 and set(got) <= set(planned), result["windows"]
    assert_ended_between_steps(result)
    for w in captured:
        assert w["end_at"] == "step_boundary" and w["end_thread"] == result["main_thread"]
        assert w["end_drain_s"] > 0 and w["end_stop_s"] > 0
        steps = w["summary"]["steps"]
        # Every step of the window is in its capture, the first included (five steps: XProf
        # drops none). jaxlib's annotation decides to record when it is made: a window opened
        # when it was entered lost its first step.
        nums = [st["step_num"] for st in steps["items"]]
        assert nums == list(range(w["first"], w["last"] + 1)), (nums, w["first"], w["last"])
    assert not result["errors"], result["errors"]
    # The drain's jit was compiled once on the capture thread after the first step, before
    # any window: the first window's end did not compile it on the training thread.
    prepared = [c for c in result["calls"] if c["call"] == "prepare"]
    assert [c["thread"] for c in prepared] == ["tfobs-capture"], result["calls"]
    assert result["calls"].index(prepared[0]) == 0, result["calls"]


def test_two_training_threads_windows_end_while_neither_step_runs(tmp_path):
    # Two threads stepping side by side, each marking its steps from 0: a window ends at a
    # boundary of one while the other's step body does not run (stopping JAX's profiler
    # under running compiled steps killed GPU jobs), and the two threads' steps are all
    # counted once.
    result = run_job(tmp_path, MARK="annotation", THREADS="2", STEPS="60",
                     STEP_SLEEP_S="0.02", STEP_GAP_S="0.01")
    assert result["steps"] == 120
    captured = [w for w in result["windows"] if w["outcome"] == "captured"]
    assert captured, result["windows"]
    stops = [c for c in result["calls"] if c["call"] == "stop"]
    assert len(stops) == len(captured)
    assert [c["others_running"] for c in stops] == [[]] * len(stops), stops
    assert {w["end_at"] for w in captured} == {"step_boundary"}
    for w in captured:
        assert w["summary"]["steps"]["count"] >= 3, w["summary"]["steps"]
    assert not result["errors"], result["errors"]


def test_keras_fit_on_the_jax_backend_is_marked_and_profiled(tmp_path):
    # Keras 3 with KERAS_BACKEND=jax: enable() wraps fit once the job imports Keras, and
    # the callback's steps are JAX's (markers, windows), not TensorFlow's.
    result = run_job(tmp_path, MARK="keras", KERAS_BACKEND="jax")
    assert result["framework"] == "jax" and result["tensorflow_loaded"] is False
    assert result["steps"] == 80
    captured = [w for w in result["windows"] if w["outcome"] == "captured"]
    assert len(captured) >= 2, result["windows"]
    assert_ended_between_steps(result)
    for w in captured:
        assert w["summary"]["steps"]["count"] >= 3, w["summary"]["steps"]
    assert not result["errors"], result["errors"]


_KERAS_OWN_TRACE = """
import os, sys
os.environ["KERAS_BACKEND"] = "jax"
sys.modules["tensorflow"] = None  # as in a venv without it
import jax, keras, numpy as np
import tfobs
model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
x, y = np.ones((64 * 12, 32), np.float32), np.ones((64 * 12, 1), np.float32)
model.fit(x, y, batch_size=64, verbose=0, callbacks=[tfobs.KerasCallback()])
with jax.profiler.trace(sys.argv[1]):
    model.fit(x, y, batch_size=64, verbose=0, callbacks=[tfobs.KerasCallback()])
"""


def test_keras_fit_on_the_jax_backend_is_marked_for_its_own_trace(tmp_path):
    # No enable(): tfobs's Keras callback marks a Keras-on-JAX fit with JAX's markers,
    # which the job's own jax.profiler.trace records.
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", _KERAS_OWN_TRACE, str(tmp_path)], check=True,
                   env=env, timeout=240, cwd=ROOT)
    (capture,) = tmp_path.rglob("*.xplane.pb")
    import tfobs

    s = tfobs.analyze(capture)
    assert s.steps.method == "markers"
    assert [st.step_num for st in s.steps.items] == list(range(13, 23))  # ends dropped


def test_jax_loop_that_stops_stepping_is_ended_off_the_training_thread_and_counted(tmp_path):
    """A loop that stops mid-window never reaches the next boundary: the capture thread
    ends the window itself after its grace, and says so."""
    result = run_job(tmp_path, STOP_AT="12", STOP_S="6", TFOBS_WINDOW_MAX_S="1")
    (w,) = [w for w in result["windows"] if w["outcome"] == "captured"]
    assert w["end_at"] == "capture_thread" and w["end_thread"] == "tfobs-capture", w
    assert (w["first"], w["last"]) == (10, 11)


def test_jax_job_publishes_to_prometheus_otlp_page_and_keeps_what_analyze_reads(tmp_path):
    keep_dir = tmp_path / "kept"
    port = free_port()
    with OtlpReceiver() as receiver:
        proc, out = launch(tmp_path, {
            "LINGER_S": "90", "TFOBS_METRICS_PORT": str(port), "STEP_SLEEP_S": "0.1",
            "STEPS": "130",
            "TFOBS_KEEP_DIR": str(keep_dir), "OTEL_SDK_DISABLED": "false",
            "TFOBS_OTLP_ENDPOINT": receiver.endpoint})
        prom = PrometheusServer([f"127.0.0.1:{port}"], scrape_interval_s=1.0)
        try:
            prom.start()
            result = wait_result(proc, out, tmp_path)
            captured = [w for w in result["windows"] if w["outcome"] == "captured"]
            # (OTLP's and keep's first-use costs may hold later windows back on a busy
            # machine: the budget decides; the windows themselves are checked above)
            assert captured, result["windows"]
            last = captured[-1]
            # Prometheus: the last window's figures, the framework, the window ends.
            prom.wait_for(f"tfobs_window_last_step == {last['last']}", timeout_s=30)
            step_time = prom.query("tfobs_window_step_time_seconds")
            assert float(step_time[0]["value"][1]) == pytest.approx(
                last["summary"]["steps"]["mean_s"])
            info = prom.query("tfobs_info")[0]["metric"]
            # (Prometheus leaves out a label whose value is empty: no TensorFlow version)
            assert info["framework"] == "jax" and info["jax_version"]
            assert "tensorflow_version" not in info
            ends = {r["metric"]["at"]: float(r["value"][1])
                    for r in prom.query("tfobs_window_ends_total")}
            assert ends == {"step_boundary": float(len(captured))}, ends
            # OTLP: one window trace each.
            spans = receiver.wait_for(
                lambda sp: sum(s.name == SPAN_WINDOW for s in sp) >= len(captured),
                timeout_s=30)
            assert sum(s.name == SPAN_WINDOW for s in spans) == len(captured)
            # The page names the window end.
            page = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).read()
            assert b"Window end" in page and b"jax" in page
        finally:
            prom.stop()
            finish(proc, out)
    kept = [w for w in captured if w["kept_path"]]
    assert kept, captured  # keep_first at least
    for w in kept:
        run = pathlib.Path(w["kept_path"]).parent.name
        done = subprocess.run(
            [sys.executable, "-m", "tfobs.cli", "analyze", str(keep_dir), "--run", run,
             "--format", "json"], cwd=ROOT, capture_output=True, text=True, timeout=120,
            check=True)
        assert json.loads(done.stdout) == w["summary"]


def test_jax_steps_are_marked_for_the_jobs_own_trace_without_tfobs_running(tmp_path):
    # No enable(): `tfobs.step` in a JAX loop still writes the "train" markers XProf reads,
    # inside the job's own `jax.profiler.trace`.
    import jax
    import jax.numpy as jnp

    import tfobs
    from tfobs.capture import markers

    assert markers.current_backend() is None
    f = jax.jit(lambda x: (x @ x).sum())
    x = jnp.ones((64, 64))
    f(x).block_until_ready()
    with jax.profiler.trace(str(tmp_path)):
        for i in range(40, 50):
            with tfobs.step(i):
                f(x).block_until_ready()
    (capture,) = tmp_path.rglob("*.xplane.pb")
    s = tfobs.analyze(capture)
    assert s.steps.method == "markers"
    assert [st.step_num for st in s.steps.items] == list(range(41, 49))  # ends dropped


def test_jax_demo_stops_after_the_windows_asked_for(tmp_path):
    """`tfobs demo --framework jax --windows 2`: the run ends once two windows are reduced,
    long before its `--seconds` cap, each window printed with its verdict."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFOBS_")}
    env.update(JAX_PLATFORMS="cpu", TFOBS_NVML="false", TFOBS_CAPTURE_DIR=str(tmp_path),
               OTEL_SDK_DISABLED="true", PYTHONPATH=str(ROOT))
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "tfobs.cli", "demo", "--framework", "jax", "--windows", "2",
         "--seconds", "300", "--port", "-1", "--interval-steps", "25",
         "--steps-per-window", "5", "--overhead-budget", "0.5"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=280)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "until 2 windows are reduced" in proc.stdout.splitlines()[0], proc.stdout
    verdicts = [ln for ln in proc.stdout.splitlines()
                if ln.startswith("window ") and "input-bound: " in ln]
    assert len(verdicts) >= 2, proc.stdout
    done = [ln for ln in proc.stdout.splitlines() if ln.startswith("tfobs demo done:")]
    assert len(done) == 1, proc.stdout
    # Ended by its windows: well inside the 300 s cap, even on a busy machine.
    assert took < 200 and float(done[0].split("seconds=")[1].split()[0]) < 150, done


JAX_UNMARKED_SCRIPT = """
import sys, time
sys.modules["tensorflow"] = None  # as in a venv without TensorFlow
import tfobs
from tfobs.runtime import capture_thread
capture_thread.NO_STEPS_WARN_S = 1.0
tfobs.enable(metrics_port=-1, capture_dir=sys.argv[1], nvml=False)
import jax, jax.numpy as jnp
step = jax.jit(lambda w: w @ w / 64.0)
w = jnp.ones((64, 64))
end = time.monotonic() + 4
while time.monotonic() < end:  # a JAX loop that marks no step
    w = step(w).block_until_ready()
print("done", flush=True)
"""


def test_a_jax_loop_that_marks_no_step_is_told_jaxs_marker_once(tmp_path):
    """A JAX job without step markers never gets a window; before this, its log said
    nothing at all (the no-step line waited for TensorFlow's runtime, which a JAX job never
    starts). It is told JAX's own marker, once."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFOBS_")}
    proc = subprocess.run([sys.executable, "-c", JAX_UNMARKED_SCRIPT, str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**env, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = [line for line in proc.stderr.splitlines() if "no training step" in line]
    assert len(said) == 1, proc.stderr[-2000:]
    assert "jax.profiler.StepTraceAnnotation" in said[0] and "tfobs.step(i)" in said[0]
    assert "tf.profiler" not in said[0] and "train_on_batch" not in said[0]


JAX_EARLY_START_SCRIPT = """
import sys, time
sys.modules["tensorflow"] = None  # as in a venv without TensorFlow
import jax, jax.numpy as jnp
from jax.profiler import start_trace, stop_trace  # at the top: before enable()
import tfobs
rt = tfobs.enable(metrics_port=-1, capture_dir=sys.argv[1], nvml=False, first_window_step=5,
                  interval_steps=20, window_steps=5, overhead_budget=0.5, framework="jax")
step = jax.jit(lambda w: w @ w / 64.0)
w = jnp.ones((64, 64))
for i in range(50):
    with jax.profiler.StepTraceAnnotation("train", step_num=i):
        w = step(w).block_until_ready()
    time.sleep(0.01)
    if i == 6:  # window 5 traces
        start_trace(sys.argv[2])
    if i == 10:
        stop_trace()
rt.wait_idle(60)
start_trace(sys.argv[3])  # and the profiler is the job's again afterwards
step(w).block_until_ready()
stop_trace()
print("windows", dict(rt.health.windows), flush=True)
"""


def test_a_start_trace_imported_before_enable_still_wins(tmp_path):
    """`from jax.profiler import start_trace, stop_trace` at the job's top binds the
    function tfobs's hook replaces later: its stop_trace raised ALREADY_EXISTS into the job
    and every later start_trace failed. It makes its session through a module global tfobs
    fronts, so it pre-empts the window as the hooked one does."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFOBS_")}
    user, after = tmp_path / "user", tmp_path / "after"
    proc = subprocess.run(
        [sys.executable, "-c", JAX_EARLY_START_SCRIPT, str(tmp_path / "cap"), str(user),
         str(after)], cwd=ROOT, capture_output=True, text=True, timeout=180,
        env={**env, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    import tfobs

    for folder in (user, after):
        (capture,) = folder.rglob("*.xplane.pb")
        assert tfobs.analyze(capture).steps.method != "none" or folder == after
    assert "'skipped_busy': 1" in proc.stdout and "'captured'" in proc.stdout, proc.stdout
