"""OtelExporter against a real OTLP receiver (gRPC, and HTTP for http/protobuf).

Summaries come from the real captures in tests/data/captures (through tfobs.analysis) or,
where a test needs an exact shape (span cap, faults), are built directly.
"""

from __future__ import annotations

import http.server
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from tests.conftest import CAPTURES
from tests.support.otlp_receiver import (
    WINDOW_ROOT_KEYS,
    OtlpReceiver,
    ReceivedSpan,
    attributes,
)
from tfobs.config import Config
from tfobs.errors import ConfigError
from tfobs.export.otel import SPAN_STEP, SPAN_WINDOW, OtelExporter, plan_window
from tfobs.health import HealthLedger
from tfobs.summary import (
    CATEGORIES,
    Advice,
    MemoryStat,
    Step,
    Steps,
    TimedEvent,
    WindowSummary,
)
from tfobs.window import WindowRecord

ROOT = Path(__file__).resolve().parents[2]

# An OTLP receiver (gRPC server).
pytestmark = [pytest.mark.slow, pytest.mark.waits, pytest.mark.timeout(60)]

IDENTITY = {"tf_job": "worker", "tf_task": "3", "devices": ["/device:CPU:0"]}


@pytest.fixture(autouse=True)
def _fast_batches(monkeypatch):
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)


@pytest.fixture(scope="module")
def receiver():
    with OtlpReceiver() as r:
        yield r


def exporter_for(endpoint: str, **options) -> OtelExporter:
    return OtelExporter(Config.load(otlp_endpoint=endpoint, **options), IDENTITY)


def trace_of(receiver: OtlpReceiver, trace_id: int, n: int, timeout_s: float = 10.0):
    spans = receiver.wait_for(
        lambda sp: sum(s.trace_id == trace_id for s in sp) >= n, timeout_s=timeout_s
    )
    return [s for s in spans if s.trace_id == trace_id]


def record_for(summary: WindowSummary, index: int = 0) -> WindowRecord:
    """The runtime's record of a window that captured exactly this summary."""
    steps = [s.step_num for s in summary.steps.items]
    return WindowRecord(
        index=index,
        start_ns=summary.start_ns,
        end_ns=summary.start_ns + int(summary.duration_s * 1e9),
        first_step=min(steps, default=-1),
        last_step=max(steps, default=-1),
        outcome="captured",
    )


def built_summary(n_steps: int = 4, events_per_step: int = 3, t0: int | None = None):
    """A window of `n_steps` 10 ms steps, each with distinct-length events."""
    t0 = time.time_ns() if t0 is None else t0
    steps = []
    for i in range(n_steps):
        start = t0 + i * 10_000_000
        events = tuple(
            TimedEvent(f"op{i}_{k}", "op", start + k * 100_000, 0.001 * (k + 1) + 1e-6 * i)
            for k in range(events_per_step)
        )
        steps.append(
            Step(
                step_num=100 + i,
                start_ns=start,
                duration_s=0.009,
                breakdown_s={"device_compute": 0.006, "input": 0.003},
                top_events=events,
                marker="train",
            )
        )
    return WindowSummary(
        start_ns=t0,
        duration_s=n_steps * 0.01,
        steps=Steps(count=n_steps, method="markers", mean_s=0.009, items=tuple(steps)),
        breakdown_s={"device_compute": 0.006, "input": 0.003},
        memory=(MemoryStat("GPU_0_bfc", peak_bytes=1 << 30, capacity_bytes=4 << 30,
                           fragmentation_ratio=0.25),),
        advice=(Advice("input_bound", "warning", "The input pipeline is slow."),),
    )


