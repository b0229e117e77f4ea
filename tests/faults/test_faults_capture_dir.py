"""The capture folder fails under a real training job: read-only, full, removed.

The folder lives on a real size-limited file system: a 4 MiB tmpfs the test mounts (this needs
root, as CI runs; elsewhere the test is skipped and says why). The job itself changes it
between windows, as an operator or another process would: `mount -o remount,ro` (writes fail
with EROFS even for root, unlike chmod), a file written until ENOSPC, and `rm -rf` of the
capture folder in the middle of an open window and again between windows (tfobs makes a
missing capture folder again, as TensorFlow's export does).
"""

from __future__ import annotations

import os

import pytest

from tests.support.fault_job import assert_unharmed, baseline, run_job
from tests.support.mute_servers import small_tmpfs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # runs a training job


@pytest.fixture
def tiny_tmpfs(tmp_path):
    with small_tmpfs(tmp_path, "4m", "tfobs-fault") as mnt:
        yield mnt


def test_read_only_full_and_removed_capture_folder(tiny_tmpfs):
    cap = tiny_tmpfs / "captures"
    cap.mkdir()
    mnt = str(tiny_tmpfs)
    # Windows open at steps 10, 30, 60, 90, 120, 150 (tests/support/fault_job.py).
    plan = [
        {"step": 50, "do": "remount", "path": mnt, "options": "ro"},  # window 60: read-only
        {"step": 75, "do": "remount", "path": mnt, "options": "rw"},
        {"step": 80, "do": "fill", "path": mnt},  # window 90: no space left
        {"step": 105, "do": "unfill", "path": mnt},
        {"step": 123, "do": "rmtree", "path": str(cap)},  # inside window 120
        {"step": 140, "do": "rmtree", "path": str(cap)},  # between windows 120 and 150
    ]
    run = run_job({"capture_dir": str(cap)}, plan=plan)
    assert_unharmed(run, baseline())
    assert all(a["ok"] for a in run.report["actions"]), run.report["actions"]
    assert "No space left" in run.actions("fill")[0]["filled"]
    assert run.actions("rmtree")[0]["slot"] == "active"  # really removed mid-window

    records = run.report["records"]
    by_step = {r["first_step"]: r for r in records}
    (ro,) = [r for r in records if "Read-only file system" in r["reason"]]
    (full,) = [r for r in records if "No space left on device" in r["reason"]]
    assert by_step[10]["outcome"] == "captured"
    assert ro["outcome"] == "failed" and "cannot create capture folder" in ro["reason"]
    assert full["outcome"] == "failed" and "profiler export failed" in full["reason"]
    # Removed mid-window: TensorFlow's export recreates the folder, so the window survives.
    assert by_step[120]["outcome"] == "captured", by_step[120]
    # Removed while idle: tfobs makes the folder again when the next window opens.
    assert by_step[150]["outcome"] == "captured", by_step[150]
    # All counted in tfobs's own metrics, and tfobs kept working in between.
    assert run.windows["failed"] == 2 and run.windows["captured"] >= 3, run.windows
    assert run.errors == {"capture": 2}
    # Nothing of tfobs's is left on the small file system.
    leftovers = [os.path.join(d, f) for d, _, fs in os.walk(mnt) for f in fs]
    assert leftovers == [], leftovers


def test_a_full_shared_memory_folder_moves_windows_to_the_temporary_folder(tiny_tmpfs, tmp_path):
    # Docker gives a container 64 MiB of /dev/shm by default: tfobs's own choice of folder
    # fills up. It then moves to the temporary folder (never over a folder the user named,
    # above) and says how to keep captures in memory; the windows after it are captured.
    fallback = tmp_path / "tmp"
    fallback.mkdir()
    mnt = str(tiny_tmpfs)
    plan = [{"step": 80, "do": "fill", "path": mnt}]  # window 90: no space left
    run = run_job({}, plan=plan, extra=("--shm", f"{mnt}:{fallback}"))
    assert_unharmed(run, baseline())
    assert "No space left" in run.actions("fill")[0]["filled"]
    records = run.report["records"]
    by_step = {r["first_step"]: r for r in records}
    (full,) = [r for r in records if r["outcome"] == "failed"]
    assert full["first_step"] == 90, full
    assert f"later windows go to {fallback}" in full["reason"]
    assert "--shm-size" in full["reason"] and "TFOBS_CAPTURE_DIR" in full["reason"]
    assert by_step[10]["outcome"] == "captured"  # in the small folder, before it filled
    assert by_step[120]["outcome"] == by_step[150]["outcome"] == "captured"
    assert run.errors == {"capture": 1}
    # Both folders are left as found: the filler alone in the small one, nothing in the other.
    leftovers = [os.path.join(d, f) for d, _, fs in os.walk(mnt) for f in fs]
    assert leftovers == [os.path.join(mnt, "filler")], leftovers
    assert list(fallback.iterdir()) == []
