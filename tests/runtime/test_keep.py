"""Keeping windows (tfobs/runtime/keep.py) without a training job: the triggers on summaries,
the retention budget, the hourly cap and failing stores, on real captures written through
TensorFlow's real `tf.io.gfile`. The training jobs are in tests/runtime/test_keep_training.py."""

from __future__ import annotations

import json
import os
import pathlib
import threading
import time
import urllib.request

import pytest

from tfobs.config import Config
from tfobs.export.metrics_collector import SummaryCollector
from tfobs.export.otel import window_attributes
from tfobs.export.page import render_page
from tfobs.export.prometheus import health_of
from tfobs.health import HealthLedger
from tfobs.runtime import keep as keep_mod
from tfobs.runtime.failures import Failures
from tfobs.runtime.keep import GfileStore, Keeper, Triggers, run_name
from tfobs.summary import Advice, InputBound, Steps, WindowSummary
from tfobs.window import WindowRecord

CAPTURES = pathlib.Path(__file__).parents[1] / "data" / "captures"
CAPTURE = CAPTURES / "generated__tf2.20cpu__keras3_fit.xplane.pb"  # 1.2 MB
SMALL = CAPTURES / "tracelens__mi300_jax08_gemm__tw003.xplane.pb"  # 110 kB


# An input share that goes with each verdict (XProf: moderately from 5 %, highly from 20 %).
RATIO = {"not": 0.01, "potentially": 0.01, "moderately": 0.1, "highly": 0.5, "unknown": 0.0}


def window(mean_s: float = 0.05, verdict: str = "not",
           critical: tuple[str, ...] = (), ratio: float | None = None) -> WindowSummary:
    return WindowSummary(
        steps=Steps(count=5, method="markers", mean_s=mean_s),
        input_bound=InputBound(ratio=RATIO[verdict] if ratio is None else ratio,
                               verdict=verdict),
        advice=tuple(Advice(code, "critical", "") for code in critical))


def fired(config: Config, windows: list[WindowSummary]) -> list[list[str]]:
    triggers = Triggers(config)
    return [triggers.reasons(w) for w in windows]


# -- triggers ------------------------------------------------------------------------------


def test_steady_job_sets_off_only_the_first_window():
    steady = [window(0.05 * (1 + 0.1 * (i % 3)), "moderately") for i in range(20)]
    assert fired(Config(), steady) == [["first"]] + [[]] * 19


def test_input_bound_turn_is_kept_once_then_is_the_norm():
    windows = [window(0.05, "not")] * 4 + [window(0.05, "highly")] * 4
    got = fired(Config(), windows)
    assert got == [["first"], [], [], [], ["input_bound"], [], [], []]
    # "potentially" follows XProf's "other" time, not input: no trigger.
    assert fired(Config(), [window(0.05, "not"), window(0.05, "potentially")])[1] == []
    # Back to good for RECENT windows, then bad again: kept again.
    back = [window(0.05, "highly")] + [window(0.05, "not")] * keep_mod.RECENT + [
        window(0.05, "highly")]
    assert fired(Config(), back)[-1] == ["input_bound"]


def test_input_share_on_a_threshold_does_not_fire_by_noise():
    # 4.9 % is "not", 5.1 % "moderately": the verdict flips, the job did not change.
    flapping = [window(0.05, "not", ratio=0.049), window(0.05, "moderately", ratio=0.051)] * 4
    assert fired(Config(), flapping) == [["first"]] + [[]] * 7
    # A real turn past the same threshold still fires: 3 % to 12 %.
    turn = [window(0.05, "not", ratio=0.03)] * 3 + [window(0.05, "moderately", ratio=0.12)]
    assert fired(Config(), turn)[-1] == ["input_bound"]
    assert keep_mod.INPUT_MARGIN == 0.02