def check_structure(spans: list[ReceivedSpan], summary: WindowSummary, window: WindowRecord,
                    top_n: int) -> None:
    roots = [s for s in spans if s.parent_span_id == 0]
    assert len(roots) == 1
    root = roots[0]
    assert root.name == SPAN_WINDOW
    assert (root.trace_id, root.span_id) == (window.trace_id, window.span_id)
    # The root covers the window the runtime recorded.
    assert root.start_ns <= window.start_ns and root.end_ns >= window.end_ns

    all_steps = [s for s in spans if s.name == SPAN_STEP]
    assert len({s.span_id for s in all_steps}) == len(all_steps)
    # Steps the runtime timed that the summary left out (a window's first and last): a span
    # each, with the id its exemplar carries and the marker's own timing.
    timed = {(s.attributes["tfobs.step.marker"], s.attributes["tfobs.step.num"]): s
             for s in all_steps if s.attributes.get("tfobs.step.in_summary") is False}
    in_summary = {(st.marker, st.step_num) for st in summary.steps.items}
    assert set(timed) == set(window.step_times) - in_summary
    for key, span in timed.items():
        end_ns, duration_ns = window.step_times[key]
        assert (span.start_ns, span.end_ns) == (end_ns - duration_ns, end_ns)
        assert span.span_id == window.step_span_id(key[1], key[0])
        assert span.parent_span_id == root.span_id
        assert root.start_ns <= span.start_ns <= span.end_ns <= root.end_ns
    steps = sorted((s for s in all_steps if s.attributes.get("tfobs.step.in_summary") is not
                    False), key=lambda s: s.start_ns)
    assert len(steps) == len(summary.steps.items)
    by_id = {s.span_id: s for s in spans}
    named: set[tuple[str, int]] = set()
    for step_span in steps:
        assert step_span.parent_span_id == root.span_id
        key = (step_span.attributes["tfobs.step.marker"], step_span.attributes["tfobs.step.num"])
        if key not in named:  # the first step of a name carries the id exemplars point at
            assert step_span.span_id == window.step_span_id(key[1], key[0])
        named.add(key)
        assert root.start_ns <= step_span.start_ns <= step_span.end_ns <= root.end_ns

    for step, span in zip(sorted(summary.steps.items, key=lambda s: (s.start_ns, s.step_num)),
                          steps, strict=True):
        assert (span.attributes["tfobs.step.marker"], span.attributes["tfobs.step.num"]) == (
            step.marker, step.step_num)
        assert span.start_ns == step.start_ns
        assert span.end_ns - span.start_ns == pytest.approx(step.duration_s * 1e9, abs=2)
        for cat in CATEGORIES:
            assert span.attributes[f"tfobs.breakdown.{cat}.seconds"] == pytest.approx(
                step.breakdown_s.get(cat, 0.0)
            )

    events = [s for s in spans if s.name not in (SPAN_WINDOW, SPAN_STEP)]
    expected_events = sum(min(top_n, len(s.top_events)) for s in summary.steps.items)
    assert len(events) == expected_events
    for ev in events:
        parent = by_id[ev.parent_span_id]
        assert parent.name == SPAN_STEP
        assert parent.attributes["tfobs.step.num"] == ev.attributes["tfobs.step.num"]
        assert root.start_ns <= ev.start_ns <= ev.end_ns <= root.end_ns
        assert ev.attributes["tfobs.event.kind"] in ("op", "kernel", "tfdata", "memcpy")

    assert WINDOW_ROOT_KEYS <= set(root.attributes)
    assert root.attributes["tfobs.steps.count"] == summary.steps.count
    assert root.attributes["tfobs.steps.method"] == summary.steps.method
    assert root.attributes["tfobs.step_time.mean_seconds"] == pytest.approx(summary.steps.mean_s)
    assert root.attributes["tfobs.input_bound.verdict"] == summary.input_bound.verdict
    for cat, ratio in summary.breakdown_ratio.items():
        assert root.attributes[f"tfobs.breakdown.{cat}.ratio"] == pytest.approx(ratio)
    if summary.kernels.total_s > 0:
        assert root.attributes["tfobs.tensor_core.kernel_ratio"] == pytest.approx(
            summary.kernels.tensor_core_s / summary.kernels.total_s
        )
    if summary.memory:
        assert root.attributes["tfobs.memory.peak_bytes"] == max(
            m.peak_bytes for m in summary.memory
        )
        assert "tfobs.memory.fragmentation_ratio" in root.attributes
    advice = [(n, a) for n, _t, a in root.events]
    assert [a["tfobs.advice.code"] for n, a in advice if n == "tfobs.advice"] == [
        a.code for a in summary.advice
    ]

    res = root.resource
    assert res["tf_job"] == "worker" and res["tf_task"] == "3"
    assert res["devices"] == ["/device:CPU:0"]
    assert res["host.name"] and res["tfobs.version"]
    assert res["service.name"]


# -- real captures ------------------------------------------------------------------------

CAPTURE_NAMES = [
    "generated__tf2.20cpu__custom_loop_compute_bfc",
    "generated__tf2.20cpu__tfkeras_fit",
    "generated__tf2.20cpu__keras3_fit",
    "tracelens__mi300_jax08_gemm__tw003",
]


def sent_and_checked(receiver, summary: WindowSummary, window: WindowRecord, top_n: int
                     ) -> tuple[list[ReceivedSpan], int, OtelExporter]:
    """Publish one window through a real OTLP receiver: (the spans it got, spans queued,
    the exporter, shut down), the trace's structure checked."""
    exporter = exporter_for(receiver.endpoint, trace_top_n=top_n)
    queued = exporter.publish(summary, window)
    spans = trace_of(receiver, window.trace_id, queued)
    exporter.shutdown(5)
    check_structure(spans, summary, window, top_n=top_n)
    return spans, queued, exporter


@pytest.mark.parametrize("name", CAPTURE_NAMES)
def test_capture_window_becomes_one_trace(receiver, name):
    from tfobs.analysis.pipeline import analyze

    summary = analyze(CAPTURES / f"{name}.xplane.pb")
    window = record_for(summary, index=7)
    spans, queued, exporter = sent_and_checked(receiver, summary, window, top_n=3)
    n_steps = len(summary.steps.items)
    assert queued == 1 + n_steps + sum(min(3, len(s.top_events)) for s in summary.steps.items)
    assert len(spans) == queued
    assert exporter.dropped_spans == 0
    if name != "tracelens__mi300_jax08_gemm__tw003":  # TF captures hold steps with events
        assert n_steps > 0
        assert any(s.top_events for s in summary.steps.items)


