"""PrometheusExporter: names, types, units, labels, exemplars and value mapping, read back from
a real HTTP scrape and parsed with prometheus_client's own parsers."""

from __future__ import annotations

import pathlib
import platform
import socket
import time
import urllib.request
from collections.abc import Iterator

import prometheus_client
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om

import tfobs
from tests.support.scrape import scrape
from tests.support.synthetic_summary import (
    SyntheticGpuSample,
    SyntheticMemorySample,
    SyntheticSource,
    synthetic_gpu_summary,
)
from tfobs.config import Config
from tfobs.errors import ConfigError
from tfobs.export import catalog
from tfobs.export.prometheus import PrometheusExporter
from tfobs.health import HealthLedger, KeptCapture
from tfobs.summary import CATEGORIES, VERDICTS, WindowSummary
from tfobs.window import OUTCOMES, WindowRecord

OPENMETRICS = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
METRICS_PAGE = pathlib.Path(__file__).parents[2] / "docs" / "metrics.md"
CAPTURES = pathlib.Path(__file__).parents[1] / "data" / "captures"


def _exporter(with_sources: bool) -> PrometheusExporter:
    cfg = Config.load(metrics_port=0, metrics_bind="127.0.0.1", tf_job="trainer", tf_task="3")
    health = HealthLedger({"version": tfobs.__version__,
                           "python_version": platform.python_version()})
    sources = {}
    if with_sources:
        sources = {"nvml": SyntheticSource((SyntheticGpuSample(),)),
                   "tfmemory": SyntheticSource((SyntheticMemorySample(),))}
    exp = PrometheusExporter(cfg, cfg.identity(), health, **sources)
    exp.start()
    return exp


@pytest.fixture
def exporter() -> Iterator[PrometheusExporter]:
    exp = _exporter(with_sources=True)
    yield exp
    exp.shutdown(2.0)


@pytest.fixture
def bare_exporter() -> Iterator[PrometheusExporter]:
    exp = _exporter(with_sources=False)
    yield exp
    exp.shutdown(2.0)


def om_samples(url: str) -> dict[str, list]:
    """name -> samples, from the OpenMetrics exposition."""
    r = scrape(url, OPENMETRICS)
    assert r.content_type.startswith("application/openmetrics-text")
    return r.samples()


