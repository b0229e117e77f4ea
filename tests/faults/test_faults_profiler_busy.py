"""The user's own profiling meets tfobs's windows at every point of tfobs's cycle.

TensorFlow has one profiler session per process. The user's profiling must always work:
Keras's TensorBoard callback with `profile_batch`, a manual `tf.profiler.experimental.start`
(before a window is due, while tfobs traces, while it exports, while it reduces), and a
profiler server (`tf.profiler.experimental.server.start`) traced by its gRPC client. After
each, the user's capture must hold the steps they profiled and tfobs must go on capturing.
Windows open at steps 10, 30, 60, 90, 120, 150 and last 8 steps (tests/support/fault_job.py).
"""

from __future__ import annotations

import glob
import os

import pytest

import tfobs
from tests.support.fault_job import assert_unharmed, baseline, run_job
from tests.support.prometheus_server import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # runs a training job


def profiled_steps(logdir) -> list[int]:
    """Steps in each capture the user's profiling wrote under `logdir`, read by tfobs."""
    files = sorted(glob.glob(os.path.join(str(logdir), "**", "*.xplane.pb"), recursive=True))
    return [tfobs.analyze(f).steps.count for f in files]


def test_users_profiler_wins_at_every_point_of_the_cycle(tmp_path):
    users = {name: tmp_path / name for name in ("tb", "before", "active", "export", "reduce")}
    plan = [
        # Window 10 is tracing when TensorBoard's profile_batch (13, 16) starts (see extra).
        {"step": 25, "do": "user_start", "logdir": str(users["before"])},  # window 30 is due
        {"step": 45, "do": "user_stop"},
        {"step": 63, "do": "user_start", "logdir": str(users["active"])},  # window 60 traces
        {"step": 75, "do": "user_stop"},
        {"after_step": 90, "when": "exporting", "do": "user_start",
         "logdir": str(users["export"])},
        {"step": 110, "do": "user_stop"},
        {"after_step": 120, "when": "reducing", "do": "user_start",
         "logdir": str(users["reduce"])},
        {"step": 140, "do": "user_stop"},
    ]
    run = run_job({"capture_dir": str(tmp_path / "cap")}, plan=plan,
                  extra=("--tensorboard", f"{users['tb']}:13:16"))
    assert_unharmed(run, baseline())

    # Every start and stop of the user's succeeded, in the state it was aimed at.
    acts = run.report["actions"]
    assert all(a["ok"] for a in acts), acts
    assert [a["state"] for a in acts if a["do"] == "user_start"] == [
        "", "", "exporting", "reducing"]
    assert "Failed to start profiler" not in run.stderr  # Keras logs this if start fails
    # Each user capture holds the steps the user profiled (TensorBoard: batches 13-16).
    for name, logdir in users.items():
        steps = profiled_steps(logdir)
        assert len(steps) == 1 and steps[0] >= 3, (name, steps)

    outcome = {r["first_step"]: r["outcome"] for r in run.report["records"]}
    reasons = [r["reason"] for r in run.report["records"] if r["outcome"] == "skipped_busy"]
    # tfobs gave up window 10 to TensorBoard and window 60 to the user's start mid-window;
    # window 30 found the user's session running and did not open.
    assert outcome[10] == "skipped_busy" and outcome[60] == "skipped_busy"
    assert any("tf.profiler.experimental session active" in r for r in reasons), reasons
    # A start during export waited for the export to end; one during reduction needed
    # nothing: both windows completed. And tfobs kept working after every user session.
    assert outcome[90] == outcome[120] == outcome[150] == "captured", outcome
    assert run.windows["skipped_busy"] == 3, run.windows
    assert run.windows["captured"] == 3
    assert not run.errors
    assert os.listdir(tmp_path / "cap") == []


def test_a_profiler_start_imported_before_enable_still_wins(tmp_path):
    # `from tensorflow.profiler.experimental import start, stop` at the job's top binds the
    # functions tfobs's hook replaces later: that start raised AlreadyExistsError into the
    # job mid-window, and its stop wrote a 4-byte capture. It makes its session through a
    # module global tfobs fronts, so it pre-empts the window as the hooked start does.
    user = tmp_path / "user"
    plan = [{"step": 63, "do": "user_start_early", "logdir": str(user)},  # window 60 traces
            {"step": 75, "do": "user_stop_early"}]
    run = run_job({"capture_dir": str(tmp_path / "cap")}, plan=plan)
    assert_unharmed(run, baseline())
    acts = run.report["actions"]
    assert all(a["ok"] for a in acts), acts
    steps = profiled_steps(user)
    assert len(steps) == 1 and steps[0] >= 3, steps
    outcome = {r["first_step"]: r for r in run.report["records"]}
    assert outcome[60]["outcome"] == "skipped_busy", outcome[60]
    assert "the user's tf.profiler.experimental.start" in outcome[60]["reason"]
    assert outcome[90]["outcome"] == "captured" and not run.errors


def test_profiler_server_and_tfobs_share_the_profiler(tmp_path):
    port = free_port()
    remote = {name: tmp_path / name for name in ("busy", "collide", "after")}
    plan = [
        {"step": 0, "do": "server_start", "port": port},
        # A remote trace running across step 30: tfobs finds the profiler taken and skips.
        {"step": 24, "do": "client_trace", "port": port, "logdir": str(remote["busy"]),
         "duration_ms": 600},
        # A remote trace arriving while tfobs traces window 60: the window gives way (the
        # server started after enable(), so it answers through tfobs's front).
        {"step": 62, "do": "client_trace", "port": port, "logdir": str(remote["collide"]),
         "duration_ms": 300},
        {"after_step": 120, "when": "exporting", "do": "client_trace", "port": port,
         "logdir": str(remote["after"]), "duration_ms": 300},
    ]
    # 60 ms steps: the duty-cycle budget allows window 30 after the first window's cost on
    # slower hosts too (with 20 ms it skipped it there), and the traces still fall as planned.
    run = run_job({"capture_dir": str(tmp_path / "cap")}, plan=plan,
                  extra=("--step-sleep-s", "0.06"))
    assert_unharmed(run, baseline())
    traces = {a["step"]: a for a in run.actions("client_trace")}
    for step in (24, 62, 120):
        assert traces[step]["trace_ok"], traces[step]
    for name in ("busy", "collide", "after"):
        assert [s for s in profiled_steps(remote[name]) if s > 0], name

    outcome = {r["first_step"]: r for r in run.report["records"]}
    busy = [r for r in run.report["records"] if r["outcome"] == "skipped_busy"]
    assert len(busy) == 2, busy
    assert "another profiler session is active" in busy[0]["reason"], busy
    assert outcome[60]["outcome"] == "skipped_busy", outcome[60]
    assert "on-demand capture through the profiler server" in outcome[60]["reason"]
    assert run.windows["skipped_busy"] == 2 and run.windows["captured"] >= 4, run.windows
    assert not run.errors