def test_a_collector_on_a_unix_socket_gets_the_windows_trace(tmp_path):
    # unix:///path is a gRPC target (a collector sidecar sharing a volume); it was refused
    # as "no host", and the SDK would ask such a socket for TLS.
    with OtlpReceiver(unix_socket=str(tmp_path / "otlp.sock")) as local:
        assert local.endpoint.startswith("unix:///")
        summary = built_summary()
        window = record_for(summary, index=3)
        spans, queued, exporter = sent_and_checked(local, summary, window, top_n=2)
        assert len(spans) == queued > 1 and exporter.dropped_spans == 0
    with pytest.raises(ConfigError, match="only gRPC reaches"):
        Config.load(otlp_endpoint=f"unix://{tmp_path}/otlp.sock", otlp_protocol="http/protobuf")
    with pytest.raises(ConfigError, match="otlp_endpoint"):
        Config.load(otlp_endpoint="unix://")


def test_built_summary_structure_and_ids(receiver):
    summary = built_summary()
    window = record_for(summary)
    spans, queued, _ = sent_and_checked(receiver, summary, window, top_n=2)
    assert queued == 1 + 4 + 4 * 2
    # top_n keeps each step's longest events.
    names = {s.name for s in spans if s.name.startswith("op")}
    assert names == {f"op{i}_{k}" for i in range(4) for k in (1, 2)}
    root = next(s for s in spans if s.name == SPAN_WINDOW)
    assert root.attributes["tfobs.memory.fragmentation_ratio"] == 0.25
    assert root.events[0][1] == root.end_ns  # advice stamped when the window closed
    # The ids the exemplars carry are the ids that arrived.
    ex = window.exemplar(101)
    step = next(s for s in spans if s.name == SPAN_STEP and s.attributes["tfobs.step.num"] == 101)
    assert ex == {"trace_id": f"{step.trace_id:032x}", "span_id": f"{step.span_id:016x}"}


def test_the_steps_a_summary_leaves_out_still_have_the_spans_their_exemplars_name(receiver):
    """XProf (and the reduction) drop a window's first and last step; the runtime drew their
    exemplars at each step's end. The trace sends them as the marker timed them."""
    summary = built_summary(n_steps=4, events_per_step=2)  # steps 100..103
    window = record_for(summary)
    first = summary.steps.items[0].start_ns
    drawn = {}
    for n in range(99, 105):  # the runtime saw 99..104; the summary kept 100..103
        drawn[n] = window.exemplar(n)["span_id"]
        window.step_times[("train", n)] = (first + (n - 99) * 10_000_000, 9_000_000)
    spans, queued, _ = sent_and_checked(receiver, summary, window, top_n=2)
    assert queued == 1 + 6 + 4 * 2
    steps = {s.attributes["tfobs.step.num"]: s for s in spans if s.name == SPAN_STEP}
    assert sorted(steps) == list(range(99, 105))
    assert {n: f"{s.span_id:016x}" for n, s in steps.items()} == drawn
    assert sorted(n for n, s in steps.items()
                  if s.attributes.get("tfobs.step.in_summary") is False) == [99, 104]
    assert "tfobs.breakdown.input.seconds" not in steps[99].attributes  # no figures of its own
    # Under the cap, steps the summary holds come first.
    plan = plan_window(summary, window, top_n=2, max_spans=6)
    assert [s.attributes["tfobs.step.num"] for s in plan.spans[1:]] == [100, 101, 102, 103, 99]
    assert plan.cut == 1 + 4 * 2


def test_span_cap_cuts_longest_last_and_counts(receiver):
    summary = built_summary(n_steps=3, events_per_step=3)
    window = record_for(summary)
    exporter = exporter_for(receiver.endpoint, trace_top_n=3, trace_max_spans=6)
    queued = exporter.publish(summary, window)
    assert queued == 6
    spans = trace_of(receiver, window.trace_id, 6)
    time.sleep(0.2)  # nothing beyond the cap may follow
    spans = [s for s in receiver.spans() if s.trace_id == window.trace_id]
    exporter.shutdown(5)
    assert len(spans) == 6
    assert exporter.cut_spans == 1 + 3 + 9 - 6
    root = next(s for s in spans if s.name == SPAN_WINDOW)
    assert root.attributes["tfobs.spans_cut"] == 7
    # Root, all 3 steps, then the 2 globally longest events.
    assert sum(s.name == SPAN_STEP for s in spans) == 3
    assert sorted(s.name for s in spans if s.name.startswith("op")) == ["op1_2", "op2_2"]


