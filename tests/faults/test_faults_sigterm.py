"""SIGTERM while a tfobs window is tracing (Kubernetes' way of stopping a pod).

tfobs installs no signal handler of its own: the job's handler runs exactly as without
tfobs, and tfobs cleans up from `atexit` within its deadline. Three jobs: a handler that
stops training gracefully, a handler that calls `sys.exit(143)` mid-step, and no handler at
all. The default action kills the process at once, so no Python code runs: what remains
is the window's empty private folder (mode 0700: TensorFlow writes its files 0644 into
it at export, so it must exist), which the next tfobs start on the host removes.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.support.fault_job import TFOBS_EXIT_S, finish_job, start_job, wait_line
from tfobs.capture.folder_cleanup import sweep_stale_dirs

# Runs a training job and bounds how soon it exits: at normal priority in the lanes (waits).
pytestmark = [pytest.mark.slow, pytest.mark.waits, pytest.mark.timeout(300)]


# Signals the job inside the window at step 60, which the overhead budget skips when steps
# slow down: beside the busy lane on a slow VM, the last window was step 10's once.
@pytest.mark.alone
@pytest.mark.parametrize("handler", ["graceful", "exit", "none"])
def test_sigterm_during_a_window(tmp_path, handler):
    cap = tmp_path / "cap"
    extra = () if handler == "none" else ("--sigterm-handler", handler)
    # Window 60 traces steps 60-67; the job says so at step 63, then the test signals it.
    proc = start_job({"capture_dir": str(cap)}, extra=extra,
                     plan=[{"step": 63, "do": "print", "text": "WINDOW OPEN"}])
    try:
        _, before = wait_line(proc, "WINDOW OPEN")
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        run = finish_job(proc, earlier="".join(before), timeout_s=60)
        exit_s = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()

    assert exit_s < 5.0, exit_s
    assert "Traceback" not in run.stderr, run.stderr[-2000:]
    if handler == "none":
        assert run.returncode == -signal.SIGTERM
        # The kill cleaner (a tiny sh waiting on the process) removes the window's folder
        # once the process is gone; until it has run, the folder is there, empty, and the
        # next start sweeps it.
        deadline = time.monotonic() + 5.0
        left = os.listdir(cap)
        while left and time.monotonic() < deadline:
            assert left[0].startswith(f"tfobs-{proc.pid}p")
            time.sleep(0.1)
            left = os.listdir(cap)
        assert left == [], left  # removed by the cleaner, not left in RAM-backed /dev/shm
        assert sweep_stale_dirs(str(cap)) == 0  # nothing left for the next start
        return
    assert os.listdir(cap) == []  # atexit removed the open window's folder
    assert "job handler: SIGTERM received" in run.stdout  # the job's own handler ran
    if handler == "exit":
        assert run.returncode == 143
        return
    # Graceful: training stopped where the job chose; tfobs counted every step it saw and
    # closed the interrupted window at the end of fit instead of waiting for its cap.
    assert run.returncode == 0
    report = run.report
    assert report["stopped_by_signal"]
    assert 63 <= report["steps"] < 180
    assert report["health"]["steps"] == report["steps"]
    assert run.report["metrics"]["other"]["tfobs_step_duration_seconds_count"] == report["steps"]
    last = report["records"][-1]
    assert last["first_step"] == 60 and last["outcome"] == "captured"
    assert last["last_step"] == report["steps"] - 1
    assert run.tfobs_exit_s < TFOBS_EXIT_S, run.tfobs_exit_s
    assert run.exit_after_end_s < 15.0, run.exit_after_end_s
