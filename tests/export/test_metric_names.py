"""Every metric the dashboards and alert rules name is one tfobs really exports: checked
against live `/metrics` pages served by tfobs's own exporter code, not against a list kept
by hand: the replay server fed with summaries of every real capture in tests/data/captures,
and the PrometheusExporter with a real capture's summary and its health counters (errors,
drops, cost) driven through its API. NVML and TensorFlow GPU memory metrics need a GPU;
they are checked on the same exporter fed synthetic GPU samples (see the test's name)."""

from __future__ import annotations

import pathlib

import pytest

import tfobs
from tests.support.dashboards import (
    GPU_SOURCE_METRICS,
    all_queries,
    live_exporter,
    metric_names,
    recorded_names,
)
from tests.support.prometheus_server import free_port
from tests.support.scrape import scrape
from tfobs.export import replay

pytestmark = pytest.mark.slow  # starts the replay HTTP server

CAPTURES = sorted((pathlib.Path(__file__).parents[1] / "data" / "captures").glob("*.xplane.pb"))


def sample_names(url: str) -> set[str]:
    """Sample names on a live /metrics page (histograms as _bucket/_sum/_count)."""
    return scrape(url).names()


@pytest.fixture(scope="module")
def summaries():
    return [tfobs.analyze(p) for p in CAPTURES]


@pytest.fixture(scope="module")
def replay_names(summaries) -> set[str]:
    port = free_port()
    server = replay.start(summaries, port)
    try:
        return sample_names(f"http://127.0.0.1:{port}/metrics")
    finally:
        server.shutdown(2.0)


@pytest.fixture(scope="module")
def live_names(summaries, replay_names) -> set[str]:
    port = free_port()
    exporter = live_exporter(next(s for s in summaries if s.memory), port)
    try:
        return replay_names | sample_names(f"http://127.0.0.1:{port}/metrics")
    finally:
        exporter.shutdown(2.0)


def named() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for q in all_queries():
        for name in metric_names(q.expr):
            out.setdefault(name, []).append(q.where)
    return out


def test_dashboards_and_rules_name_only_exported_metrics(live_names) -> None:
    used = named()
    assert len(used) >= 40
    missing = {n: w[:2] for n, w in used.items()
               if n not in live_names and n not in GPU_SOURCE_METRICS
               and n not in recorded_names()}
    assert missing == {}, "named in dashboards/rules but not on the live /metrics page"


def test_nvml_and_gpu_memory_metric_names_synthetic_gpu_samples(summaries) -> None:
    gpu = next(s for s in summaries if s.devices)
    port = free_port()
    exporter = live_exporter(gpu, port, gpu_sources=True)
    try:
        names = sample_names(f"http://127.0.0.1:{port}/metrics")
    finally:
        exporter.shutdown(2.0)
    used = set(named())
    assert GPU_SOURCE_METRICS <= used, "dashboards should show every NVML figure"
    assert GPU_SOURCE_METRICS <= names


def test_the_check_catches_a_wrong_name(replay_names) -> None:
    # Histogram and counter suffixes matter: the family name alone is not a sample name.
    assert "tfobs_step_duration_seconds_bucket" in replay_names
    assert "tfobs_step_duration_seconds" not in replay_names
    assert "tfobs_windows_total" in replay_names and "tfobs_windows" not in replay_names
    assert metric_names("rate(tfobs_window_total[5m])") == {"tfobs_window_total"}
    assert "tfobs_window_total" not in replay_names