def test_train_and_test_steps_of_one_number_are_two_spans_each_with_its_events(receiver):
    # A loop that runs a `test` step after every fifth `train` step gives both the same
    # number (train 9, test 9): two steps, so two spans, each its own id and events.
    from tfobs.analysis.pipeline import analyze

    summary = analyze(CAPTURES / "generated__tf2.21cpu__train_and_test_markers.xplane.pb")
    window = record_for(summary)
    spans, _, _ = sent_and_checked(receiver, summary, window, top_n=3)
    steps = [s for s in spans if s.name == SPAN_STEP]
    assert len({s.span_id for s in steps}) == len(steps) == summary.steps.count == 34
    nine = {s.attributes["tfobs.step.marker"]: s for s in steps
            if s.attributes["tfobs.step.num"] == 9}
    assert set(nine) == {"train", "test"}
    by_id = {s.span_id: s for s in steps}
    children = [s for s in spans if s.parent_span_id in by_id]
    assert children
    for child in children:  # each step's longest events lie in that step's time
        step = by_id[child.parent_span_id]
        assert step.start_ns <= child.start_ns <= child.end_ns <= step.end_ns + 1
    # a test step's exemplar points at the test step's span, not the train step's
    assert window.exemplar(9, "test")["span_id"] == f"{nine['test'].span_id:016x}"
    assert window.exemplar(9)["span_id"] == f"{nine['train'].span_id:016x}"


def test_a_window_across_epochs_gives_each_repeated_step_name_its_own_span(receiver):
    # tf_keras numbers steps from 0 each epoch: "train 3" twice in one window. Each is its
    # own span; the exemplar the runtime drew for "train 3" names the first.
    from tfobs.analysis.pipeline import analyze

    summary = analyze(CAPTURES / "generated__tf2.21cpu__tfkeras_fit_validation_epochs.xplane.pb")
    window = record_for(summary)
    drawn = window.exemplar(3)["span_id"]  # as the runtime draws it at the step's end
    spans, _, _ = sent_and_checked(receiver, summary, window, top_n=2)
    steps = [s for s in spans if s.name == SPAN_STEP]
    assert len({s.span_id for s in steps}) == len(steps) == summary.steps.count == 30
    threes = sorted((s for s in steps if s.attributes["tfobs.step.num"] == 3
                     and s.attributes["tfobs.step.marker"] == "train"),
                    key=lambda s: s.start_ns)
    assert len(threes) == 2
    assert f"{threes[0].span_id:016x}" == drawn


def test_plan_cap_below_step_count_keeps_first_steps():
    summary = built_summary(n_steps=5, events_per_step=2)
    plan = plan_window(summary, record_for(summary), top_n=2, max_spans=3)
    assert [s.name for s in plan.spans] == [SPAN_WINDOW, SPAN_STEP, SPAN_STEP]
    assert [s.attributes["tfobs.step.num"] for s in plan.spans[1:]] == [100, 101]
    assert plan.cut == 5 * 3 - 2


def test_own_provider_leaves_global_one_alone(receiver):
    before = trace.get_tracer_provider()
    exporter = exporter_for(receiver.endpoint)
    summary = built_summary(n_steps=1)
    exporter.publish(summary, record_for(summary))
    exporter.shutdown(5)
    assert trace.get_tracer_provider() is before


def test_otel_resource_variables_win(receiver, monkeypatch):
    monkeypatch.setenv("OTEL_SERVICE_NAME", "resnet-train")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=ci,tf_task=9")
    exporter = exporter_for(receiver.endpoint)
    summary = built_summary(n_steps=1, events_per_step=0)
    window = record_for(summary)
    exporter.publish(summary, window)
    spans = trace_of(receiver, window.trace_id, 2)
    exporter.shutdown(5)
    res = spans[0].resource
    assert res["service.name"] == "resnet-train"
    assert res["deployment.environment"] == "ci"
    assert res["tf_task"] == "9"  # the operator's variable beats tfobs's own value
    assert res["tf_job"] == "worker"


def test_otel_sdk_disabled_sends_nothing(receiver, monkeypatch):
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    exporter = exporter_for(receiver.endpoint)
    summary = built_summary(n_steps=2)
    window = record_for(summary)
    assert exporter.publish(summary, window) == 0
    exporter.shutdown(5)
    assert not [s for s in receiver.spans() if s.trace_id == window.trace_id]
    assert not Config.load(otlp_endpoint=receiver.endpoint).tracing_enabled


def test_sampler_variable_is_honoured(receiver, monkeypatch):
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    exporter = exporter_for(receiver.endpoint)
    summary = built_summary(n_steps=2)
    window = record_for(summary)
    assert exporter.publish(summary, window) == 0
    exporter.shutdown(5)
    assert not [s for s in receiver.spans() if s.trace_id == window.trace_id]
    assert exporter.dropped_spans == 0  # sampled out is not lost


class _HttpOtlp(http.server.BaseHTTPRequestHandler):
    got: list = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        req = trace_service_pb2.ExportTraceServiceRequest()
        req.ParseFromString(body)
        type(self).got.append((self.path, self.headers["Content-Type"], req))
        out = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


