"""The reduce helper process (issue 17) on its own: real `python -m tfobs.reduce`
children reducing real captures, with the faults the runtime must survive.

The runtime's side in a training job (ticker stalls, faults mid-window, orphans after
kill -9 and SIGTERM) is in test_reduce_process_training.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.processes import alive, gone_within
from tfobs.analysis.pipeline import analyze
from tfobs.reduce import helper as reduce_helper
from tfobs.reduce.helper import (
    CannotStart,
    HelperFailed,
    ReduceHelper,
    data_limit_bytes,
)
from tfobs.summary import WindowSummary

ROOT = Path(__file__).resolve().parents[2]
CAPTURE = ROOT / "tests/data/captures/generated__tf2.20cpu__custom_loop_compute_bfc.xplane.pb"
# Long enough to reduce (about 0.15 s) that a kill lands mid-reduction.
LONG_CAPTURE = ROOT / "tests/data/captures/generated__tf2.21cpu__lstm_bfc_varying.xplane.pb"
BIG_CAPTURE = ROOT / "tests/data/captures/generated__tf2.21cpu__lstm_bfc_varying.xplane.pb"
ARGS = {"top_n": 5, "short_gap_s": 30e-6, "max_events": 5_000_000}


@pytest.fixture
def worker():
    w = ReduceHelper(data_limit=data_limit_bytes(256 << 20))
    yield w
    pid = w.pid
    w.stop(1.0)
    if pid is not None:
        assert gone_within(pid, 5), "stop() left the helper running"


@pytest.fixture
def fast_backoff(monkeypatch):
    monkeypatch.setattr(reduce_helper, "BACKOFF_S", (0.05, 0.2))


def test_helper_summary_equals_in_process_reduction(worker):
    summary = WindowSummary.from_dict(worker.reduce(str(CAPTURE), **ARGS))
    assert summary.steps.count > 0
    assert summary.to_dict() == analyze(str(CAPTURE), top_n=5).to_dict()


def test_the_helper_pauses_the_cycle_collector_while_reducing_only(monkeypatch) -> None:
    # The helper process is tfobs's own, as `tfobs analyze`'s is: the collector waits
    # while a capture is reduced and runs again after, a failed reduction included.
    import gc

    from tfobs.analysis import pipeline
    from tfobs.reduce import __main__ as helper_main

    seen: list[bool] = []
    real = pipeline.reduce_xspace

    def watched(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "reduce_xspace", watched)
    assert gc.isenabled()
    reply = helper_main.reduce_one({"path": str(CAPTURE), **ARGS})
    assert reply["ok"] and seen == [False] and gc.isenabled()
    monkeypatch.setattr(pipeline, "reduce_xspace", lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        helper_main.reduce_one({"path": str(CAPTURE), **ARGS})
    assert gc.isenabled()


def test_helper_keeps_the_top_events_the_trace_can_hold(worker):
    """The runtime asks for `trace_max_spans` top events in all: the helper's summary of
    4,000 small steps holds the window's longest that many (not 20,000), as the same
    reduction in process gives them, and counts the rest."""
    long_window = ROOT / "tests/data/captures/generated__tf2.21cpu__tiny_steps_long.xplane.pb"
    plain = worker.reduce(str(long_window), **ARGS, max_top_events=40)
    summary = WindowSummary.from_dict(plain)
    assert sum(len(s.top_events) for s in summary.steps.items) == 40
    assert summary.steps.top_events_left_out == 5 * summary.steps.count - 40
    assert summary == analyze(str(long_window), top_n=5, max_top_events=40)
    default = WindowSummary.from_dict(worker.reduce(str(long_window), **ARGS))
    assert sum(len(s.top_events) for s in default.steps.items) == 512


def test_helper_is_plain_python_at_low_priority_with_its_own_limit(worker):
    worker.ensure_started()
    pid = worker.pid
    assert pid is not None
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    assert int(stat[1]) == os.getpid()  # our child: spawned, not a fork of a fork
    assert int(stat[16]) >= min(19, reduce_helper.NICE + os.nice(0))  # nice value (19 at most)
    limits = Path(f"/proc/{pid}/limits").read_text()
    data = next(line for line in limits.splitlines() if line.startswith("Max data size"))
    assert int(data.split()[3]) == data_limit_bytes(256 << 20)
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert cmdline[1:3] == [b"-m", b"tfobs.reduce"]
    maps = Path(f"/proc/{pid}/maps").read_text()
    assert "tensorflow" not in maps and "libtensorflow" not in maps


def test_helper_cpu_is_read_for_the_budget(worker):
    worker.ensure_started()
    assert worker.cpu_s() > 0.05  # the interpreter and the reduction's imports
    assert worker.take_cpu() < 0.05  # the start is not charged to a window
    worker.reduce(str(CAPTURE), **ARGS)
    assert worker.take_cpu() > 0.0
    assert worker.take_cpu() == pytest.approx(0.0, abs=0.02)  # handed out once


def test_too_many_events_and_a_bad_file_fail_only_that_reduction(worker):
    with pytest.raises(HelperFailed) as exc:
        worker.reduce(str(CAPTURE), top_n=5, short_gap_s=30e-6, max_events=10)
    assert exc.value.kind == "too_large"
    with pytest.raises(HelperFailed) as exc:
        worker.reduce("/nonexistent/capture.xplane.pb", **ARGS)
    assert exc.value.kind == "error"
    pid = worker.pid
    assert worker.reduce(str(CAPTURE), **ARGS)["steps"]["count"] > 0
    assert worker.pid == pid and worker.starts == 1  # the same helper all along


def _kill_when_busy(worker: ReduceHelper, sig: int) -> None:
    """Send `sig` to the helper once it is reducing (its CPU climbs)."""
    import threading

    def run() -> None:
        pid = worker.pid
        assert pid is not None
        cpu0 = reduce_helper._proc_cpu_s(pid) or 0.0
        while (reduce_helper._proc_cpu_s(pid) or 0.0) - cpu0 < 0.02:
            time.sleep(0.005)
        os.kill(pid, sig)

    threading.Thread(target=run, daemon=True).start()


def test_helper_killed_mid_reduction_fails_that_window_and_comes_back(worker, fast_backoff):
    worker.ensure_started()
    first = worker.pid
    _kill_when_busy(worker, signal.SIGKILL)
    with pytest.raises(HelperFailed) as exc:
        worker.reduce(str(LONG_CAPTURE), **ARGS)
    assert exc.value.kind == "died"
    assert worker.reduce(str(CAPTURE), **ARGS)["steps"]["count"] > 0
    assert worker.starts == 2 and worker.pid != first
    assert not alive(first)


@pytest.mark.slow  # seconds of training or waiting: the full suite, not the quick one
@pytest.mark.waits
def test_hanging_helper_is_killed_at_its_timeout_and_comes_back(worker, fast_backoff,
                                                                monkeypatch):
    monkeypatch.setattr(reduce_helper, "TIMEOUT_PER_MB_S", 0.1)
    worker.ensure_started()
    first = worker.pid
    worker.timeout_s = 1.0
    _kill_when_busy(worker, signal.SIGSTOP)
    t0 = time.monotonic()
    with pytest.raises(HelperFailed) as exc:
        worker.reduce(str(LONG_CAPTURE), **ARGS)
    assert exc.value.kind == "timeout"
    size_mb = LONG_CAPTURE.stat().st_size / 1e6
    assert time.monotonic() - t0 < 1.0 + 0.1 * size_mb + 3  # the timeout (per MB), not forever
    assert gone_within(first, 5)
    worker.timeout_s = 60.0
    assert worker.reduce(str(CAPTURE), **ARGS)["steps"]["count"] > 0
    assert worker.starts == 2


@pytest.mark.slow  # seconds of training or waiting: the full suite, not the quick one
@pytest.mark.alone  # its busy loop must outrank the helper: nothing niced beside it
def test_helper_starved_at_idle_priority_comes_back_at_nice_19(fast_backoff):
    # Every core the helper may use is kept busy by a normal-priority process: at
    # SCHED_IDLE it gets no CPU, so each window would only time out. The starved helper
    # is replaced by one at nice 19 without SCHED_IDLE, which reduces the next window.
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs: one kept busy, one for the restarted helper")
    worker = ReduceHelper(data_limit=data_limit_bytes(256 << 20), starved_after_s=1.0)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(busy.pid, {cpus[0]})
        worker.ensure_started()
        first = worker.pid
        assert first is not None and os.sched_getscheduler(first) == os.SCHED_IDLE
        os.sched_setaffinity(first, {cpus[0]})  # beside the busy loop only
        time.sleep(0.3)  # the busy loop owns that core now
        t0 = time.monotonic()
        with pytest.raises(HelperFailed) as exc:
            worker.reduce(str(LONG_CAPTURE), **ARGS)
        assert exc.value.kind == "starved"
        assert "nice 19" in str(exc.value)
        assert time.monotonic() - t0 < 10  # found in about starved_after_s, not at the timeout
        assert gone_within(first, 5)
        assert worker.reduce(str(CAPTURE), **ARGS)["steps"]["count"] > 0
        second = worker.pid
        assert second is not None and second != first and worker.starts == 2
        assert os.sched_getscheduler(second) == os.SCHED_OTHER
        assert int(Path(f"/proc/{second}/stat").read_text().rsplit(")", 1)[1].split()[16]) == 19
    finally:
        busy.kill()
        busy.wait()
        pid = worker.pid
        worker.stop(1.0)
        if pid is not None:
            assert gone_within(pid, 5)


def test_out_of_memory_fails_that_window_and_a_fresh_helper_reduces_the_next(fast_backoff):
    # 80 MB of data: the imports fit (about 65 MB), this capture's reduction does not (the
    # 14.7 MB one: the compiled reader brought a 2.7 MB capture's reduction under it).
    worker = ReduceHelper(data_limit=80 << 20)
    try:
        worker.ensure_started()
        first = worker.pid
        with pytest.raises(HelperFailed) as exc:
            worker.reduce(str(BIG_CAPTURE), **ARGS)
        assert exc.value.kind == "memory"
        assert gone_within(first, 5)  # it exits: the next window gets a fresh heap
        worker.data_limit = 256 << 20
        assert worker.reduce(str(BIG_CAPTURE), **ARGS)["steps"]["count"] > 0
        assert worker.starts == 2
    finally:
        worker.stop(1.0)


@pytest.mark.parametrize("limit_mb", [100, 130, 150, 190])
def test_running_out_of_memory_anywhere_is_the_memory_kind(limit_mb, fast_backoff):
    """Whichever allocation fails first under the helper's limit (protobuf's parse, its
    serializing of lines for the compiled reader, a numpy array), the answer is "memory"
    (a fresh helper next), never a broken capture; or the capture fits and reduces."""
    worker = ReduceHelper(data_limit=limit_mb << 20)
    try:
        try:
            assert worker.reduce(str(BIG_CAPTURE), **ARGS)["steps"]["count"] > 0
        except HelperFailed as exc:
            assert exc.kind == "memory", exc
    finally:
        worker.stop(1.0)


def test_missing_executable_cannot_start_then_comes_back(fast_backoff):
    worker = ReduceHelper(data_limit=256 << 20, python="/nonexistent/python3")
    try:
        with pytest.raises(CannotStart, match="/nonexistent/python3"):
            worker.reduce(str(CAPTURE), **ARGS)
        worker.python = sys.executable
        assert worker.reduce(str(CAPTURE), **ARGS)["steps"]["count"] > 0
        assert worker.starts == 1
    finally:
        worker.stop(1.0)


def test_stop_while_reducing_leaves_no_helper(worker):
    import threading

    worker.ensure_started()
    pid = worker.pid
    errors: list[BaseException] = []

    def reduce() -> None:
        try:
            worker.reduce(str(CAPTURE), **ARGS)
        except HelperFailed as exc:
            errors.append(exc)

    thread = threading.Thread(target=reduce)
    thread.start()
    time.sleep(0.05)
    worker.stop(0.2)
    thread.join(10)
    assert not thread.is_alive()
    assert gone_within(pid, 5)
    with pytest.raises(HelperFailed):  # stopped for good: no helper comes back
        worker.reduce(str(CAPTURE), **ARGS)
    assert worker.pid is None


def test_disable_right_after_enable_is_no_error(caplog):
    # The helper starts at enable() (about a second of imports): a job that stops tfobs at
    # once interrupts that start, which is shutting down, not a helper fault.
    import tfobs

    for _ in range(3):
        rt = tfobs.enable(metrics_port=-1, nvml=False, reduce_in="process")
        tfobs.disable()
        assert rt.health.snapshot().errors == {}
    assert "reduce_helper error" not in caplog.text


PARENT = textwrap.dedent("""
    import sys, time
    from tfobs.reduce.helper import ReduceHelper
    w = ReduceHelper(data_limit=256 << 20)
    w.ensure_started()
    print(w.pid, flush=True)
    if sys.argv[1] == "busy":  # die while the helper reduces
        import threading
        threading.Thread(target=w.reduce, args=(sys.argv[2],),
                         kwargs=dict(top_n=5, short_gap_s=3e-5, max_events=10**7)).start()
    time.sleep(60)
""")


@pytest.mark.parametrize("when", ["idle", "busy"])
def test_helper_never_outlives_a_parent_killed_with_sigkill(when, tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen([sys.executable, str(script), when, str(CAPTURE)],
                              stdout=subprocess.PIPE, text=True, env=env)
    try:
        helper = int(parent.stdout.readline())
        assert alive(helper)
        if when == "busy":
            time.sleep(0.1)
        parent.kill()
        parent.wait(10)
        assert gone_within(helper, 5), "the helper outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