def test_step_time_rise_against_the_recent_median_resets_after_firing():
    times = [0.05, 0.052, 0.049, 0.051, 0.08, 0.081, 0.079, 0.12]
    got = fired(Config(keep_on_step_time_rise=0.25), [window(t) for t in times])
    assert got == [["first"], [], [], [], ["step_time"], [], [], ["step_time"]]
    off = fired(Config(keep_on_step_time_rise=0.0), [window(t) for t in times])
    assert off == [["first"]] + [[]] * 7


def test_new_critical_advice_fires_once():
    ws = [window(), window(critical=("output_bound",)), window(critical=("output_bound",)),
          window(critical=("output_bound", "other_bound")), window()]
    assert fired(Config(), ws) == [["first"], ["critical_advice"], [], ["critical_advice"], []]
    assert fired(Config(keep_on_critical_advice=False), ws)[1] == []


def test_each_trigger_is_an_option():
    cfg = Config(keep_first=False, keep_on_input_bound=False, keep_on_step_time_rise=0.0,
                 keep_on_critical_advice=False)
    ws = [window(0.05, "not"), window(0.5, "highly", ("input_bound",))]
    assert fired(cfg, ws) == [[], []]
    assert fired(Config(), ws) == [["first"], ["input_bound", "step_time", "critical_advice"]]


def test_empty_window_sets_off_nothing():
    assert fired(Config(), [WindowSummary(), window()]) == [[], ["first"]]


# -- writing, retention, the hourly cap ------------------------------------------------------


def make_keeper(keep_dir: str, **options) -> tuple[Keeper, HealthLedger]:
    cfg = Config(keep_dir=keep_dir, **options)
    health = HealthLedger()
    keeper = Keeper(cfg, health, Failures(health), {"tf_job": "worker", "tf_task": "1"})
    return keeper, health


def record(index: int, keep: bool = False) -> WindowRecord:
    # One run per window: a second apart, as windows are.
    return WindowRecord(index=index, start_ns=1_800_000_000_000_000_000 + index * 10**9,
                        first_step=10 * index, on_demand=keep, keep=keep)


def kept_files(root: pathlib.Path) -> list[pathlib.Path]:
    return sorted(root.glob("plugins/profile/*/*"))


def test_kept_capture_is_in_tensorboard_layout_byte_for_byte(tmp_path):
    data = CAPTURE.read_bytes()
    keeper, health = make_keeper(str(tmp_path))
    rec = record(0, keep=True)
    cpu_s = keeper.keep(window(), rec, data)
    (path,) = kept_files(tmp_path)
    assert rec.kept_path == str(path)
    assert path.parent.parent == tmp_path / "plugins" / "profile"
    assert path.parent.name == run_name(rec, window()) == "2027_01_15_08_00_00_w0000_step0"
    assert path.name == f"{keeper.store.host}.xplane.pb" and path.name.endswith(
        "_worker_1.xplane.pb")
    assert path.read_bytes() == data
    assert cpu_s > 0  # charged to the budget by the reduce path
    snap = health.snapshot()
    assert snap.kept == 1 and snap.kept_bytes == len(data)
    assert snap.kept_last.path == str(path) and snap.kept_last.reason == "on_demand,first"
    # tfobs analyze reads it as a TensorBoard log folder.
    import tfobs

    assert tfobs.analyze(tmp_path).to_dict() == tfobs.analyze(CAPTURE).to_dict()


def test_retention_budget_holds_over_many_windows_oldest_first(tmp_path):
    data = SMALL.read_bytes()
    budget = int(3.5 * len(data))
    keeper, health = make_keeper(str(tmp_path), keep_max_bytes=budget)
    for i in range(25):
        keeper.keep(window(), record(i, keep=True), data)
        files = kept_files(tmp_path)
        assert sum(f.stat().st_size for f in files) <= budget
        assert health.snapshot().kept_bytes == sum(f.stat().st_size for f in files)
        # The newest three windows, and no empty run folder left behind.
        assert [f.parent.name.split("_w")[1][:4] for f in files] == [
            f"{j:04d}" for j in range(max(0, i - 2), i + 1)]
        assert len(list((tmp_path / "plugins" / "profile").iterdir())) == len(files)
    assert health.snapshot().kept == 25 and health.errors == {}
    # A restarted worker finds its own files again and keeps to the same budget.
    again, _ = make_keeper(str(tmp_path), keep_max_bytes=budget)
    again.keep(window(), record(100, keep=True), data)
    assert len(kept_files(tmp_path)) == 3
    # Another worker's files in the same folder are not this worker's to delete.
    other = Keeper(Config(keep_dir=str(tmp_path), keep_max_bytes=budget), HealthLedger(),
                   Failures(HealthLedger()), {"tf_job": "worker", "tf_task": "2"})
    other.keep(window(), record(101, keep=True), data)
    assert len(kept_files(tmp_path)) == 4