def test_http_protobuf_protocol():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HttpOtlp)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        exporter = exporter_for(endpoint, otlp_protocol="http/protobuf")
        summary = built_summary(n_steps=2, events_per_step=1)
        window = record_for(summary)
        queued = exporter.publish(summary, window)
        exporter.shutdown(5)
    finally:
        server.shutdown()
        server.server_close()
    assert _HttpOtlp.got
    path, ctype, _ = _HttpOtlp.got[0]
    assert path == "/v1/traces" and ctype == "application/x-protobuf"
    spans = [
        s
        for _p, _c, req in _HttpOtlp.got
        for rs in req.resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
    ]
    assert len(spans) == queued == 5
    assert {int.from_bytes(s.trace_id, "big") for s in spans} == {window.trace_id}
    assert attributes(_HttpOtlp.got[0][2].resource_spans[0].resource.attributes)["tf_job"] == (
        "worker"
    )


# -- faults (in process; the training run's faults are in test_otel_training.py) ---------


@pytest.mark.parametrize("status", [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL])
def test_failing_receiver_counts_dropped_spans(status):
    health = HealthLedger()
    with OtlpReceiver("failing", status=status) as bad:
        exporter = OtelExporter(Config.load(otlp_endpoint=bad.endpoint), IDENTITY,
                                health=health)
        summary = built_summary(n_steps=2, events_per_step=1)
        t = time.perf_counter()
        queued = exporter.publish(summary, record_for(summary))
        assert time.perf_counter() - t < 0.5  # queued, not sent, by the caller
        exporter.force_flush(5)
        assert bad.calls >= 1
        assert exporter.dropped_spans == queued == 5
        exporter.shutdown(2)
    assert exporter.dropped_spans == 5
    assert health.dropped == {"spans": 5}  # counted into the ledger as they were lost


def test_slow_receiver_does_not_block_and_shutdown_is_bounded(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "30")  # the receiver outlasts shutdown
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "20")
    with OtlpReceiver("slow", delay_s=30) as slow:
        exporter = exporter_for(slow.endpoint)
        summary = built_summary(n_steps=3, events_per_step=2)  # 10 spans
        published = []
        t = time.perf_counter()
        for i in range(5):
            published.append(exporter.publish(summary, record_for(summary, i)))
        elapsed = time.perf_counter() - t
        assert elapsed < 2.0, elapsed  # the caller never waits for the 30 s receiver
        deadline = time.monotonic() + 5
        while slow.calls < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        t = time.perf_counter()
        exporter.shutdown(1.0)
        assert time.perf_counter() - t < 3.0  # bounded by its timeout, not the receiver's 30 s
    # The queue holds 20 spans = 2 windows; the first went into the stalled export, so of
    # five windows some were refused whole, and nothing queued reached the receiver.
    assert published.count(0) >= 2
    assert exporter.dropped_spans == 50
    assert not slow.requests


def test_absent_receiver_counts_everything_dropped():
    with OtlpReceiver() as r:
        endpoint = r.endpoint  # a port that was free and is now closed
    exporter = exporter_for(endpoint)
    summary = built_summary(n_steps=2, events_per_step=1)
    queued = exporter.publish(summary, record_for(summary))
    t = time.perf_counter()
    exporter.shutdown(3)
    assert time.perf_counter() - t < 4
    assert exporter.dropped_spans == queued == 5


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_an_absent_receiver_is_one_line_in_the_jobs_log_with_its_cause(protocol, caplog):
    """OpenTelemetry's OTLP exporters log each retry, "Shutdown in progress" and "Exporter
    already shutdown" at WARNING: a job whose collector is down would read several lines
    of another library at exit. tfobs's export says it once, with the first of those lines
    as the cause, and a user's own OTLP exporter, on a thread of its own, still logs."""
    import logging

    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    with OtlpReceiver() as r:
        endpoint = r.endpoint  # a port that was free and is now closed
    if protocol == "http/protobuf":
        endpoint += "/v1/traces"
    caplog.set_level(logging.WARNING)
    exporter = exporter_for(endpoint, otlp_protocol=protocol)
    summary = built_summary(n_steps=2, events_per_step=1)
    exporter.publish(summary, record_for(summary))
    exporter.shutdown(3)  # sends what is queued, as at the job's exit
    lines = [rec for rec in caplog.records if rec.levelno >= logging.WARNING]
    assert not [rec for rec in lines if rec.name.startswith("opentelemetry.exporter")], [
        (rec.name, rec.getMessage()) for rec in lines]
    ours = [rec.getMessage() for rec in lines if rec.name == "tfobs.export.otel"]
    assert len(ours) == 1, ours
    text = ours[0]
    assert text.startswith(f"tfobs could not export 5 window spans over OTLP to {endpoint} (")
    # The exporter's first line: a retry with its cause, or (no time left for one under a
    # 1 s timeout) its give-up; or, from an exporter that raises it (OpenTelemetry 1.27's
    # HTTP one), the error itself.
    assert re.search(r"OTLP to \S+ \((Transient error|Failed to export|\w+Error: )",
                     text), text
    # The filter goes with tfobs's exporter; on other threads it never held a line back.
    from tfobs.export.otel import _EXPORTER_LOGGERS, _ExporterLog

    for name in _EXPORTER_LOGGERS:
        assert not [f for f in logging.getLogger(name).filters if isinstance(f, _ExporterLog)]
    quiet = _ExporterLog()
    quiet.install()
    try:
        caplog.clear()
        own = OTLPSpanExporter(endpoint=endpoint.removeprefix("http://"), insecure=True)
        # A message of its own: OpenTelemetry's DuplicateFilter drops a repeated format.
        logging.getLogger(_EXPORTER_LOGGERS[0]).warning(f"the user's own line ({protocol})")  # noqa: G004
        own.shutdown()
    finally:
        quiet.uninstall()
    assert [rec.getMessage() for rec in caplog.records] == [f"the user's own line ({protocol})"]


