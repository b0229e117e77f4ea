"""Keeping windows in real training jobs (tests/support/keep_job.py, Keras 3 `Model.fit` on a
tf.data pipeline): what is kept, in TensorBoard's layout, read by XProf 2.24.2's converters and
by `tfobs analyze` with the very summary published live; and the job trains the same steps
when the keep folder is read-only, full, or on a file system TensorFlow does not know.

The read-only and full folders are a real 1 MiB tmpfs the test mounts (root, as CI runs;
elsewhere those tests skip and say why): `remount,ro` fails writes with EROFS even for root,
and the full one is filled with a file until ENOSPC before the job starts.

Step times on this shared machine move by up to 2x from window to window, and the input-bound
turn here triples them (0.05 s to 0.15 s): at `keep_on_step_time_rise=2.0` (a tripled step
time) a window after the turn was kept for its step time in one CI run. So the jobs set 5.0 (a
sixfold step time), far from both. The steady job's input share (about 2 %) stays far from
XProf's 5 % threshold.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from tests.support.mute_servers import small_tmpfs
from tests.support.xprof_reference import run_tool
from tfobs.config import Config
from tfobs.errors import ConfigError
from tfobs.runtime.keep import Triggers
from tfobs.summary import WindowSummary

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # trains

ROOT = pathlib.Path(__file__).resolve().parents[2]
JOB = ROOT / "tests" / "support" / "keep_job.py"
STEPS, TURN = 140, 70
OPTIONS = {
    "metrics_port": 0, "metrics_bind": "127.0.0.1", "nvml": False,
    "interval_steps": 20, "window_steps": 6, "first_window_step": 10, "overhead_budget": 0.5,
    "keep_on_step_time_rise": 5.0,
}


def run_job(options: dict | None, *args: str, steps: int = STEPS) -> dict:
    cmd = [sys.executable, str(JOB), "--steps", str(steps), *args]
    if options is not None:
        cmd += ["--tfobs", json.dumps({**OPTIONS, **options})]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    report = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1])
    report["stdout"], report["stderr"] = proc.stdout, proc.stderr
    return report


def captured(report: dict) -> list[dict]:
    return [r for r in report["records"] if r["outcome"] == "captured"]


def kept(report: dict) -> list[dict]:
    return [r for r in report["records"] if r["kept_path"]]


def metric(report: dict, name: str) -> float | None:
    for line in report["metrics"].splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def replay_triggers(windows: list[dict], keep_dir: pathlib.Path) -> dict[int, list[str]]:
    """{window index: the keep triggers it fired}, replayed in order on the summaries the
    job published, with the jobs' keep settings: what the job's own triggers saw."""
    triggers = Triggers(Config(**{k: v for k, v in OPTIONS.items() if k.startswith("keep_")},
                               keep_dir=str(keep_dir)))
    return {r["index"]: triggers.reasons(WindowSummary.from_dict(r["summary"]))
            for r in sorted(windows, key=lambda r: r["index"])}


def extra_keeps(fired: dict[int, list[str]]) -> set[int]:
    """Windows a trigger other than 'first' kept."""
    return {i for i, why in fired.items() if set(why) - {"first"}}


def files_under(folder: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


class _Baseline(dict):
    """The same job without tfobs, by step count, each run when first read: the lanes
    (tests/conftest.py) run these tests in two processes, each needing one of them."""

    ARGS = {STEPS: ("--turn-step", str(TURN)), 80: ()}

    def __missing__(self, steps: int) -> dict:
        self[steps] = run_job(None, *self.ARGS[steps], steps=steps)
        return self[steps]


@pytest.fixture(scope="module")
def baseline() -> dict:
    """The same job without tfobs: the steps and weights every run must end with."""
    return _Baseline()


# Its verdicts compare a sleeping input pipeline with the job's compute: run at normal
# priority (a starved job's compute would hide the turn).
@pytest.mark.waits
def test_job_turning_input_bound_keeps_first_and_turned_window(tmp_path, baseline):
    keep_dir = tmp_path / "keep"
    report = run_job({"keep_dir": str(keep_dir)}, "--turn-step", str(TURN))
    base = baseline[STEPS]
    assert (report["steps"], report["weights"]) == (base["steps"], base["weights"])

    windows = captured(report)
    first = windows[0]
    turned = next(r for r in windows if r["first_step"] >= TURN)
    before = [r["summary"]["input_bound"]["verdict"] for r in windows if r["first_step"] < TURN]
    assert turned["summary"]["input_bound"]["verdict"] == "highly", turned["summary"]
    assert "highly" not in before, before
    # Kept: the first window and the one where it turned. A shared machine can push one
    # window before the turn over XProf's 5 % (a CI run: 'moderately' at step 60, steps of
    # 53 ms against 75-85 before); it is kept for what its own figures show, and once.
    fired = replay_triggers(windows, keep_dir)
    assert fired[first["index"]] == ["first"] and "input_bound" in fired[turned["index"]]
    extra = extra_keeps(fired) - {turned["index"]}
    assert len(extra) <= 1 and all(i < turned["index"] for i in extra), fired
    expected = sorted({first["index"], turned["index"]} | extra)
    assert [r["index"] for r in kept(report)] == expected, [
        (r["index"], r["first_step"], r["summary"]["input_bound"]["verdict"],
         r["summary"]["steps"]["mean_s"], fired[r["index"]]) for r in windows]

    # TensorBoard's layout, complete files only (no temporary name left).
    profile = keep_dir / "plugins" / "profile"
    paths = [pathlib.Path(r["kept_path"]) for r in kept(report)]
    assert files_under(keep_dir) == sorted(paths)
    for p in paths:
        assert p.parent.parent == profile and p.name.endswith(".xplane.pb")

    # Findable: metrics and the overview page name the latest kept window.
    assert metric(report, "tfobs_kept_captures_total") == len(expected)
    assert metric(report, "tfobs_kept_capture_window") == turned["index"]
    assert metric(report, "tfobs_kept_bytes") == sum(p.stat().st_size for p in paths)
    assert turned["kept_path"] in report["page"]

    for rec, path in zip(kept(report), paths, strict=True):
        # `tfobs analyze` of the kept run gives the summary that was published live.
        out = subprocess.run(
            [sys.executable, "-m", "tfobs.cli", "analyze", str(keep_dir), "--run",
             path.parent.name, "--format", "json"],
            cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
        assert json.loads(out.stdout) == rec["summary"]
        # XProf 2.24.2's overview page reads the kept file.
        overview = run_tool(path, "overview_page")
        analysis = overview[1]["p"]
        xprof_ms = float(analysis["steptime_ms_average"])
        ours_ms = rec["summary"]["steps"]["mean_s"] * 1e3
        assert xprof_ms == pytest.approx(ours_ms, rel=0.05), (xprof_ms, ours_ms)
        if rec is turned:
            assert "HIGHLY input-bound" in analysis["input_conclusion"], analysis
    # With no --run: the newest kept window, the turned one.
    newest = subprocess.run([sys.executable, "-m", "tfobs.cli", "analyze", str(keep_dir),
                             "--format", "json"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120, check=True)
    assert json.loads(newest.stdout) == turned["summary"]


def test_steady_job_keeps_only_the_first_plus_what_was_asked_for(tmp_path):
    keep_dir = tmp_path / "keep"
    report = run_job({"keep_dir": str(keep_dir)}, "--keep-at", "70")
    assert "capture_now(keep=True) granted" in report["stdout"]
    windows = captured(report)
    assert len(windows) >= 4, report["records"]
    on_demand = [r for r in report["records"] if r["on_demand"]]
    assert len(on_demand) == 1 and on_demand[0]["kept_path"], report["records"]
    # On a steady job the triggers fire for the first window alone. A shared machine can
    # slow one stretch of it (a CI run kept the window after the asked-for one beside
    # another job's start); such a window is kept for what its own figures show, and once.
    fired = replay_triggers(windows, keep_dir)
    assert fired[windows[0]["index"]] == ["first"]
    extra = extra_keeps(fired)
    assert len(extra - {on_demand[0]["index"]}) <= 1, fired
    expected = sorted({windows[0]["index"], on_demand[0]["index"]} | extra)
    assert [r["index"] for r in kept(report)] == expected, fired
    assert len(files_under(keep_dir)) == len(expected)
    assert report["health"]["errors"] == {}


@pytest.fixture
def tiny_tmpfs(tmp_path):
    with small_tmpfs(tmp_path, "1m", "tfobs-keep") as mnt:
        yield mnt


def assert_trained_and_counted(report: dict, base: dict, why: str) -> None:
    assert (report["steps"], report["weights"]) == (base["steps"], base["weights"])
    assert report["health"]["steps"] == base["steps"]
    assert len(captured(report)) >= 2, report["records"]  # windows published as usual
    assert kept(report) == []
    assert report["health"]["errors"].get("keep", 0) >= 1, report["health"]
    assert set(report["health"]["errors"]) == {"keep"}, report["health"]
    assert any(ln.startswith("tfobs_errors_total{") and 'stage="keep"' in ln
               for ln in report["metrics"].splitlines())
    # Logged once, with the file system's own reason.
    (line,) = [ln for ln in report["stderr"].splitlines() if "tfobs keep error" in ln]
    assert why in line, line


def test_read_only_keep_folder(tiny_tmpfs, baseline):
    # Read-only from the start: enable() names keep_dir (as it does capture_dir), even for
    # root, whom the folder's mode would not stop.
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_tmpfs)], check=True)
    with pytest.raises(ConfigError, match=r"keep_dir=.*this process can write.*\(cannot "
                                          rf"make it: {tiny_tmpfs} is not writable\)"):
        Config.load(environ={}, keep_dir=str(tiny_tmpfs / "keep"))
    # Turned read-only once training runs: the windows go on, not kept, counted.
    subprocess.run(["mount", "-o", "remount,rw", str(tiny_tmpfs)], check=True)
    report = run_job({"keep_dir": str(tiny_tmpfs / "keep"), "keep_on_step_time_rise": 0.0},
                     "--keep-at", "50", "--remount-ro", str(tiny_tmpfs), steps=80)
    assert_trained_and_counted(report, baseline[80], "Read-only file system")
    assert files_under(tiny_tmpfs) == []


def test_full_keep_folder(tiny_tmpfs, baseline):
    filler = tiny_tmpfs / "filler"
    with open(filler, "wb") as fh, pytest.raises(OSError, match="No space left"):
        while True:
            fh.write(b"\0" * 65536)
            fh.flush()
    report = run_job({"keep_dir": str(tiny_tmpfs / "keep")}, "--keep-at", "50", steps=80)
    assert_trained_and_counted(report, baseline[80], "No space left on device")
    assert files_under(tiny_tmpfs) == [filler]  # nothing half-written beside it


def test_keep_folder_on_unknown_file_system(baseline):
    report = run_job({"keep_dir": "foo://bar/keep"}, "--keep-at", "50", steps=80)
    assert_trained_and_counted(report, baseline[80], "File system scheme 'foo' not implemented")