def test_a_capture_over_the_budget_is_dropped_not_kept(tmp_path):
    data = SMALL.read_bytes()
    keeper, health = make_keeper(str(tmp_path), keep_max_bytes=len(data) - 1)
    rec = record(0, keep=True)
    keeper.keep(window(), rec, data)
    assert rec.kept_path == "" and kept_files(tmp_path) == []
    assert health.dropped == {"keep": 1}


def test_at_most_n_kept_per_hour_by_triggers(tmp_path):
    now = [1000.0]
    cfg = Config(keep_dir=str(tmp_path), keep_max_per_hour=2, keep_on_step_time_rise=0.5)
    health = HealthLedger()
    keeper = Keeper(cfg, health, Failures(health), {"tf_job": "w", "tf_task": "0"},
                    clock=lambda: now[0])
    data = SMALL.read_bytes()
    # Step time doubles every window: each one sets off a trigger.
    paths = []
    for i in range(5):
        rec = record(i)
        keeper.keep(window(0.01 * 2 ** i), rec, data)
        paths.append(rec.kept_path)
        now[0] += 60
    assert [bool(p) for p in paths] == [True, True, False, False, False]
    assert health.dropped == {"keep": 3}
    on_demand = record(5, keep=True)  # asked for: not held to the hourly cap
    keeper.keep(window(), on_demand, data)
    assert on_demand.kept_path
    now[0] += 3600  # an hour later the triggers may keep again
    rec = record(6)
    keeper.keep(window(10.0), rec, data)
    assert rec.kept_path


# -- failures are counted and dropped, never raised -------------------------------------------


def test_unknown_file_system_is_counted_not_raised(tmp_path):
    keeper, health = make_keeper("foo://bar/keep")
    rec = record(0, keep=True)
    keeper.keep(window(), rec, SMALL.read_bytes())
    assert rec.kept_path == "" and health.errors == {"keep": 1}
    assert health.snapshot().kept == 0


def test_failed_write_leaves_nothing_half_written(tmp_path, monkeypatch):
    keeper, health = make_keeper(str(tmp_path))

    def no_space(*a, **k):  # the rename fails as on a full disk
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(keep_mod.os, "replace", no_space)
    rec = record(0, keep=True)
    keeper.keep(window(), rec, SMALL.read_bytes())
    assert rec.kept_path == "" and health.errors == {"keep": 1}
    assert list(tmp_path.rglob("*")) in ([], [tmp_path / "plugins"],
                                         [tmp_path / "plugins", tmp_path / "plugins/profile"])
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_slow_store_is_not_waited_for_injected_delay(tmp_path, monkeypatch):
    """A store that takes longer than WRITE_TIMEOUT_S (here a real local folder whose write
    is delayed on purpose): the reduce path goes on, the next keep is dropped and counted."""
    monkeypatch.setattr(keep_mod, "WRITE_TIMEOUT_S", 0.2)
    keeper, health = make_keeper(str(tmp_path))
    release = threading.Event()

    class Slow(GfileStore):
        def put(self, run, data):
            release.wait(10)
            return super().put(run, data)

    keeper.store = Slow(str(tmp_path), keeper.store.host)
    data = SMALL.read_bytes()
    t0 = time.monotonic()
    first, second = record(0, keep=True), record(1, keep=True)
    keeper.keep(window(), first, data)
    keeper.keep(window(), second, data)
    assert time.monotonic() - t0 < 2.0
    assert first.kept_path == second.kept_path == ""  # the spans name no file
    assert health.errors == {"keep": 2}  # too slow, and dropped while still writing
    release.set()
    keeper._writer.join(10)
    assert len(kept_files(tmp_path)) == 1 and health.snapshot().kept == 1  # finished late