def test_an_exporter_that_raises_gives_its_error_as_the_cause_stub_exporter(caplog):
    """OpenTelemetry 1.27's HTTP exporter lets a refused connection raise, unlogged (a stub
    raises here, as that exporter does; the newer one logs, tested above): tfobs's one line
    names the error as the cause, and the batch thread goes on."""
    import logging

    from opentelemetry.sdk.trace.export import SpanExportResult

    from tfobs.export.otel import _counting_exporter, _ExporterLog, _SpanQueueRoom

    class RefusingExporter:
        def export(self, spans):
            raise ConnectionError("[Errno 111] Connection refused")

        def shutdown(self, timeout_millis=30_000):
            pass

        def force_flush(self, timeout_millis=30_000):
            return True

    caplog.set_level(logging.WARNING)
    room = _SpanQueueRoom(10, None)
    room.reserve(2)
    wrapped = _counting_exporter(RefusingExporter(), room, _ExporterLog(), "http://host:4318")
    assert wrapped.export([object(), object()]) is SpanExportResult.FAILURE
    (line,) = [r.getMessage() for r in caplog.records if r.name == "tfobs.export.otel"]
    assert "over OTLP to http://host:4318 (ConnectionError: [Errno 111] Connection refused)" \
        in line
    assert room.dropped == 2


def _spans_arrive(check=None) -> None:
    """An exporter made as `enable()` makes it from the environment is on and sends a
    window's spans to a real OTLP receiver; `check(exporter)` first, where given."""
    with OtlpReceiver("normal") as receiver:
        exporter = exporter_for(receiver.endpoint)
        try:
            assert not exporter.disabled
            if check is not None:
                check(exporter)
            summary = built_summary(n_steps=2, events_per_step=1)
            exporter.publish(summary, record_for(summary))
            exporter.force_flush(5)
            assert receiver.wait_for(lambda sp: len(sp) >= 1, timeout_s=10)  # tracing on
        finally:
            exporter.shutdown(2)


@pytest.mark.parametrize(("name", "value", "default"), [
    ("OTEL_BSP_MAX_QUEUE_SIZE", str(10**21), 2048),
    ("OTEL_BSP_MAX_QUEUE_SIZE", "-5", 2048),
    ("OTEL_BSP_MAX_QUEUE_SIZE", "lots", 2048),
    ("OTEL_BSP_SCHEDULE_DELAY", str(10**17), 5000),
    ("OTEL_BSP_SCHEDULE_DELAY", "0", 5000),
    ("OTEL_BSP_EXPORT_TIMEOUT", "-1", 30000),
    ("OTEL_BSP_EXPORT_TIMEOUT", "soon", 30000)])
def test_a_batch_setting_past_what_the_sdk_takes_is_one_line_naming_it(
        monkeypatch, caplog, name: str, value: str, default: int) -> None:
    # OTEL_BSP_MAX_QUEUE_SIZE=1e21 turned tracing off with "Python int too large to convert
    # to C ssize_t": the line named neither the setting nor the fix.
    # OTEL_BSP_SCHEDULE_DELAY=0 turned tracing off with "schedule_delay_millis must be
    # positive", naming no setting; 10**17 killed the SDK's worker thread with an
    # OverflowError traceback on the job's stderr, and no span was sent again. A word for
    # the timeout put the SDK's traceback in the job's log.
    monkeypatch.setenv(name, value)
    with caplog.at_level("WARNING"):
        _spans_arrive()
    lines = [r.getMessage() for r in caplog.records if name in r.getMessage()]
    assert len(lines) == 1 and f"using {default}" in lines[0] and "\n" not in lines[0], lines
    assert not [r for r in caplog.records if r.exc_info]


