"""ParameterServerStrategy on loopback: a chief (the coordinator, which runs the training
loop), a worker and a parameter server, each its own process with TF_CONFIG and
`tfobs.enable()` as its first line. Only the chief runs steps, so only it is profiled; the
worker and the parameter server still serve their metrics (samplers, health), and every
process is labelled by its task type. Scraped by a real Prometheus."""

from __future__ import annotations

import pytest

from tests.support.cluster import STEPS, launch, stop_all, wait_results
from tests.support.prometheus_server import PrometheusServer

pytest.importorskip("tensorflow")
pytestmark = pytest.mark.slow

TASKS = [("chief", 0), ("worker", 0), ("ps", 0)]


def test_parameter_server_job_profiles_only_the_chief(tmp_path) -> None:
    # NVML on everywhere: no GPU here, so each process reports tfobs_nvml_available 0.
    nvml_on = {task: {"TFOBS_NVML": "true"} for task in TASKS}
    procs, info = launch("ps", TASKS, tmp_path, nvml_on)
    prom = PrometheusServer([f"127.0.0.1:{info[t]['port']}" for t in TASKS],
                            scrape_interval_s=1.0)
    try:
        prom.start()
        chief = wait_results(procs, info, [("chief", 0)], timeout_s=300)[("chief", 0)]
        assert chief["steps"] == STEPS and chief["identity"]["tf_job"] == "chief"
        captured = [(w["first"], w["last"]) for w in chief["windows"]
                    if w["outcome"] == "captured"]
        # Its steps are short, so the duty-cycle budget may skip a due window; the ones
        # taken are the aligned ones.
        assert captured and set(captured) <= {(10, 14), (20, 24), (40, 44)}, chief
        prom.wait_targets_up(timeout_s=30)
        prom.wait_for(f'tfobs_window_last_step{{tf_job="chief"}} == {captured[-1][1]}',
                      timeout_s=30)
        prom.flush_scrapes(2)

        # Every process is there, labelled by its task type, all of one training job.
        info_series = prom.query("tfobs_info")
        assert {s["metric"]["tf_job"] for s in info_series} == {"chief", "worker", "ps"}
        assert len({s["metric"]["tf_cluster"] for s in info_series}) == 1
        # Only the process that runs steps is profiled.
        captured_by = {s["metric"]["tf_job"]: float(s["value"][1]) for s in
                       prom.query('sum by (tf_job) (tfobs_windows_total{outcome="captured"})')}
        assert captured_by == {"chief": len(captured), "worker": 0.0, "ps": 0.0}, captured_by
        windows_by = {s["metric"]["tf_job"] for s in prom.query("tfobs_window_steps")}
        assert windows_by == {"chief"}
        # ... while all serve their samplers (NVML: none on this machine, said as 0).
        nvml = {s["metric"]["tf_job"]: float(s["value"][1])
                for s in prom.query("tfobs_nvml_available")}
        assert nvml == {"chief": 0.0, "worker": 0.0, "ps": 0.0}
        steps = {s["metric"]["tf_job"]: float(s["value"][1])
                 for s in prom.query("tfobs_step_duration_seconds_count")}
        assert steps == {"chief": float(STEPS), "worker": 0.0, "ps": 0.0}
    finally:
        prom.stop()
        stop_all(procs, info, tmp_path)
    results = wait_results(procs, info, TASKS, timeout_s=30)
    for task in (("worker", 0), ("ps", 0)):
        assert results[task]["outcomes"] == {} and results[task]["steps"] == 0, results[task]
        assert results[task]["identity"]["tf_job"] == task[0]