# -- findable: span attribute, metrics, overview page ----------------------------------------


def test_kept_path_is_on_the_span_the_metrics_and_the_page(tmp_path):
    keeper, health = make_keeper(str(tmp_path))
    rec = record(7, keep=True)
    keeper.keep(window(), rec, SMALL.read_bytes())
    assert window_attributes(window(), rec)["tfobs.window.kept_path"] == rec.kept_path
    assert "tfobs.window.kept_path" not in window_attributes(window(), record(8))

    collector = SummaryCollector()
    worker = collector.worker({"tf_job": "worker", "tf_task": "1"}, health)
    samples = {s.name: s.value for fam in collector.collect() for s in fam.samples}
    assert samples["tfobs_kept_captures_total"] == 1
    assert samples["tfobs_kept_capture_window"] == 7
    assert samples["tfobs_kept_bytes"] == SMALL.stat().st_size
    assert abs(samples["tfobs_kept_capture_timestamp_seconds"] - time.time()) < 60
    page = render_page(window(), health_of(worker))
    assert rec.kept_path in page and f"tensorboard --logdir {tmp_path}" in page


def test_no_kept_metrics_before_a_window_is_kept():
    collector = SummaryCollector()
    collector.worker({"tf_job": "w", "tf_task": "0"}, HealthLedger())
    names = {s.name for fam in collector.collect() for s in fam.samples}
    assert not [n for n in names if n.startswith("tfobs_kept")]


def test_keep_options_are_off_by_default_and_read_from_the_environment():
    assert Config().keep_dir == ""
    cfg = Config.load(environ={"TFOBS_KEEP_DIR": "gs://bucket/job", "TFOBS_KEEP_MAX_BYTES":
                               "1000", "TFOBS_KEEP_ON_STEP_TIME_RISE": "0.5",
                               "TFOBS_KEEP_FIRST": "false"})
    assert (cfg.keep_dir, cfg.keep_max_bytes, cfg.keep_on_step_time_rise, cfg.keep_first) == (
        "gs://bucket/job", 1000, 0.5, False)


@pytest.mark.slow  # starts the metrics server
def test_post_capture_keep_1_asks_for_a_kept_window():
    from tests.support.prometheus_server import free_port
    from tfobs.export.http_server import MetricsServer

    calls = []
    server = MetricsServer(SummaryCollector(), bind="127.0.0.1", port=free_port(),
                           remote_capture=True, capture_token="s3cret")
    server.capture_handler = lambda keep=False: calls.append(keep) or True
    server.start()
    try:
        for query in ("", "?keep=1", "?keep=0", "?x=1&keep=1"):
            req = urllib.request.Request(
                f"http://127.0.0.1:{server.port}/capture{query}", method="POST", data=b"",
                headers={"Authorization": "Bearer s3cret"})
            with urllib.request.urlopen(req, timeout=10) as resp:
                assert resp.status == 202 and json.loads(resp.read()) == {"accepted": True}
    finally:
        server.shutdown(2.0)
    assert calls == [False, True, False, True]


def test_capture_now_keep_marks_the_window(tmp_path):
    """Runtime.capture_now(keep=True) -> the next window's record says keep (no training:
    the windows' own request path)."""
    from tfobs.runtime.core import Runtime

    rt = Runtime(Config(keep_dir=str(tmp_path), metrics_port=-1, nvml=False))
    rt.running = True  # request path only; no threads started
    assert rt.capture_now(keep=True)
    assert rt._windows._keep and rt._windows._on_demand
    plain = Runtime(Config(metrics_port=-1, nvml=False))
    plain.running = True
    assert plain.capture_now(keep=True) and not plain._windows._keep  # no keep_dir: warned
    assert os.listdir(tmp_path) == []