@pytest.mark.parametrize(("set_", "limits"), [
    # (the variables set, the limits the provider then has: the SDK's defaults for each
    # refused value; a valid global setting is the span one's default)
    ({"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "-1"}, {"max_span_attributes": 128}),
    ({"OTEL_SPAN_EVENT_COUNT_LIMIT": "1e9"}, {"max_events": 128}),
    ({"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT": "abc"}, {"max_attribute_length": None,
                                                    "max_span_attribute_length": None}),
    ({"OTEL_ATTRIBUTE_COUNT_LIMIT": "64", "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "many",
      "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT": " -3 "},
     {"max_attributes": 64, "max_span_attributes": 64, "max_span_attribute_length": None}),
])
def test_a_span_limit_the_sdk_refuses_is_one_line_naming_it_and_tracing_stays_on(
        monkeypatch, caplog, set_: dict[str, str], limits: dict[str, int | None]) -> None:
    # OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT=-1, OTEL_SPAN_EVENT_COUNT_LIMIT=1e9 or
    # OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT=abc made the SDK's SpanLimits raise inside
    # `enable()`: tracing was off for the whole job.
    for name, value in set_.items():
        monkeypatch.setenv(name, value)
    def limits_as_set(exporter: OtelExporter) -> None:
        got = exporter._parts.provider._span_limits
        assert {k: getattr(got, k) for k in limits} == limits

    with caplog.at_level("WARNING"):
        _spans_arrive(limits_as_set)
    refused = [n for n, v in set_.items() if v not in ("64",)]
    for name in refused:
        lines = [r.getMessage() for r in caplog.records if name + "=" in r.getMessage()]
        assert len(lines) == 1 and "default limit" in lines[0] and "\n" not in lines[0], lines
    assert not [r for r in caplog.records if r.exc_info]


def test_a_refused_span_attribute_count_limit_does_not_stop_the_sdk_loading() -> None:
    """The SDK's trace module reads OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT as it is imported: a
    refused value made the import raise, so no tracer could be made. In a fresh process
    (the module not loaded yet), it loads with the variable hidden, which is then back."""
    code = ("import os\n"
            "from tfobs.export.otel import _import_sdk_trace\n"
            "_import_sdk_trace()\n"
            "import opentelemetry.sdk.trace as t\n"
            "print(os.environ['OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT'], t.SPAN_ATTRIBUTE_COUNT_LIMIT)\n")
    env = {**os.environ, "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "-1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["-1", "128"]


def test_a_replayed_windows_first_and_last_step_are_its_first_and_last_in_time() -> None:
    """A capture with no runtime record (a replay) whose step numbers restart each epoch
    (the epoch's batch index: 1, 2, 3, 0, 1, 2, 3, 0, 1, 2 kept): its first and last steps
    are 1 and 2, the first and last in time, not the smallest and largest numbers (0 and 3),
    in the root span's attributes and in tfobs_window_first_step / last_step alike."""
    import tfobs
    from tfobs.export.metrics_collector import Published, _window_steps
    from tfobs.export.otel import window_attributes

    s = tfobs.analyze(
        CAPTURES / "generated__jax0.10cpu__step_num_restart_each_epoch.xplane.pb")
    assert [st.step_num for st in s.steps.items] == [1, 2, 3, 0, 1, 2, 3, 0, 1, 2]
    attrs = window_attributes(s, WindowRecord(index=0))
    assert (attrs["tfobs.window.first_step"], attrs["tfobs.window.last_step"]) == (1, 2)
    assert _window_steps(Published(s, None, 0.0)) == (1, 2)


@pytest.mark.parametrize(("value", "said"), [
    ("soon", True), ("0", True), ("-1", True), ("inf", True), ("nan", True), ("1e400", True),
    ("10000000", True), ("", False), (" 2 ", False)])
def test_an_otlp_timeout_the_sdk_cannot_use_is_one_line_naming_it(
        monkeypatch, caplog, value: str, said: bool) -> None:
    # OTEL_EXPORTER_OTLP_TIMEOUT=soon (or set empty) turned tracing off with "could not
    # convert string to float: 'soon'", naming neither the variable nor the fix; 0 and -1 made
    # every export fail at once with DEADLINE_EXCEEDED, and inf, nan and 1e400 retried each
    # batch for 30 s before dropping it: no span was ever sent.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", value)
    with caplog.at_level("WARNING"):
        _spans_arrive()
    lines = [r.getMessage() for r in caplog.records
             if "OTEL_EXPORTER_OTLP_TIMEOUT" in r.getMessage()]
    assert len(lines) == said, lines
    if said:
        assert "using 10 s" in lines[0] and "\n" not in lines[0]
    assert not [r for r in caplog.records if r.exc_info]


@pytest.mark.parametrize("value", ["soon", ""])
def test_a_traces_timeout_the_grpc_exporter_cannot_read_is_named(monkeypatch, value) -> None:
    # The gRPC exporter reads OTEL_EXPORTER_OTLP_TRACES_TIMEOUT with float() whatever it is
    # given: tracing stays off, and the line names the variable and the fix.
    from tfobs.export.otel import otlp_exporter

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", value)
    with pytest.raises(ValueError, match="OTEL_EXPORTER_OTLP_TRACES_TIMEOUT=.*unset it"):
        otlp_exporter("127.0.0.1:4317", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "inf")  # a number: the default
    try:
        kw = _grpc_exporter_keywords(monkeypatch, "127.0.0.1:4317")
    except ValueError as exc:  # an exporter that reads it with int() (OpenTelemetry < 1.28)
        assert "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT='inf'" in str(exc) and "unset it" in str(exc)
    else:
        assert kw["timeout"] == 10.0


def _grpc_exporter_keywords(monkeypatch, endpoint: str) -> dict:
    """The keywords tfobs makes the SDK's gRPC span exporter with, the exporter made as
    usual (the SDK keeps them under private names that differ between its versions)."""
    from opentelemetry.exporter.otlp.proto.grpc import trace_exporter

    from tfobs.export.otel import otlp_exporter

    seen: dict = {}
    real = trace_exporter.OTLPSpanExporter

    class Recording(real):  # type: ignore[misc, valid-type]
        def __init__(self, **kw) -> None:
            seen.update(kw)
            super().__init__(**kw)

    monkeypatch.setattr(trace_exporter, "OTLPSpanExporter", Recording)
    otlp_exporter(endpoint, "grpc")
    monkeypatch.setattr(trace_exporter, "OTLPSpanExporter", real)
    return seen


@pytest.mark.parametrize("value", ["1", "yes", "false", "maybe"])
def test_otlp_insecure_does_not_turn_an_http_endpoint_into_tls(monkeypatch, value) -> None:
    # OTEL_EXPORTER_OTLP_INSECURE applies to an endpoint without a scheme; the SDK read any
    # value but "true" as TLS for an http:// endpoint too, and every export failed with
    # UNAVAILABLE: no span was sent.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", value)
    _spans_arrive()
    assert _grpc_exporter_keywords(monkeypatch, "https://collector:4317")["insecure"] is False
    assert _grpc_exporter_keywords(monkeypatch, "http://collector:4317")["insecure"] is True


@pytest.mark.parametrize(("name", "value", "said"), [
    ("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd", True),
    ("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "lots", True),
    ("OTEL_EXPORTER_OTLP_COMPRESSION", " GZIP ", False)])
def test_a_grpc_compression_the_sdk_does_not_know_is_one_line_naming_it(
        monkeypatch, caplog, name: str, value: str, said: bool) -> None:
    # OTEL_EXPORTER_OTLP_COMPRESSION=zstd turned tracing off: the gRPC exporter raised
    # "Invalid value ... for compression envvar" as it was made.
    import grpc

    monkeypatch.setenv(name, value)
    with caplog.at_level("WARNING"):
        _spans_arrive()
    lines = [r.getMessage() for r in caplog.records if name in r.getMessage()]
    assert len(lines) == said, lines
    wanted = grpc.Compression.NoCompression if said else grpc.Compression.Gzip
    assert _grpc_exporter_keywords(monkeypatch, "127.0.0.1:4317")["compression"] == wanted


def test_every_window_and_resource_attribute_is_in_docs_traces() -> None:
    """docs/traces.md lists the attributes a trace backend query can use: every attribute
    the window span and the resource carry, from a capture with memory, Tensor Core,
    tf.data and advice figures and a kept capture, is named there."""
    import pathlib

    import tfobs
    from tfobs.export.otel import resource_attributes, window_attributes
    from tfobs.runtime.info import worker_resource

    text = (pathlib.Path(__file__).parents[2] / "docs" / "traces.md").read_text()
    section = text[text.index("<!-- section: traces"):text.index("<!-- /section: traces")]
    missing = set()
    for path in sorted(CAPTURES.glob("*.xplane.pb"))[:40]:
        s = tfobs.analyze(path)
        for key in window_attributes(s, WindowRecord(index=0, kept_path="/k/w.xplane.pb")):
            key = re.sub(r"^tfobs\.breakdown\.\w+\.(seconds|ratio)$",
                         r"tfobs.breakdown.<category>.\1", key)
            if f"`{key}`" not in section and not (
                    key.endswith(".ratio") and "`tfobs.breakdown.<category>.seconds`" in section):
                missing.add(key)
    identity = {"tf_job": "worker", "tf_task": "0", "tf_cluster": "0a1b2c3d", "local_rank": "0"}
    for key in resource_attributes(worker_resource(identity)):
        if f"`{key}`" not in section:
            missing.add(key)
    assert missing == set(), "attributes tfobs sends that docs/traces.md does not name"


def test_window_span_figures_per_step_equal_their_metrics() -> None:
    """A figure the window span and /metrics both carry has one meaning: the slowest tf.data
    stage's self time was the window's total on the span and per step on the metric
    (tfobs_tfdata_slowest_stage_seconds), a factor of the step count apart."""
    import tfobs
    from tfobs.export.otel import window_attributes

    s = next(s for s in (tfobs.analyze(p) for p in sorted(CAPTURES.glob("*.xplane.pb")))
             if s.input_pipeline.slowest_stage is not None and s.steps.count > 1)
    attrs = window_attributes(s, WindowRecord(index=0))
    slowest = s.input_pipeline.slowest_stage
    assert attrs["tfobs.tfdata.slowest_stage_seconds"] == pytest.approx(
        slowest.self_s / s.steps.count)
    assert attrs["tfobs.tfdata.slowest_stage"] == slowest.name
