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

import json
import os
import pathlib
import subprocess
import sys
import time

import pytest

from tests.support.dashboards import RULES, dashboard_queries, metric_names, substitute
from tests.support.prometheus_server import PrometheusServer, free_port

pytest.importorskip("tensorflow")
pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[1]
WORKERS_DASHBOARD = ROOT / "dashboards" / "workers.json"
SLOW_WORKER = "1"
SLOW_INPUT_MS = 80
STEPS = 45  # windows at steps 10, 20 and 40 (first_window_step 10, interval 20)
# Figures only a GPU capture has (no GPU here): device activity per GPU.
GPU_CAPTURE_METRICS = {"tfobs_gpu_busy_ratio", "tfobs_collective_seconds"}


def launch(mode: str, tasks: list[tuple[str, int]], tmp: pathlib.Path,
           env_for: dict[tuple[str, int], dict[str, str]] | None = None,
           ) -> tuple[list[subprocess.Popen], dict[tuple[str, int], dict]]:
    """Start one process per (task type, index), each with TF_CONFIG and its own metrics
    port, as a launcher would. Returns the processes and, per task, its ports and files."""
    cluster: dict[str, list[str]] = {}
    for task_type, _ in tasks:
        cluster.setdefault(task_type, []).append(f"127.0.0.1:{free_port()}")
    procs, info = [], {}
    for task_type, index in tasks:
        port = free_port()
        out = tmp / f"{task_type}{index}.json"
        env = {k: v for k, v in os.environ.items()
               if k not in ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK") and
               not k.startswith("TFOBS_")}
        env.update(
            TF_CONFIG=json.dumps({"cluster": cluster,
                                  "task": {"type": task_type, "index": index}}),
            TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", OTEL_SDK_DISABLED="true",
            TFOBS_METRICS_PORT=str(port), TFOBS_METRICS_BIND="127.0.0.1", TFOBS_NVML="false",
            TFOBS_FIRST_WINDOW_STEP="10", TFOBS_WINDOW_STEPS="5", TFOBS_INTERVAL_STEPS="20",
            # A large budget: every due window is taken on every worker (the test is
            # about alignment, not the duty cycle).
            TFOBS_OVERHEAD_BUDGET="0.5", TFOBS_CAPTURE_DIR=str(tmp),
            STEPS=str(STEPS), LINGER_S="240",
        )
        env.update((env_for or {}).get((task_type, index), {}))
        log = (tmp / f"{task_type}{index}.log").open("w")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "tests.support.multiworker_job", mode, str(out)],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
        info[(task_type, index)] = {"port": port, "out": out}
    return procs, info


def wait_results(procs, info, keys, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    results = {}
    while time.monotonic() < deadline and len(results) < len(keys):
        for key in keys:
            out = info[key]["out"]
            if key not in results and out.exists():
                results[key] = json.loads(out.read_text())
        dead = [p.args for p in procs if p.poll() not in (None, 0)]
        assert not dead, f"a task died: {dead}"
        time.sleep(0.5)
    assert len(results) == len(keys), f"no result from {set(keys) - set(results)}"
    return results


def stop_all(procs, info, tmp: pathlib.Path) -> None:
    for entry in info.values():
        pathlib.Path(str(entry["out"]) + ".stop").touch()
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    for log in sorted(tmp.glob("*.log")):
        sys.stdout.write(f"--- {log.name}\n{log.read_text()[-1500:]}\n")


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mwms")
    tasks = [("worker", 0), ("worker", 1)]
    procs, info = launch("mwms", tasks, tmp,
                         {("worker", 1): {"SLOW_INPUT_MS": str(SLOW_INPUT_MS)}})
    prom = PrometheusServer([f"127.0.0.1:{info[t]['port']}" for t in tasks],
                            scrape_interval_s=1.0, rule_files=[RULES],
                            evaluation_interval_s=1.0)
    try:
        prom.start()
        results = wait_results(procs, info, tasks, timeout_s=300)
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
