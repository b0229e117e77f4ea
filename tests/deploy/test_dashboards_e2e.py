"""End to end: real training runs (`tfobs demo`, normal and `--input-bound`) and a replay of
a GPU capture (`tfobs analyze --serve`), scraped by a real Prometheus. Every panel query of
every dashboard returns data with the template variables set to "All", and the input-bound
alert's expression is true for the input-bound run and false for the normal one.

There is no GPU here: the NVML and TensorFlow GPU-memory panels get their data from the real
PrometheusExporter fed synthetic GPU samples (a fourth target, tf_job="synthetic-gpu"); every
other panel is checked against the real runs and the real capture alone first.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

import pytest
import yaml

import tfobs
from tests.support.dashboards import (
    DASHBOARD_FILES,
    GPU_SOURCE_METRICS,
    RULES,
    dashboard_queries,
    live_exporter,
    metric_names,
    substitute,
    variable_queries,
)
from tests.support.prometheus_server import PrometheusServer, free_port

# waits: two 30 s demos and a replay scraped in real time; the input-bound alert compares a
# sleeping input pipeline with the job's compute, so it runs at normal priority in the lanes.
pytestmark = [pytest.mark.slow, pytest.mark.waits]

ROOT = pathlib.Path(__file__).resolve().parents[2]
GPU_CAPTURE = ROOT / "tests" / "data" / "captures" / "tracelens__mi300_jax08_gemm__tw003.xplane.pb"
TRAIN_S = 30


def _spawn(args: list[str], tf_job: str, log: pathlib.Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items()
           if k not in ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "TF_CONFIG")}
    env.update(TFOBS_TF_JOB=tf_job, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="",
               OTEL_SDK_DISABLED="true")
    out = log.open("w")
    return subprocess.Popen([sys.executable, "-m", "tfobs.cli", *args], cwd=ROOT, env=env,
                            stdout=out, stderr=subprocess.STDOUT)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("e2e")
    ports = {name: free_port() for name in ("normal", "inputbound", "replay", "gpu")}
    demo = ["demo", "--seconds", str(TRAIN_S), "--linger", "120", "--bind", "127.0.0.1",
            "--interval-steps", "40", "--steps-per-window", "10",
            # A generous budget so a 30 s run has several windows (the default 1 % allows one).
            "--overhead-budget", "0.2"]
    procs = [
        _spawn([*demo, "--port", str(ports["normal"])], "normal", tmp / "normal.log"),
        _spawn([*demo, "--input-bound", "--port", str(ports["inputbound"])], "inputbound",
               tmp / "inputbound.log"),
        _spawn(["analyze", str(GPU_CAPTURE), "--serve", str(ports["replay"]), "--seconds",
                "300"], "replay", tmp / "replay.log"),
    ]
    exporter = live_exporter(tfobs.analyze(GPU_CAPTURE), ports["gpu"], tf_job="synthetic-gpu",
                             gpu_sources=True)
    targets = [f"127.0.0.1:{p}" for p in ports.values()]
    # The rules too: the Workers dashboard reads the recording rules' series.
    prom = PrometheusServer(targets, scrape_interval_s=1.0, exemplars=True, rule_files=[RULES],
                            evaluation_interval_s=1.0)
    try:
        prom.start()
        deadline = time.monotonic() + 120
        for tf_job, proc in (("normal", procs[0]), ("inputbound", procs[1])):
            # Two captured windows, so the runs are past warm-up.
            prom.wait_for(f'tfobs_windows_total{{tf_job="{tf_job}",outcome="captured"}} >= 2',
                          timeout_s=max(deadline - time.monotonic(), 1), proc=proc)
        prom.wait_for('tfobs_window_steps{tf_job="replay"}', timeout_s=30)
        prom.flush_scrapes(3)
        yield prom
    finally:
        prom.stop()
        exporter.shutdown(2.0)
        for proc in procs:
            _stop(proc)
        for log in tmp.glob("*.log"):
            sys.stdout.write(f"--- {log.name}\n{log.read_text()[-1500:]}\n")


def _has_data(prom: PrometheusServer, expr: str) -> bool:
    end = time.time()
    result = prom.query_range(expr, end - 120, end, step=2.0)
    return any(series.get("values") for series in result)


def test_every_panel_query_of_every_dashboard_returns_data(stack) -> None:
    empty, checked = [], 0
    for path in DASHBOARD_FILES:
        for q in dashboard_queries(path):
            if metric_names(q.expr) & GPU_SOURCE_METRICS:
                continue  # needs a GPU: checked in the synthetic-GPU test below
            checked += 1
            expr = substitute(q.expr)
            # Without the synthetic-GPU target: the real runs and the real capture only.
            expr_real = expr.replace('tf_job=~".*"', 'tf_job!="synthetic-gpu"')
            if not _has_data(stack, expr_real):
                empty.append(q.where)
        for q in variable_queries(path):
            if not stack.query(substitute(q.expr).replace('tf_job=~".*"',
                                                          'tf_job!="synthetic-gpu"')):
                empty.append(q.where)
    assert checked >= 50
    assert empty == [], "panels with no data"


def test_nvml_panels_return_data_synthetic_gpu_samples(stack) -> None:
    checked = 0
    for path in DASHBOARD_FILES:
        for q in dashboard_queries(path):
            if metric_names(q.expr) & GPU_SOURCE_METRICS:
                assert _has_data(stack, substitute(q.expr)), q.where
                checked += 1
    assert checked >= 6


def test_a_selected_worker_filters_the_panels(stack) -> None:
    # The variables really select: the input-bound worker alone, by job/tf_job/worker.
    values = {"job": "tfobs", "tf_job": "inputbound", "worker": "0", "device": ".*"}
    q = next(q for q in dashboard_queries(DASHBOARD_FILES[0])
             if q.expr.startswith("tfobs_input_bound_ratio{"))
    result = stack.query(substitute(q.expr, values))
    assert {r["metric"]["tf_job"] for r in result} == {"inputbound"}


def test_input_bound_alert_expression_true_only_for_the_input_bound_run(stack) -> None:
    rules = yaml.safe_load(RULES.read_text())
    rule = next(r for g in rules["groups"] for r in g["rules"]
                if r.get("alert") == "TfobsInputBoundHigh")
    firing = {r["metric"]["tf_job"] for r in stack.query(rule["expr"])}
    assert "inputbound" in firing
    assert "normal" not in firing
    # ...and "normal" is absent because its ratio is low, not because it is missing.
    normal = stack.values('tfobs_input_bound_ratio{tf_job="normal"}')
    assert normal and max(normal) < 0.20
    ratio = stack.values('tfobs_input_bound_ratio{tf_job="inputbound"}')
    assert min(ratio) >= 0.20


def test_step_time_exemplars_carry_trace_ids(stack) -> None:
    end = time.time()
    found = stack.query_exemplars(
        'tfobs_step_duration_seconds_bucket{tf_job=~"normal|inputbound"}', end - 300, end)
    trace_ids = {e["labels"].get("trace_id") for e in found}
    assert trace_ids - {None}, "no exemplars on the step-time histogram"
