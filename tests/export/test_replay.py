"""Replay (`tfobs analyze --serve`): real captures' figures served as the live exporter would,
GPU ones included, on a machine without a GPU."""

from __future__ import annotations

import pathlib
import re
import socket

import pytest

from tests.support.scrape import OPENMETRICS, scrape
from tfobs.analysis.pipeline import analyze
from tfobs.export import catalog, replay

pytestmark = pytest.mark.slow  # starts the replay HTTP server

CAPTURES = pathlib.Path(__file__).parents[1] / "data" / "captures"
GPU_CAPTURE = CAPTURES / "tracelens__mi300_jax08_gemm__tw003.xplane.pb"  # AMD MI300, real
CPU_CAPTURE = CAPTURES / "generated__tf2.20cpu__keras3_fit.xplane.pb"


def om_samples(url: str) -> dict[str, list]:
    return scrape(url, OPENMETRICS).samples()


def one(samples: dict[str, list], name: str, **labels: str) -> float:
    hits = [s.value for s in samples.get(name, [])
            if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def test_replay_serves_real_gpu_and_cpu_captures_as_the_live_exporter_would() -> None:
    gpu, cpu = analyze(str(GPU_CAPTURE)), analyze(str(CPU_CAPTURE))
    assert gpu.devices and cpu.steps.items  # the test data holds what this test checks
    server = replay.start([gpu, cpu], port=0, bind="127.0.0.1")
    try:
        s = om_samples(server.url)
    finally:
        server.shutdown(2.0)
    g, c = {"tf_job": "replay", "tf_task": "0"}, {"tf_job": "replay", "tf_task": "1"}
    # The CPU capture: its steps fill the step histogram, one captured window, its figures.
    assert one(s, "tfobs_step_duration_seconds_count", **c) == len(cpu.steps.items)
    assert one(s, "tfobs_step_duration_seconds_sum", **c) == pytest.approx(
        sum(st.duration_s for st in cpu.steps.items))
    assert one(s, "tfobs_windows_total", outcome="captured", **c) == 1
    assert one(s, "tfobs_input_bound_ratio", **c) == pytest.approx(cpu.input_bound.ratio)
    assert one(s, "tfobs_input_bound_verdict", verdict=cpu.input_bound.verdict, **c) == 1
    assert one(s, "tfobs_window_steps", **c) == cpu.steps.count
    exemplars = [x.exemplar for x in s["tfobs_step_duration_seconds_bucket"]
                 if x.exemplar and x.labels["tf_task"] == "1"]
    assert exemplars and all(re.fullmatch("[0-9a-f]{32}", e.labels["trace_id"])
                             for e in exemplars)
    # The GPU capture: every device's idle breakdown and kernel figures.
    for dev in gpu.devices:
        d = {"device": dev.device, **g}
        assert one(s, "tfobs_gpu_busy_ratio", **d) == pytest.approx(dev.busy_s / dev.span_s)
        for cause in catalog.IDLE_CAUSES:
            assert one(s, "tfobs_gpu_idle_ratio", cause=cause, **d) == pytest.approx(
                dev.idle_s.get(cause, 0.0) / dev.span_s)
        assert one(s, "tfobs_kernels_per_step", **d) == dev.kernel_count  # no steps: per window
        assert one(s, "tfobs_kernel_launch_delay_seconds", stat="p95", **d) == pytest.approx(
            dev.launch_delay_p95_s)
    k = gpu.kernels
    assert one(s, "tfobs_tensor_core_kernel_ratio", **g) == pytest.approx(
        k.tensor_core_s / k.total_s)
    assert one(s, "tfobs_windows_total", outcome="captured", **g) == 1
    assert not [x for x in s["tfobs_gpu_busy_ratio"] if x.labels["tf_task"] == "1"]  # CPU one
    info = [x.labels for x in s["tfobs_info"] if x.labels["tf_task"] == "0"][0]
    assert info["devices"] == ",".join(dv.device for dv in gpu.devices)


def test_serve_returns_after_seconds_and_reports_a_taken_port(capsys: pytest.CaptureFixture
                                                              ) -> None:
    summary = analyze(str(CPU_CAPTURE))
    assert replay.serve([summary], port=0, bind="127.0.0.1", seconds=0.2) == 0
    out = capsys.readouterr().out
    assert re.search(r"serving 1 capture\(s\) at http://127\.0\.0\.1:\d+/metrics", out)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert replay.serve([summary], port=port, bind="127.0.0.1", seconds=0.1) == 2
    err = capsys.readouterr().err
    assert f"port {port} on 127.0.0.1 is in use" in err


def test_metrics_name_filter_serves_only_the_series_asked_for() -> None:
    # `/metrics?name[]=...` as prometheus_client's own server takes it (federation, curl).
    server = replay.start([analyze(str(CPU_CAPTURE))], port=0, bind="127.0.0.1")
    try:
        whole = om_samples(server.url)
        some = om_samples(server.url + "?name[]=tfobs_input_bound_ratio"
                      "&name[]=tfobs_windows_total&name[]=no_such_series")
        again = om_samples(server.url)
    finally:
        server.shutdown(2.0)
    assert len(whole) > 10 and again.keys() == whole.keys()  # a filtered ask is not cached
    assert set(some) == {"tfobs_input_bound_ratio", "tfobs_windows_total"}
    assert [x.value for x in some["tfobs_input_bound_ratio"]] == [
        x.value for x in whole["tfobs_input_bound_ratio"]]