@pytest.mark.slow  # starts XProf's server
def test_xprof_logdir_shows_the_kept_window_and_retention_clears_its_caches(tmp_path):
    """`xprof --logdir KEEP_DIR` (XProf 2.24.2's own server) lists the kept run and host and
    serves its overview page; XProf then writes caches into the run folder, and retention
    still removes the whole run once its capture goes."""
    import gzip
    import shutil
    import subprocess
    import sys

    from tests.support.prometheus_server import free_port

    data = SMALL.read_bytes()
    keeper, _ = make_keeper(str(tmp_path), keep_max_bytes=len(data) + 1)
    first = record(0, keep=True)
    keeper.keep(window(), first, data)
    run = pathlib.Path(first.kept_path).parent.name
    host = keeper.store.host
    port = free_port()
    xprof = shutil.which("xprof") or str(pathlib.Path(sys.executable).parent / "xprof")
    proc = subprocess.Popen([xprof, "--logdir", str(tmp_path), "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def get(path: str):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/data/plugin/profile/{path}",
                                    timeout=60) as resp:
            body = resp.read()
            if resp.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            return json.loads(body)

    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                runs = get("runs")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        assert runs == [run]
        assert get(f"hosts?run={run}&tag=overview_page") == [{"hostname": host}]
        overview = get(f"data?run={run}&tag=overview_page&host={host}")
        assert overview and "steptime_ms_average" in overview[1]["p"]
    finally:
        proc.terminate()
        proc.wait(10)
    caches = [p.name for p in pathlib.Path(first.kept_path).parent.iterdir()]
    assert len(caches) > 1, caches  # XProf's caches beside the capture
    second = record(1, keep=True)
    keeper.keep(window(), second, data)
    assert [p.name for p in (tmp_path / "plugins" / "profile").iterdir()] == [
        pathlib.Path(second.kept_path).parent.name]


def test_runtime_keeps_on_the_reduce_path_before_publishing_and_charges_the_budget(tmp_path):
    """The runtime's own path with the real profiler (a custom loop, in this process): the
    first window is kept, its path is on the record when the sinks publish (so the span
    carries it), and the write's CPU time is in what the budget is charged."""
    import tensorflow as tf

    import tfobs
    from tests.support.memory_exporter import MemoryExporter
    from tfobs.runtime.core import Runtime

    class PathAtPublish(MemoryExporter):
        def publish(self, summary, record):
            self.path_seen = record.kept_path
            super().publish(summary, record)

    sink = PathAtPublish()
    cfg = Config.load(environ={}, metrics_port=-1, nvml=False, interval_steps=1000,
                      window_steps=3, first_window_step=0, overhead_budget=0.5,
                      capture_dir=str(tmp_path / "scratch"), keep_dir=str(tmp_path / "keep"))
    rt = Runtime(cfg, sinks=[sink], step_sink=sink)
    spent: list[float] = []
    keep_fn = rt.keeper.keep

    def keep_and_note(*args):
        spent.append(keep_fn(*args))
        return spent[-1]

    rt.keeper.keep = keep_and_note
    rt.start()
    try:
        x = tf.ones((32,))
        for i in range(5):
            with tfobs.step(i):
                tf.reduce_sum(x * x)
        assert rt.wait_idle(60)
    finally:
        rt.stop(5.0)
    (summary, record), = sink.published
    assert sink.path_seen and sink.path_seen == record.kept_path
    assert pathlib.Path(record.kept_path).read_bytes()[:2]  # the real capture, complete
    assert files_in(tmp_path / "keep") == [pathlib.Path(record.kept_path)]
    assert spent and spent[0] > 0 and record.background_cpu_s >= spent[0]
    assert rt.health.snapshot().kept == 1


def files_in(folder: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())
