"""Two MultiWorkerMirroredStrategy workers as local processes on loopback (CPU), TF_CONFIG
set as a cluster launcher sets it, `tfobs.enable()` as each script's first line, custom
training loops, scraped by a real Prometheus that loads dashboards/alerts.yml.

Worker 1's input pipeline sleeps on purpose. In a synchronous job both workers' steps then
last equally long (worker 0 waits for worker 1 inside the all-reduce), so the step time
cannot name the straggler; the breakdown does: worker 1 spends its step waiting for input,
worker 0 in the collective. The recording rules name worker 1, and the Workers dashboard
has data for every panel that does not need a GPU.
"""

from __future__ import annotations

import pathlib
import time

import pytest

from tests.support.cluster import STEPS, TaskCrashed, launch, stop_all, wait_results
from tests.support.dashboards import RULES, dashboard_queries, metric_names, substitute
from tests.support.prometheus_server import PrometheusServer

pytest.importorskip("tensorflow")
# Alone: its workers abort more often with other work beside them (issue 36).
pytestmark = [pytest.mark.slow, pytest.mark.alone]

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORKERS_DASHBOARD = ROOT / "dashboards" / "workers.json"
SLOW_WORKER = "1"
SLOW_INPUT_MS = 80
# Figures only a GPU capture has (no GPU here): device activity per GPU.
GPU_CAPTURE_METRICS = {"tfobs_gpu_busy_ratio", "tfobs_collective_seconds"}


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    tasks = [("worker", 0), ("worker", 1)]
    # A worker aborts natively in about one run of four (benchmarks/window_end_safety.py;
    # RESULTS.md "Window end safety"): glibc's heap check fires inside TensorFlow's own
    # host-tracer stop (TraceMeRecorder::Consume -> SplitEventTracker::FindStartAndMerge,
    # seen under gdb), also when tfobs stops tracing on the training thread between steps.
    # The recorder merges a cross-thread activity (each collective's CompleteParams) through
    # a pointer into a list libstdc++ has copied and freed: TensorFlow's defect, out of
    # tfobs's reach. Until TensorFlow fixes it, up to two fresh attempts, each said in the
    # output; any other failure fails at once. This retry hides that defect: it goes with
    # TensorFlow's fix.
    for attempt in (1, 2, 3):
        tmp = tmp_path_factory.mktemp("mwms")
        procs, info = launch("mwms", tasks, tmp,
                             {("worker", 1): {"SLOW_INPUT_MS": str(SLOW_INPUT_MS)}})
        prom = PrometheusServer([f"127.0.0.1:{info[t]['port']}" for t in tasks],
                                scrape_interval_s=1.0, rule_files=[RULES],
                                evaluation_interval_s=1.0)
        try:
            prom.start()
            results = wait_results(procs, info, tasks, timeout_s=300)
            break
        except BaseException as exc:
            prom.stop()
            stop_all(procs, info, tmp)
            if attempt == 3 or not isinstance(exc, TaskCrashed):
                raise
            print(f"attempt {attempt}: {exc}; starting the job again")
    try:
        # The last window's figures scraped and the rules evaluated on them.
        last = max(w["last"] for r in results.values() for w in r["windows"])
        prom.wait_for(f"count(tfobs_window_last_step == {last}) == 2", timeout_s=30)
        prom.wait_for("tfobs:job_slowest_worker_own_step_seconds", timeout_s=30)
        prom.flush_scrapes(3)
        yield prom, results
    finally:
        prom.stop()
        stop_all(procs, info, tmp)


def test_every_worker_captures_the_same_step_numbers(job) -> None:
    prom, results = job
    windows = {key[1]: [(w["first"], w["last"]) for w in r["windows"]
                        if w["outcome"] == "captured"] for key, r in results.items()}
    assert windows[0] == windows[1] == [(10, 14), (20, 24), (40, 44)], results
    # Prometheus shows the same: one first/last step, equal on both workers.
    for gauge, want in (("tfobs_window_first_step", 40), ("tfobs_window_last_step", 44)):
        got = {r["metric"]["tf_task"]: float(r["value"][1]) for r in prom.query(gauge)}
        assert got == {"0": want, "1": want}, (gauge, got)


def test_per_worker_series_carry_the_identity(job) -> None:
    prom, results = job
    clusters = {r["identity"]["tf_cluster"] for r in results.values()}
    assert len(clusters) == 1 and clusters != {"none"}
    series = prom.query("tfobs_step_duration_seconds_count")
    idents = {(s["metric"]["tf_job"], s["metric"]["tf_task"], s["metric"]["tf_cluster"],
               s["metric"]["local_rank"]) for s in series}
    cluster = clusters.pop()
    assert idents == {("worker", "0", cluster, "0"), ("worker", "1", cluster, "0")}
    assert all(float(s["value"][1]) == STEPS for s in series)
    breakdown = prom.query('count by (tf_task) (tfobs_step_time_breakdown_seconds)')
    assert {s["metric"]["tf_task"] for s in breakdown} == {"0", "1"}
    # The handle reports the port each worker took; Prometheus scraped exactly those.
    ports = {r["port"] for r in results.values()}
    scraped = {int(t["scrapeUrl"].split(":")[2].split("/")[0]) for t in prom.targets_health()}
    assert ports == scraped


def test_straggler_expression_names_the_slowed_worker(job) -> None:
    prom, _ = job
    slowest = prom.query("tfobs:job_slowest_worker_own_step_seconds")
    assert [s["metric"]["tf_task"] for s in slowest] == [SLOW_WORKER], slowest
    factor = prom.scalar("max(tfobs:job_straggler_factor)")
    assert factor is not None and factor >= 1.25, factor
    # The window step time alone cannot tell: the all-reduce makes both workers equally slow.
    step = {s["metric"]["tf_task"]: float(s["value"][1])
            for s in prom.query("tfobs:worker_window_step_seconds")}
    assert max(step.values()) / min(step.values()) < factor, step
    # The alert's expression (its 10 min hold aside) names the same worker.
    import yaml

    rules = yaml.safe_load(RULES.read_text())
    alert = next(r for g in rules["groups"] for r in g["rules"]
                 if r.get("alert") == "TfobsStragglerWorker")
    firing = prom.query(alert["expr"])
    assert [s["metric"]["tf_task"] for s in firing] == [SLOW_WORKER], firing


def test_input_bound_verdicts_differ_between_the_workers(job) -> None:
    prom, results = job
    verdict = {s["metric"]["tf_task"]: s["metric"]["verdict"]
               for s in prom.query("tfobs_input_bound_verdict == 1")}
    assert verdict[SLOW_WORKER] == "highly", verdict
    assert verdict["0"] in ("not", "potentially"), verdict
    ratio = {s["metric"]["tf_task"]: float(s["value"][1])
             for s in prom.query("tfobs_input_bound_ratio")}
    assert ratio[SLOW_WORKER] >= 0.20 > ratio["0"], ratio


def test_every_workers_dashboard_panel_has_data_for_this_job(job) -> None:
    prom, _ = job
    empty, checked = [], 0
    end = time.time()
    for q in dashboard_queries(WORKERS_DASHBOARD):
        if metric_names(q.expr) & GPU_CAPTURE_METRICS:
            continue  # device activity per GPU: there is no GPU here
        checked += 1
        result = prom.query_range(substitute(q.expr), end - 120, end, step=2.0)
        if not any(series.get("values") for series in result):
            empty.append(q.where)
    assert checked >= 8
    assert empty == []