def value(samples: dict[str, list], name: str, **labels: str) -> float:
    hits = [s.value for s in samples[name] if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def feed_everything(exp: PrometheusExporter) -> tuple[WindowSummary, WindowRecord]:
    summary = synthetic_gpu_summary()
    window = WindowRecord(index=0)
    for step in summary.steps.items:
        exp.step_sink.observe(step.duration_s, window.exemplar(step.step_num, step.marker))
    # What the runtime writes into the health ledger; the exporter reads it on scrape.
    health = exp.health
    health.steps = summary.steps.count
    health.count_window("captured", exemplar=window.exemplar())
    health.count_window("skipped_busy", "busy")
    health.count_error("capture")
    health.count_dropped("spans", 7)
    health.count_cut("live_bytes")
    health.observe_capture(0.3, 123_456)
    health.observe_reduce(0.05)
    health.observe_window_end("step_boundary", 0.002, 0.05)
    health.set_cost(0.008, 0.0021)
    health.set_window_length(1.3, 10)
    health.set_info({"tensorflow_version": "2.21.0", "devices": "/device:GPU:0"})
    health.count_kept(KeptCapture(0, 1.7e9, "/keep/plugins/profile/run/host.xplane.pb",
                                  "first"), 123_456)
    exp.publish(summary, window)
    return summary, window


@pytest.mark.slow  # starts the metrics HTTP server
@pytest.mark.waits
def test_every_catalog_metric_is_exposed_with_type_help_unit_and_identity_synthetic_gpu(
    exporter: PrometheusExporter,
) -> None:
    feed_everything(exporter)
    families = {f.name: f for f in parse_om(scrape(exporter.url, OPENMETRICS).text)}
    for d in catalog.METRICS:
        fam = families.get(d.family)
        assert fam is not None, f"{d.name} missing from /metrics"
        assert fam.type == d.type, d.name
        assert fam.documentation == d.help
        assert fam.unit == d.unit, d.name
        assert fam.samples, d.name
        if d.unit:  # HELP text names the unit ("in seconds", "(0..1)", "in bytes", ...)
            assert {"seconds": "seconds", "bytes": "bytes", "ratio": "0..1", "watts": "watts",
                    "celsius": "celsius", "hertz": "hertz"}[d.unit] in d.help.lower()
        for s in fam.samples:
            assert s.labels["tf_job"] == "trainer" and s.labels["tf_task"] == "3", s
            assert not ({"pod", "namespace", "container", "instance", "job"} & set(s.labels))
            extra = set(s.labels) - {*catalog.IDENTITY_LABELS, "le"} - set(d.labels)
            if d.type != "info":
                assert not extra, (d.name, extra)
    # Nothing is exported that the catalog (and so docs/metrics.md's table) does not list.
    assert set(families) == {d.family for d in catalog.METRICS}
    # Same names in the classic text format Prometheus falls back to.
    plain_names = scrape(exporter.url).names()
    for d in catalog.METRICS:
        base = d.name + ("_count" if d.type == "histogram" else "")
        assert base in plain_names, d.name


@pytest.mark.slow  # starts the metrics HTTP server
@pytest.mark.waits
def test_step_histogram_and_windows_counter_carry_exemplars_in_openmetrics(
    exporter: PrometheusExporter,
) -> None:
    summary, window = feed_everything(exporter)
    samples = om_samples(exporter.url)
    trace = f"{window.trace_id:032x}"
    step_ex = [s.exemplar for s in samples["tfobs_step_duration_seconds_bucket"] if s.exemplar]
    assert step_ex, "no exemplar on the step histogram"
    step_spans = {f"{window.step_span_ids[st.marker, st.step_num]:016x}"
                  for st in summary.steps.items}
    for ex in step_ex:
        assert ex.labels["trace_id"] == trace
        assert ex.labels["span_id"] in step_spans
        assert 0.03 < ex.value < 0.06
    captured = [s for s in samples["tfobs_windows_total"] if s.labels["outcome"] == "captured"]
    assert captured[0].exemplar.labels == {"trace_id": trace,
                                           "span_id": f"{window.span_id:016x}"}
    assert captured[0].value == 1
    # Steps outside a window carry no exemplar; the plain format never shows exemplars.
    exporter.step_sink.append(45.0)
    samples = om_samples(exporter.url)
    top = [s for s in samples["tfobs_step_duration_seconds_bucket"] if s.labels["le"] == "60.0"]
    assert top[0].exemplar is None
    assert 'trace_id="' not in scrape(exporter.url, "text/plain;version=0.0.4").text


@pytest.mark.slow  # starts the metrics HTTP server
@pytest.mark.waits
def test_summary_figures_map_to_their_series_synthetic_gpu(exporter: PrometheusExporter) -> None:
    summary, _ = feed_everything(exporter)
    s = om_samples(exporter.url)
    assert value(s, "tfobs_step_duration_seconds_count") == summary.steps.count
    assert value(s, "tfobs_step_duration_seconds_sum") == pytest.approx(
        sum(st.duration_s for st in summary.steps.items))
    assert value(s, "tfobs_window_steps") == 4
    assert value(s, "tfobs_window_step_time_seconds") == pytest.approx(0.0415)
    total = sum(summary.breakdown_s.values())
    for cat in CATEGORIES:
        want = summary.breakdown_s.get(cat, 0.0)
        assert value(s, "tfobs_step_time_breakdown_seconds", category=cat) == pytest.approx(want)
        assert value(s, "tfobs_step_time_breakdown_ratio", category=cat) == pytest.approx(
            want / total)
    assert value(s, "tfobs_input_bound_ratio") == pytest.approx(0.29)
    for verdict in VERDICTS:
        assert value(s, "tfobs_input_bound_verdict", verdict=verdict) == (verdict == "highly")
    assert value(s, "tfobs_device_compute_16bit_ratio") == pytest.approx(0.37)
    assert value(s, "tfobs_input_host_seconds", kind="preprocessing") == pytest.approx(0.006)
    assert value(s, "tfobs_input_host_seconds", kind="advanced_file_read") == 0.0
    stage = s["tfobs_tfdata_slowest_stage_seconds"]
    assert len(stage) == 1 and stage[0].labels["stage"] == "Iterator::Root::Prefetch::Map"
    assert stage[0].value == pytest.approx(0.020 / 4)  # per step
    assert value(s, "tfobs_op_time_host_ratio") == pytest.approx(0.3)
    gpu = {"device": "/device:GPU:0"}
    assert value(s, "tfobs_gpu_busy_ratio", **gpu) == pytest.approx(0.75)
    assert value(s, "tfobs_gpu_idle_ratio", cause="kernel_launch", **gpu) == pytest.approx(0.15)
    assert value(s, "tfobs_gpu_idle_ratio", cause="short_gap", **gpu) == pytest.approx(0.05)
    assert value(s, "tfobs_kernel_launch_delay_seconds", stat="p95", **gpu) == pytest.approx(
        9e-5)
    assert value(s, "tfobs_kernels_per_step", **gpu) == 100
    assert value(s, "tfobs_small_kernel_ratio", **gpu) == pytest.approx(0.45)
    assert value(s, "tfobs_memcpy_bytes", direction="h2d", **gpu) == 4.0e6
    assert value(s, "tfobs_memcpy_seconds", direction="d2d", **gpu) == 0.0
    assert value(s, "tfobs_collective_seconds", **gpu) == pytest.approx(0.003)
    assert value(s, "tfobs_tensor_core_kernel_ratio") == pytest.approx(0.25)
    assert value(s, "tfobs_tensor_core_eligible_op_seconds") == pytest.approx(0.060 / 4)
    assert value(s, "tfobs_tensor_core_eligible_unused_seconds") == pytest.approx(0.045 / 4)
    assert value(s, "tfobs_tensor_core_eligible_unused_ratio") == pytest.approx(0.75)
    assert value(s, "tfobs_memory_peak_bytes", allocator="GPU_0_bfc") == 3e9
    assert value(s, "tfobs_memory_fragmentation_ratio", allocator="GPU_0_bfc") == 0.12
    nv = {"device": "/device:GPU:0", "gpu_uuid": SyntheticGpuSample.uuid}
    assert value(s, "tfobs_nvml_available") == 1
    assert value(s, "tfobs_gpu_utilization_ratio", **nv) == pytest.approx(0.83)
    assert value(s, "tfobs_gpu_power_watts", **nv) == pytest.approx(210.5)
    assert value(s, "tfobs_gpu_throttle_active", reason="sw_power_cap", **nv) == 1
    assert value(s, "tfobs_device_memory_peak_bytes", device="/device:GPU:0") == 2.5e9
    # Health.
    assert value(s, "tfobs_windows_total", outcome="skipped_busy") == 1
    for outcome in OUTCOMES:  # every outcome exists from the start, so rate() sees the first
        value(s, "tfobs_windows_total", outcome=outcome)
    assert value(s, "tfobs_errors_total", stage="capture") == 1
    assert value(s, "tfobs_dropped_total", what="spans") == 7
    assert value(s, "tfobs_capture_bytes_total") == 123_456
    assert value(s, "tfobs_capture_duration_seconds_count") == 1
    assert value(s, "tfobs_reduce_duration_seconds_sum") == pytest.approx(0.05)
    assert value(s, "tfobs_profiler_duty_cycle_ratio") == pytest.approx(0.008)
    assert value(s, "tfobs_estimated_overhead_ratio") == pytest.approx(0.0021)
    assert abs(value(s, "tfobs_last_window_timestamp_seconds") - time.time()) < 60
    info = s["tfobs_info"][0].labels
    assert info["tensorflow_version"] == "2.21.0" and info["devices"] == "/device:GPU:0"
    assert info["version"] == __import__("tfobs").__version__ and info["python_version"]


@pytest.mark.slow  # starts the metrics HTTP server
@pytest.mark.waits
def test_cpu_window_has_no_gpu_series_and_nothing_before_the_first_window(
    bare_exporter: PrometheusExporter,
) -> None:
    exporter = bare_exporter
    s = om_samples(exporter.url)
    assert "tfobs_window_steps" not in s and "tfobs_input_bound_ratio" not in s
    assert value(s, "tfobs_nvml_available") == 0  # no sampler given
    assert "tfobs_step_duration_seconds_count" in s and "tfobs_info" in s
    cpu = WindowSummary(breakdown_s={"host_compute": 0.01})
    exporter.publish(cpu, WindowRecord(index=1))
    s = om_samples(exporter.url)
    assert value(s, "tfobs_step_time_breakdown_ratio", category="host_compute") == 1.0
    assert value(s, "tfobs_input_bound_verdict", verdict="unknown") == 1
    for gpu_only in ("tfobs_gpu_busy_ratio", "tfobs_tensor_core_kernel_ratio",
                     "tfobs_memory_peak_bytes", "tfobs_tfdata_slowest_stage_seconds"):
        assert gpu_only not in s


@pytest.mark.slow  # starts the metrics HTTP server
@pytest.mark.waits
def test_error_and_drop_counters_are_there_at_zero_before_the_first_one(
    bare_exporter: PrometheusExporter,
) -> None:
    # A counter series that appears only with its first errors starts at their number, and
    # increase() takes that first sample as its baseline: a burst of errors in a stage that
    # had none was invisible to TfobsErrorsRising (promtool: a series appearing at 6 keeps
    # the alert quiet; one at 0 before fires it). As tfobs_windows_total per outcome, every
    # stage and every drop is on the page at 0 from the start.
    import typing

    from tfobs.summary import ERROR_STAGES, DropWhat

    s = om_samples(bare_exporter.url)
    for stage in ERROR_STAGES:
        assert value(s, "tfobs_errors_total", stage=stage) == 0, stage
    for what in typing.get_args(DropWhat):
        assert value(s, "tfobs_dropped_total", what=what) == 0, what
    bare_exporter.health.count_error("export_otel", 3)
    s = om_samples(bare_exporter.url)
    assert value(s, "tfobs_errors_total", stage="export_otel") == 3
    assert value(s, "tfobs_errors_total", stage="capture") == 0


def published(exporter: PrometheusExporter, capture: str) -> tuple[WindowSummary, dict]:
    """A real capture's summary, published as the first window, and the scrape after it."""
    from tfobs.analysis.pipeline import analyze

    summary = analyze(str(CAPTURES / f"{capture}.xplane.pb"))
    exporter.publish(summary, WindowRecord(index=0))
    return summary, om_samples(exporter.url)


@pytest.mark.slow  # starts the metrics HTTP server
@pytest.mark.waits
def test_summary_from_a_real_capture_maps_to_series(exporter: PrometheusExporter) -> None:
    summary, s = published(exporter, "generated__tf2.20cpu__keras3_fit")
    assert summary.steps.count > 0
    assert value(s, "tfobs_window_steps") == summary.steps.count
    assert value(s, "tfobs_window_step_time_seconds") == pytest.approx(summary.steps.mean_s)
    assert value(s, "tfobs_input_bound_ratio") == pytest.approx(summary.input_bound.ratio)
    assert value(s, "tfobs_input_bound_verdict", verdict=summary.input_bound.verdict) == 1
    for cat, secs in summary.breakdown_s.items():
        assert value(s, "tfobs_step_time_breakdown_seconds", category=cat) == pytest.approx(secs)
    got = sum(value(s, "tfobs_step_time_breakdown_ratio", category=c) for c in CATEGORIES)
    assert got == pytest.approx(1.0)
    for mem in summary.memory:
        assert value(s, "tfobs_memory_peak_bytes", allocator=mem.allocator) == mem.peak_bytes


@pytest.mark.slow  # starts the metrics HTTP server
@pytest.mark.waits
def test_time_outside_steps_is_a_series_of_its_own(exporter: PrometheusExporter) -> None:
    # A Keras fit whose later callback spends 5 ms per batch after the step marker closed.
    summary, s = published(exporter, "generated__tf2.21cpu__slow_callback")
    interval = value(s, "tfobs_window_step_interval_seconds")
    outside = value(s, "tfobs_window_outside_steps_ratio")
    assert interval == pytest.approx(summary.steps.interval_s)
    assert outside == pytest.approx(summary.steps.outside_ratio) and outside > 0.4
    assert interval > value(s, "tfobs_window_step_time_seconds") + 0.004
    assert value(s, "tfobs_window_input_between_steps_ratio") < 0.01  # a callback, not input


@pytest.mark.slow  # starts the metrics HTTP server
@pytest.mark.waits
def test_input_between_steps_is_a_series_of_its_own(exporter: PrometheusExporter) -> None:
    # `for batch in dataset:` with the marker inside: the input wait lies between steps.
    summary, s = published(exporter, "generated__tf2.21cpu__for_loop_slow_input")
    got = value(s, "tfobs_window_input_between_steps_ratio")
    assert got == pytest.approx(summary.steps.input_between_s / summary.steps.interval_s)
    assert got > 0.05 and value(s, "tfobs_input_bound_ratio") < 0.01


@pytest.mark.slow  # starts the metrics HTTP server
@pytest.mark.waits
def test_a_jax_steps_wait_in_tf_data_is_a_series_of_its_own(exporter: PrometheusExporter) -> None:
    # A JAX step fed by tf.data, with tfobs's event around next(): XProf's input is 0.
    summary, s = published(exporter, "generated__jax0.10cpu__tfdata_wait_in_steps")
    got = value(s, "tfobs_window_tfdata_next_ratio")
    assert got == pytest.approx(summary.steps.python_tfdata_next_s / summary.steps.mean_s)
    assert got > 0.5 and value(s, "tfobs_input_bound_ratio") == 0.0
    _, other = published(exporter, "generated__tf2.21cpu__for_loop_slow_input")
    assert value(other, "tfobs_window_tfdata_next_ratio") == 0.0  # TensorFlow: input ops


@pytest.mark.slow  # starts the metrics HTTP server
@pytest.mark.waits
def test_a_broken_summary_never_breaks_the_scrape_and_is_counted(
    exporter: PrometheusExporter,
) -> None:
    bad = WindowSummary(breakdown_s={"input": "not a number"})  # type: ignore[dict-item]
    exporter.publish(bad, None)
    om_samples(exporter.url)
    s = om_samples(exporter.url)  # the error counted while collecting shows from the next scrape
    assert value(s, "tfobs_errors_total", stage="export_prometheus") >= 1
    assert "tfobs_step_duration_seconds_count" in s  # health still served


@pytest.mark.slow  # starts the metrics HTTP server
@pytest.mark.waits
def test_step_sink_refuses_bad_exemplars_and_info_keeps_its_catalog_labels(
    exporter: PrometheusExporter,
) -> None:
    # The step sink raises on what OpenMetrics would reject (the runtime counts it under
    # the sink's stage); nothing half-written reaches the exposition.
    sink = exporter.step_sink
    with pytest.raises(ValueError, match="128"):
        sink.observe(0.01, {"trace_id": "x" * 200})
    with pytest.raises(ValueError, match="label name"):
        sink.observe(0.01, {"bad label": "x"})
    with pytest.raises((TypeError, ValueError)):
        sink.observe("fast")  # type: ignore[arg-type]
    exporter.health.set_info({"job": "x", "pod": "y", "bad-name": "z", "devices": "d" * 300})
    s = om_samples(exporter.url)
    assert s["tfobs_step_duration_seconds_count"][0].value == 0
    labels = s["tfobs_info"][0].labels
    assert set(labels) == {*catalog.IDENTITY_LABELS, *catalog.BY_NAME["tfobs_info"].labels}
    assert labels["devices"] == "d" * 200  # bounded


@pytest.mark.slow  # starts the metrics HTTP server
@pytest.mark.waits
def test_observe_step_is_cheap(exporter: PrometheusExporter) -> None:
    window = WindowRecord(index=0)
    ex = window.exemplar(1)
    n = 20_000
    t0 = time.perf_counter()
    observe = exporter.step_sink.observe
    for _ in range(n):
        observe(0.02, ex)
    per_step_us = (time.perf_counter() - t0) / n * 1e6
    # About 4 us on an idle core; the bound leaves room for a busy shared machine.
    assert per_step_us < 50, per_step_us


@pytest.mark.slow  # starts the metrics HTTP server
@pytest.mark.waits
def test_content_negotiation_and_gzip(exporter: PrometheusExporter) -> None:
    exporter.step_sink.append(0.02)
    r = scrape(exporter.url, OPENMETRICS)
    assert r.content_type.startswith("application/openmetrics-text")
    assert r.text.endswith("# EOF\n")
    r = scrape(exporter.url)
    assert r.content_type.startswith("text/plain") and "# EOF" not in r.text
    text = scrape(exporter.url, OPENMETRICS, encoding="gzip").text
    assert "tfobs_step_duration_seconds_count" in text
    # gzip only where the client takes it: a q-value of 0 (or no number) refuses it
    for encoding, gzipped in (("gzip;q=0", False), ("br, GZIP; q=0.5", True),
                              ("gzip;q=0.0, identity", False), ("gzip;q=x", False),
                              ("identity", False), ("deflate, gzip", True)):
        raw = scrape(exporter.url, OPENMETRICS, encoding=encoding)
        assert (raw.content_encoding == "gzip") is gzipped, encoding
        assert "tfobs_step_duration_seconds_count" in raw.text
    # The format the client ranks first by q-value, not the first one the header lists
    # OpenMetrics in at any weight: q=0 refuses it (RFC 9110, 12.4.2), and a scraper told
    # to prefer the text format (Prometheus's scrape_protocols) gets it.
    text_first = "text/plain;version=0.0.4;q=0.5,application/openmetrics-text;version=1.0.0;q=0.4"
    for accept, openmetrics in (
            (text_first + ",*/*;q=0.3", False),
            ("application/openmetrics-text;version=1.0.0;q=0,text/plain;version=0.0.4", False),
            ("application/openmetrics-text; q=0.0, */*", False),
            ("text/plain;q=0.2,application/openmetrics-text;version=1.0.0;q=0.9", True),
            ("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
             "application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;"
             "escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2", True),
            (OPENMETRICS, True), ("application/openmetrics-text;q=x", False)):
        r = scrape(exporter.url, accept)
        assert r.content_type.startswith("application/openmetrics-text") is openmetrics, accept
        assert r.text.endswith("# EOF\n") is openmetrics, accept
        assert "tfobs_step_duration_seconds_count" in r.samples(), accept


@pytest.mark.slow  # starts the metrics HTTP server
@pytest.mark.waits
def test_private_registry_leaves_the_default_one_alone(exporter: PrometheusExporter) -> None:
    exporter.step_sink.append(0.02)
    names = {m.name for m in prometheus_client.REGISTRY.collect()}
    assert not any(n.startswith("tfobs") for n in names)
    # A second exporter in the same process (a re-enable) does not collide.
    cfg = Config.load(metrics_port=0, metrics_bind="127.0.0.1")
    other = PrometheusExporter(cfg, cfg.identity(), HealthLedger())
    other.step_sink.append(0.5)
    other.shutdown(1.0)


@pytest.mark.slow  # starts the metrics HTTP server
@pytest.mark.waits
def test_taken_port_raises_the_agreed_config_error() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        cfg = Config.load(metrics_port=port, metrics_bind="127.0.0.1")
        exp = PrometheusExporter(cfg, cfg.identity(), HealthLedger())
        with pytest.raises(ConfigError) as err:
            exp.start()
    assert str(err.value) == (
        f"port {port} on 127.0.0.1 is in use; set metrics_port / TFOBS_METRICS_PORT to a free "
        "port or -1 to disable"
    )
    assert exp.url == ""


def _scraped(summary: WindowSummary) -> str:
    """The scrape text of an exporter (serving nothing) that published `summary`."""
    cfg = Config.load(metrics_port=-1)
    exp = PrometheusExporter(cfg, cfg.identity(), HealthLedger())
    exp.start()
    exp.publish(summary, WindowRecord(index=0))
    text = prometheus_client.generate_latest(exp.registry).decode()
    exp.shutdown(1.0)
    return text


def test_port_minus_one_serves_nothing_but_still_counts() -> None:
    cfg = Config.load(metrics_port=-1)
    exp = PrometheusExporter(cfg, cfg.identity(), HealthLedger())
    exp.start()
    exp.step_sink.append(0.01)
    assert exp.url == "" and exp.port == 0
    text = prometheus_client.generate_latest(exp.registry).decode()
    assert ('tfobs_step_duration_seconds_count{local_rank="0",tf_cluster="none",tf_job="local",'
            'tf_task="0"} 1.0') in text
    exp.shutdown(1.0)


@pytest.mark.slow  # starts the metrics HTTP server
@pytest.mark.waits
def test_overview_page_is_served(exporter: PrometheusExporter) -> None:
    feed_everything(exporter)
    with urllib.request.urlopen(exporter.url.replace("/metrics", "/"), timeout=10) as r:
        body = r.read().decode()
        assert r.status == 200
    assert "trainer" in body  # the worker identity shows on whichever page is installed
    health = exporter.page_health()
    assert health["steps_observed"] == 4 and health["windows"]["captured"] == 1
    assert health["errors"] == {"capture": 1} and health["window_index"] == 0


@pytest.mark.slow  # starts the metrics HTTP server
@pytest.mark.waits
def test_shutdown_is_bounded_and_frees_the_port(exporter: PrometheusExporter) -> None:
    port = exporter.port
    # A client that connects and stalls must not hold shutdown past its deadline.
    stalled = socket.create_connection(("127.0.0.1", port))
    t0 = time.monotonic()
    exporter.shutdown(1.0)
    assert time.monotonic() - t0 < 2.0
    stalled.close()
    with socket.socket() as again:
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", port))


def test_metrics_page_lists_the_catalog() -> None:
    text = METRICS_PAGE.read_text()
    start = text.index("<!-- section: metrics")
    end = text.index("<!-- /section: metrics -->")
    section = text[start:end]
    assert catalog.markdown_table() in section


def test_a_label_from_the_capture_is_bounded_and_keeps_its_ends() -> None:
    """A tf.data stage 32,000 levels deep named the slowest stage's series with a 1.5 MB
    label on every scrape: a label value from the capture is cut to MAX_LABEL_CHARS, its
    start and its end (the stage's own kind) kept; short ones pass as they are."""
    from tfobs.export.metrics_collector import MAX_LABEL_CHARS, label_value
    from tfobs.summary import InputPipeline, MemoryStat, TfDataStage

    deep = "Iterator::Root" + "::Map" * 30_000 + "::ParallelMapV2"
    summary = WindowSummary(
        breakdown_s={"input": 0.01},
        input_pipeline=InputPipeline(slowest_stage=TfDataStage(deep, 0.5, 3)),
        memory=(MemoryStat(allocator="a" * 5_000 + "GPU_0_bfc", peak_bytes=1),))
    text = _scraped(summary)
    assert max(len(line) for line in text.splitlines()) < 2 * MAX_LABEL_CHARS
    stage = next(line for line in text.splitlines()
                 if line.startswith("tfobs_tfdata_slowest_stage_seconds{"))
    assert f'stage="{label_value(deep)}"' in stage
    assert label_value(deep).startswith("Iterator::Root::Map")
    assert label_value(deep).endswith("::Map::ParallelMapV2") and "..." in label_value(deep)
    assert len(label_value(deep)) == MAX_LABEL_CHARS
    assert 'GPU_0_bfc"' in next(line for line in text.splitlines()
                                if line.startswith("tfobs_memory_peak_bytes{"))
    assert label_value("Iterator::Root::Prefetch") == "Iterator::Root::Prefetch"


def test_two_long_capture_labels_that_cut_alike_stay_two_series() -> None:
    """Two allocators whose long names differ only in the middle were cut to one label value:
    two samples of one series in a scrape, and Prometheus kept only one of them."""
    from tfobs.export.metrics_collector import MAX_LABEL_CHARS
    from tfobs.summary import MemoryStat

    names = ["a" * 300 + tag + "b" * 300 + "_bfc" for tag in ("GPU_0", "GPU_1")]
    summary = WindowSummary(breakdown_s={"input": 0.01},
                            memory=tuple(MemoryStat(allocator=n, peak_bytes=1 + i)
                                         for i, n in enumerate(names)))
    text = _scraped(summary)
    peaks = [line.rpartition(" ")[0] for line in text.splitlines()
             if line.startswith("tfobs_memory_peak_bytes{")]
    assert len(peaks) == 2 and len(set(peaks)) == 2
    assert all(len(p) < len("tfobs_memory_peak_bytes{}") + 200 + MAX_LABEL_CHARS for p in peaks)
