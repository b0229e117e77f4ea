"""Bad captures in a real training job: empty, truncated, over the byte budget, over the
event budget, not an XSpace at all.

Injection is honest: each window is really profiled and exported by TensorFlow; then, between
the export and tfobs's read of the file (the profiler slot's read step), the file on disk is
rewritten (tests/support/fault_job.py `corrupt_file`). Everything after that is tfobs's
real path: size check, parse, event count check, reduction, outcome, counters.
"""

from __future__ import annotations

import pytest

from tests.support.fault_job import assert_unharmed, baseline, run_job

pytestmark = [pytest.mark.slow, pytest.mark.waits, pytest.mark.timeout(300)]  # runs a training job

MAX_BYTES = 32 << 20
MAX_EVENTS = 20_000  # a real 8-step window here has a few thousand events
# Nine windows open in 270 steps; the plan needs six read. On a loaded host a window can be
# skipped (the duty-cycle budget) or still be reducing when training ends, so the job runs
# longer than the plan and the windows after it must all be captured.
STEPS = 270


def test_bad_captures_are_dropped_and_counted(tmp_path):
    corruptions = "empty,truncated,huge_bytes,huge_events,not_xspace,none"
    run = run_job({"capture_dir": str(tmp_path), "max_capture_bytes": MAX_BYTES,
                   "max_capture_events": MAX_EVENTS},
                  steps=STEPS,
                  extra=("--corrupt", corruptions, "--big-bytes", str(MAX_BYTES + (16 << 20))))
    assert_unharmed(run, baseline(STEPS))
    # Windows in the order they were read: the i-th read got the i-th corruption.
    records = [r for r in run.report["records"] if not r["outcome"].startswith("skipped")]
    plan = corruptions.split(",")
    hows = [a["how"] for a in run.actions("corrupt")]
    assert hows[:len(plan)] == plan and set(hows[len(plan):]) <= {"none"}, hows
    assert len(records) == len(hows) >= 6, records
    empty, truncated, huge_bytes, huge_events, not_xspace, fine = records[:6]
    assert empty["outcome"] == "failed" and "empty" in empty["reason"]
    assert truncated["outcome"] == "failed" and "not a readable XSpace" in truncated["reason"]
    assert huge_bytes["outcome"] == "dropped_too_large"
    assert f"max_capture_bytes={MAX_BYTES}" in huge_bytes["reason"]
    assert huge_events["outcome"] == "dropped_too_large"
    assert f"max_capture_events={MAX_EVENTS}" in huge_events["reason"]
    assert not_xspace["outcome"] == "failed" and "not a readable XSpace" in not_xspace["reason"]
    # The pipeline is not left broken: the next good capture is reduced and published.
    assert fine["outcome"] == "captured" and fine["steps"] > 0
    assert all(r["outcome"] == "captured" for r in records[6:]), records

    read = {k: v for k, v in run.windows.items() if not k.startswith("skipped")}
    assert read == {"failed": 3, "dropped_too_large": 2, "captured": len(records) - 5}
    assert run.errors == {"reduce": 3}
    assert list(tmp_path.iterdir()) == []  # every capture folder deleted, whatever happened
