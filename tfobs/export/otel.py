"""OpenTelemetry traces: one trace per profile window, with the ids its exemplars carry.

Each window becomes a root span `tfobs.window` (the summary as attributes, advice as span
events), a child `tfobs.step` span per step, and under each step a span per top event (op,
kernel, tf.data stage, copy) named after the event. The trace and window/step span ids are
the ones `WindowRecord` drew when the window opened, so a Prometheus exemplar on the
step-time histogram opens exactly this trace.

The exporter has its own `TracerProvider` (the user's global one is never touched), exports
through the SDK's `BatchSpanProcessor` and the OTLP exporter (gRPC or http/protobuf), and
honours the standard `OTEL_*` variables (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
`OTEL_TRACES_SAMPLER`, `OTEL_BSP_*`, `OTEL_EXPORTER_OTLP_TIMEOUT`, headers, TLS ...).
`publish()` only queues spans; the network is the SDK's batch thread's business. Spans that
do not fit the queue, fail to export, or are still queued when shutdown's deadline passes
are counted in `dropped_spans`; spans over the per-window cap are counted in `cut_spans`.
"""

from __future__ import annotations

import inspect
import logging
import math
import os
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tfobs import forks
from tfobs.identity import keep_ends
from tfobs.once import Once
from tfobs.summary import CATEGORIES, ErrorStage, Step, TimedEvent, WindowSummary
from tfobs.window import WindowRecord, new_span_id

if TYPE_CHECKING:
    from tfobs.config import Config
    from tfobs.health import HealthLedger

_log = logging.getLogger(__name__)

SCOPE_NAME = "tfobs"
MISSING_OTLP = "OTLP tracing needs OpenTelemetry's exporter: pip install 'tfobs[otlp]'"
SPAN_WINDOW = "tfobs.window"
SPAN_STEP = "tfobs.step"
EVENT_ADVICE = "tfobs.advice"
_MAX_NAME = 200  # span names from op/kernel names can be very long (templated kernels)
_DEFAULT_QUEUE = 2048  # the SDK's defaults for OTEL_BSP_MAX_QUEUE_SIZE ...
_DEFAULT_BATCH = 512  # ... and OTEL_BSP_MAX_EXPORT_BATCH_SIZE
# The most characters of one attribute value taken from the capture (a step marker's, a
# tf.data stage's, an allocator's name: as long as the job makes them). Unbounded, 50 steps
# marked with a 100 KB name made a 5 MB export request, which a collector refuses whole
# (gRPC's 4 MiB): every span of the window was lost. Longer values keep their start and end.
MAX_ATTRIBUTE_CHARS = 2048


# -- the plan: which spans a window becomes (pure; no OpenTelemetry needed) --------------


@dataclass(frozen=True)
class PlannedSpan:
    name: str
    start_ns: int
    end_ns: int
    parent: int  # index of the parent in TracePlan.spans; -1 for the root
    span_id: int  # 0: draw one at random (top-event spans; nothing links to them)
    attributes: dict[str, Any]
    events: tuple[tuple[str, int, dict[str, Any]], ...] = ()  # (name, time_ns, attributes)


@dataclass(frozen=True)
class TracePlan:
    trace_id: int
    spans: tuple[PlannedSpan, ...]
    cut: int = 0  # spans left out by the per-window cap


def plan_window(
    summary: WindowSummary, window: WindowRecord, *, top_n: int = 5, max_spans: int = 512
) -> TracePlan:
    """The spans one window becomes: root, steps in time order, then their longest events.

    The cap keeps the root, then as many steps as fit, then the globally longest events.
    """
    max_spans = max(1, max_spans)
    steps = sorted(summary.steps.items, key=lambda s: (s.start_ns, s.step_num))
    kept_steps = steps[: max_spans - 1]
    cut = sum(1 + min(top_n, len(s.top_events)) for s in steps[len(kept_steps) :])
    cut += summary.steps.top_events_left_out  # the reduction's own bound (MAX_TOP_EVENTS)

    per_step = [
        (i, e)
        for i, s in enumerate(kept_steps)
        for e in sorted(s.top_events, key=lambda e: -e.duration_s)[: max(0, top_n)]
    ]
    # Steps the runtime timed in this window that the summary leaves out (its first and last,
    # dropped as XProf drops them): their exemplars name these spans.
    in_plan = {(s.marker, s.step_num) for s in steps}
    timed = sorted((k for k in window.step_times if k not in in_plan),
                   key=lambda k: window.step_times[k])
    room = max_spans - 1 - len(kept_steps)
    cut += max(0, len(timed) - room)
    timed = timed[:max(0, room)]
    room -= len(timed)
    if len(per_step) > room:
        cut += len(per_step) - room
        per_step = sorted(per_step, key=lambda ie: -ie[1].duration_s)[:room]
        per_step.sort(key=lambda ie: (ie[0], ie[1].start_ns))

    ids = _step_span_ids(kept_steps, window)
    step_spans = [_step_span(s, window, i) for s, i in zip(kept_steps, ids, strict=True)]
    step_spans += [_timed_step_span(k, window) for k in timed]
    event_spans = [_event_span(e, kept_steps[i], 1 + i) for i, e in per_step]
    children = step_spans + event_spans

    start_ns, end_ns = _window_bounds(summary, window)
    if children:  # the root covers every child, even where the clocks disagree slightly
        start_ns = min([start_ns, *(c.start_ns for c in children)])
        end_ns = max([end_ns, *(c.end_ns for c in children)])
    advice = tuple((EVENT_ADVICE, end_ns, advice_attributes(a)) for a in summary.advice)
    root = PlannedSpan(
        name=SPAN_WINDOW,
        start_ns=start_ns,
        end_ns=end_ns,
        parent=-1,
        span_id=window.span_id,
        attributes=window_attributes(summary, window, cut),
        events=advice,
    )
    return TracePlan(trace_id=window.trace_id, spans=(root, *children), cut=cut)


def advice_attributes(a: Any) -> dict[str, Any]:
    """One fired rule as event attributes: id, severity, finding, fix, guide, threshold, and
    each evidence figure as `tfobs.advice.evidence.<name>`."""
    attrs: dict[str, Any] = {
        "tfobs.advice.code": a.code,
        "tfobs.advice.severity": a.severity,
        "tfobs.advice.message": a.message,
    }
    for key in ("fix", "guide", "threshold"):
        if getattr(a, key, ""):
            attrs[f"tfobs.advice.{key}"] = getattr(a, key)
    for name, value in getattr(a, "evidence", {}).items():
        attrs[f"tfobs.advice.evidence.{name}"] = float(value)
    return attrs


def _window_bounds(summary: WindowSummary, window: WindowRecord) -> tuple[int, int]:
    if window.start_ns > 0 and window.end_ns >= window.start_ns:
        return window.start_ns, window.end_ns
    start = summary.start_ns
    return start, start + int(summary.duration_s * 1e9)


def _breakdown(prefix: str, seconds: Mapping[str, float]) -> dict[str, Any]:
    total = sum(seconds.values())
    out: dict[str, Any] = {}
    for cat in CATEGORIES:
        value = float(seconds.get(cat, 0.0))
        out[f"{prefix}.{cat}.seconds"] = value
        out[f"{prefix}.{cat}.ratio"] = value / total if total > 0 else 0.0
    return out


def window_attributes(summary: WindowSummary, window: WindowRecord,
                      cut: int = 0) -> dict[str, Any]:
    """The root span's attributes (names documented in docs/traces.md)."""
    steps = summary.steps
    items = steps.items
    attrs: dict[str, Any] = {
        "tfobs.window.index": window.index,
        "tfobs.window.on_demand": window.on_demand,
        # else the first and last steps in time (step numbers may restart each epoch)
        "tfobs.window.first_step": window.first_step
        if window.first_step >= 0
        else min(items, key=lambda s: s.start_ns).step_num if items else -1,
        "tfobs.window.last_step": window.last_step
        if window.last_step >= 0
        else max(items, key=lambda s: s.start_ns).step_num if items else -1,
        "tfobs.capture.bytes": window.capture_bytes,
        "tfobs.steps.count": steps.count,
        "tfobs.steps.method": steps.method,
        "tfobs.step_time.mean_seconds": steps.mean_s,
        "tfobs.input_bound.ratio": summary.input_bound.ratio,
        "tfobs.input_bound.verdict": summary.input_bound.verdict,
        "tfobs.device_compute_16bit_ratio": summary.device_compute_16bit_ratio,
        "tfobs.device_type": summary.environment.device_type,
        "tfobs.device_count": summary.environment.device_count,
        "tfobs.spans_cut": cut,
        **_breakdown("tfobs.breakdown", summary.breakdown_s),
        # Where the capture was kept (keep_dir): open it in TensorBoard / XProf.
        **({"tfobs.window.kept_path": window.kept_path} if window.kept_path else {}),
    }
    k = summary.kernels
    if k.total_s > 0:
        attrs["tfobs.tensor_core.kernel_ratio"] = k.tensor_core_s / k.total_s
    if k.eligible_op_s > 0:
        unused = max(0.0, k.eligible_op_s - k.eligible_op_tensor_core_s)
        attrs["tfobs.tensor_core.eligible_unused_ratio"] = unused / k.eligible_op_s
    if summary.memory:
        top = max(summary.memory, key=lambda m: m.peak_bytes)
        attrs["tfobs.memory.allocator"] = top.allocator
        attrs["tfobs.memory.peak_bytes"] = top.peak_bytes
        attrs["tfobs.memory.capacity_bytes"] = top.capacity_bytes
        attrs["tfobs.memory.fragmentation_ratio"] = top.fragmentation_ratio
    slowest = summary.input_pipeline.slowest_stage
    if slowest is not None:
        attrs["tfobs.tfdata.slowest_stage"] = slowest.name
        # per step, as tfobs_tfdata_slowest_stage_seconds (per window without steps)
        attrs["tfobs.tfdata.slowest_stage_seconds"] = slowest.self_s / max(steps.count, 1)
    if summary.advice:
        attrs["tfobs.advice.codes"] = [a.code for a in summary.advice]
    return attrs


def _step_span_ids(steps: Sequence[Step], window: WindowRecord) -> list[int]:
    """Each step's span id: the one the step's exemplar carries (drawn by marker name and
    number), for the first step of that name; a fresh one for a later step of the same name
    (a window across an epoch whose loop numbers steps from 0 again, as tf_keras does)."""
    seen: set[tuple[str, int]] = set()
    ids = []
    for s in steps:
        key = (s.marker, s.step_num)
        ids.append(new_span_id() if key in seen else window.step_span_id(s.step_num, s.marker))
        seen.add(key)
    return ids


def _step_span(step: Step, window: WindowRecord, span_id: int) -> PlannedSpan:
    return PlannedSpan(
        name=SPAN_STEP,
        start_ns=step.start_ns,
        end_ns=step.start_ns + int(step.duration_s * 1e9),
        parent=0,
        span_id=span_id,
        attributes={
            "tfobs.step.num": step.step_num,
            "tfobs.step.marker": step.marker,
            **_breakdown("tfobs.breakdown", step.breakdown_s),
        },
    )


def _timed_step_span(key: tuple[str, int], window: WindowRecord) -> PlannedSpan:
    """A step the reduction left out, as tfobs's marker timed it: no breakdown, no events."""
    end_ns, duration_ns = window.step_times[key]
    return PlannedSpan(
        name=SPAN_STEP,
        start_ns=end_ns - duration_ns,
        end_ns=end_ns,
        parent=0,
        span_id=window.step_span_id(key[1], key[0]),
        attributes={"tfobs.step.num": key[1], "tfobs.step.marker": key[0],
                    "tfobs.step.in_summary": False},
    )


def _event_span(event: TimedEvent, step: Step, parent: int) -> PlannedSpan:
    attrs: dict[str, Any] = {"tfobs.event.kind": event.kind, "tfobs.step.num": step.step_num}
    if event.device:
        attrs["tfobs.event.device"] = event.device
    return PlannedSpan(
        name=(event.name or event.kind or "event")[:_MAX_NAME],
        start_ns=event.start_ns,
        end_ns=event.start_ns + int(event.duration_s * 1e9),
        parent=parent,
        span_id=0,
        attributes=attrs,
    )


# -- resource ----------------------------------------------------------------------------


def default_service_name(argv: Sequence[str] | None = None) -> str:
    """The training script's name without `.py` (what OTEL_SERVICE_NAME overrides)."""
    argv = sys.argv if argv is None else argv
    script = os.path.basename(argv[0]) if argv and argv[0] not in ("", "-c", "-m") else ""
    if script.endswith(".py"):
        script = script[:-3]
    return script or "python"


def _attribute_value(value: Any) -> Any:
    if isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (list, tuple, set, frozenset)):
        return [str(v) for v in value]
    return str(value)


def resource_attributes(extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """tfobs's resource attributes; `extra` (from the runtime) adds or overrides them.

    OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME still win: they are the operator's word.
    """
    from tfobs import __version__

    attrs: dict[str, Any] = {
        "service.name": default_service_name(),
        "host.name": socket.gethostname(),
        "tfobs.version": __version__,
    }
    tf = sys.modules.get("tensorflow")  # never import TensorFlow just for a version string
    if tf is not None and getattr(tf, "__version__", None):
        attrs["tensorflow.version"] = str(tf.__version__)
    for key, value in (extra or {}).items():
        attrs[str(key)] = _attribute_value(value)
    return attrs


def _build_resource(extra: Mapping[str, Any] | None) -> Any:
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource

    attrs = resource_attributes(extra)
    attrs.update(OTELResourceDetector().detect().attributes)
    return Resource.create(attrs)


# -- accounting of spans that never reach the receiver ----------------------------------


class _SpanQueueRoom:
    """Spans queued but not yet handed to the exporter, and spans lost.

    The SDK's queue silently drops its *oldest* span when full, which would tear a trace
    apart and go uncounted. So the exporter checks room here first and drops a whole window
    (counted) instead; the SDK queue then never overflows. Every loss is also reported to
    `on_dropped` (the health ledger's `tfobs_dropped_total{what="spans"}`) as it happens.
    """

    def __init__(self, capacity: int, on_dropped: Callable[[int], None] | None = None) -> None:
        self.capacity = capacity
        self.pending = 0
        self.dropped = 0
        self.closed = False
        self._on_dropped = on_dropped
        self._lock = threading.Lock()

    def _drop(self, n: int) -> None:  # with the lock held
        self.dropped += n
        if self._on_dropped is not None and n > 0:
            self._on_dropped(n)

    def reserve(self, n: int) -> bool:
        with self._lock:
            if self.closed or self.pending + n > self.capacity:
                self._drop(n)
                return False
            self.pending += n
            return True

    def release(self, n: int) -> None:
        """`n` reserved spans will never be queued (not sampled, or publish failed)."""
        with self._lock:
            if not self.closed:
                self.pending = max(0, self.pending - n)

    def exported(self, n: int, ok: bool) -> None:
        with self._lock:
            if self.closed:
                return
            self.pending = max(0, self.pending - n)
            if not ok:
                self._drop(n)

    def close(self) -> None:
        """Whatever is still queued now will not be sent: count it as dropped."""
        with self._lock:
            if not self.closed:
                self._drop(self.pending)
                self.pending = 0
                self.closed = True

    def reset_after_fork(self) -> None:
        self._lock = threading.Lock()
        self.pending = 0  # the SDK clears its queue in a forked child too


# The loggers of OpenTelemetry's OTLP exporters, which log every retry and every call after
# shutdown at WARNING.
_EXPORTER_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
    "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http._common",
)


def _shortened(text: str, limit: int = 240) -> str:
    """A cause for the job's one line: at most `limit` characters."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


class _ExporterLog(logging.Filter):
    """Keeps the OTLP exporters' lines written while they send tfobs's spans (each retry
    against an absent receiver, "Shutdown in progress", "Exporter already shutdown" at
    exit) out of the job's log: tfobs says once that spans could not be sent, with the first
    of those lines as the reason, and counts the rest. Only the threads that export tfobs's
    spans or shut its exporter down are quieted; a user's own OTLP exporters log as ever."""

    def __init__(self) -> None:
        super().__init__()
        self._threads: set[int] = set()
        self._last: dict[int, str] = {}

    def install(self) -> None:
        for name in _EXPORTER_LOGGERS:
            logger = logging.getLogger(name)
            if self not in logger.filters:
                # First: OpenTelemetry's own DuplicateFilter must not take a line dropped
                # here for one written, and then drop the user's exporter's same line.
                logger.filters.insert(0, self)

    def uninstall(self) -> None:
        for name in _EXPORTER_LOGGERS:
            logging.getLogger(name).removeFilter(self)
        self._threads.clear()

    def enter(self) -> None:
        """The calling thread sends or shuts down tfobs's spans from now on."""
        self._threads.add(threading.get_ident())

    def leave(self) -> None:
        self._threads.discard(threading.get_ident())

    def reason(self) -> str:
        """The first line the exporter wrote on this thread since the last call (""),
        shortened."""
        return _shortened(self._last.pop(threading.get_ident(), ""))

    def filter(self, record: logging.LogRecord) -> bool:
        ident = threading.get_ident()
        if ident not in self._threads:
            return True
        try:
            text = record.getMessage()
        except Exception:  # a record whose arguments do not format: its bare message
            _log.debug("OTLP exporter line did not format", exc_info=True)
            text = str(record.msg)
        # The first line of a failed export names its cause; those after it (further
        # retries, "Shutdown in progress") do not.
        self._last.setdefault(ident, text)
        _log.debug("OTLP exporter: %s", text)
        return False


def _counting_exporter(inner: Any, room: _SpanQueueRoom, quiet: _ExporterLog,
                       endpoint: str = "") -> Any:
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class CountingSpanExporter(SpanExporter):
        """Counts what the wrapped exporter failed to send; never raises into the SDK."""

        def __init__(self) -> None:
            self.inner = inner
            self._warned = Once()  # one line, not one per batch

        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            # The SDK's batch thread (or a force_flush's caller): while it sends tfobs's
            # spans, the exporter's lines are tfobs's to say.
            quiet.enter()
            raised = ""
            try:
                result: SpanExportResult = inner.export(spans)
            except Exception as exc:  # a broken exporter must not kill the batch thread
                _log.debug("OTLP span export raised", exc_info=True)
                result = SpanExportResult.FAILURE
                # Older HTTP exporters let a refused connection raise, unlogged.
                raised = _shortened(f"{type(exc).__name__}: {exc}")
            finally:
                reason = quiet.reason()
                quiet.leave()
            reason = reason or raised
            ok = result is SpanExportResult.SUCCESS
            room.exported(len(spans), ok)
            if not ok and self._warned.first():
                _log.warning(
                    "tfobs could not export %d window spans over OTLP%s%s; further "
                    "failures are only counted (tfobs_dropped_total{what=\"spans\"})",
                    len(spans), f" to {endpoint}" if endpoint else "",
                    f" ({reason})" if reason else "",
                )
            return result

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            try:
                inner.shutdown(timeout_millis=timeout_millis)
            except TypeError:
                inner.shutdown()

        def force_flush(self, timeout_millis: int = 30_000) -> bool:
            return bool(inner.force_flush(timeout_millis))

    return CountingSpanExporter()


# -- OTLP ----------------------------------------------------------------------------------


# The largest batch setting the SDK takes (its queue is a deque sized by a C ssize_t), and
# for its delay and timeout (milliseconds: 24 days; the worker's wait overflows past
# what a time_t holds).
MAX_BSP_SETTING = 2**31 - 1
# The SDK's defaults for OTEL_BSP_SCHEDULE_DELAY and OTEL_BSP_EXPORT_TIMEOUT.
_DEFAULT_SCHEDULE_DELAY_MS = 5000
_DEFAULT_EXPORT_TIMEOUT_MS = 30000


def _bounded_text(value: Any) -> Any:
    return keep_ends(value, MAX_ATTRIBUTE_CHARS) if isinstance(value, str) else value


def _bounded(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """`attributes` with each text (and each text in a list) at most MAX_ATTRIBUTE_CHARS
    long: its start and end where longer."""
    return {k: [_bounded_text(x) for x in v] if isinstance(v, (list, tuple)) else
            _bounded_text(v) for k, v in attributes.items()}


def _env_int(environ: Mapping[str, str], name: str, default: int) -> int:
    """A positive integer OTEL_* setting, else `default`, said in one line naming it."""
    raw = environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if 0 < value <= MAX_BSP_SETTING:
        return value
    _log.warning("tfobs: %s=%s is not a whole number from 1 to %d; using %d (set it within "
                 "that range or unset it)", name, raw[:40], MAX_BSP_SETTING, default)
    return default


# OpenTelemetry's Python exporters read OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT as seconds (the
# spec's unit is milliseconds) with a bare float(): a word (or a variable set empty) turned
# tracing off naming no variable, and 0, a negative number, inf or nan made every export
# fail (gRPC retried each batch for half a minute first). At most an hour, as window_max_s.
_TIMEOUT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
MAX_OTLP_TIMEOUT_S = 3600.0
_DEFAULT_OTLP_TIMEOUT_S = 10.0  # the SDK's own


def otlp_timeout(environ: Mapping[str, str]) -> float:
    """The OTLP request timeout in seconds the variables set (the traces' own first), else
    the SDK's default (10 s); a value that is no number of seconds above 0 and at most an
    hour is said in one line naming it, and the default is used."""
    for name in _TIMEOUT_VARIABLES:
        raw = environ.get(name)
        if raw is None or not raw.strip():
            continue
        text = raw.strip()
        try:
            value = float(text) if text.isascii() else math.nan
        except ValueError:
            value = math.nan
        if 0 < value <= MAX_OTLP_TIMEOUT_S:
            return value
        _log.warning("tfobs: %s=%s is not a number of seconds above 0 and at most %d (the "
                     "Python exporters read seconds, not milliseconds); using %g s (set it "
                     "within that range or unset it)", name, raw[:40], MAX_OTLP_TIMEOUT_S,
                     _DEFAULT_OTLP_TIMEOUT_S)
        break
    return _DEFAULT_OTLP_TIMEOUT_S


# The gRPC exporter raised on a compression it does not know (`zstd`, a typo) and tracing
# was off ("Invalid value ... for compression envvar"); the HTTP one warns and sends plain.
_COMPRESSION_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION")
_GRPC_COMPRESSIONS = {"none": "NoCompression", "gzip": "Gzip", "deflate": "Deflate"}


def grpc_compression(environ: Mapping[str, str]) -> Any:
    """The gRPC compression the variables ask for (the traces' own first), as `grpc`'s
    enum; a value that is none of none, gzip, deflate is said in one line naming it, and no
    compression used."""
    import grpc

    for name in _COMPRESSION_VARIABLES:
        raw = environ.get(name)
        if raw is None or not raw.strip():
            continue
        member = _GRPC_COMPRESSIONS.get(raw.strip().lower())
        if member is None:
            _log.warning("tfobs: %s=%s is not one of none, gzip, deflate; sending spans "
                         "uncompressed (set one of those or unset it)", name, raw[:40])
            member = "NoCompression"
        return getattr(grpc.Compression, member)
    return grpc.Compression.NoCompression


def _grpc_timeout_problem() -> str:
    """'' or the line naming OTEL_EXPORTER_OTLP_TRACES_TIMEOUT where the gRPC exporter cannot
    be made for it: it reads that variable with float() whatever timeout it is given (the
    process's own environment), so a word or an empty value would stop it with "could not
    convert string to float"."""
    name = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"
    raw = os.environ.get(name)
    if raw is None:
        return ""
    try:
        float(raw)
    except ValueError:
        return (f"{name}={raw[:40]!r} is not a number (OpenTelemetry's gRPC exporter "
                "cannot start with it): set it to seconds, e.g. 10, or unset it")
    return ""


# The span limits OpenTelemetry's SpanLimits reads from the process's environment: a value
# it refuses (not a whole number of at least 0: -1, 1e9, abc) raised inside `enable()` and
# turned tracing off for the whole job. (SpanLimits keyword, variable.)
_SPAN_LIMITS = (
    ("max_events", "OTEL_SPAN_EVENT_COUNT_LIMIT"),
    ("max_links", "OTEL_SPAN_LINK_COUNT_LIMIT"),
    ("max_attributes", "OTEL_ATTRIBUTE_COUNT_LIMIT"),
    ("max_span_attributes", "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT"),
    ("max_event_attributes", "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT"),
    ("max_link_attributes", "OTEL_LINK_ATTRIBUTE_COUNT_LIMIT"),
    ("max_attribute_length", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT"),
    ("max_span_attribute_length", "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT"),
)
_DEFAULT_COUNT_LIMIT = 128  # the SDK's default for each count
_NO_LIMIT = -1  # SpanLimits.UNSET


def _limit_value(raw: str) -> int | None:
    """A span limit variable's value as SpanLimits reads it: a whole number >= 0, or None
    for 'unset' (no limit); ValueError where it would refuse it."""
    text = raw.strip().lower()
    if text == "unset":
        return None
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


def span_limits(environ: Mapping[str, str]) -> dict[str, int]:
    """SpanLimits keywords for the OTEL_*_LIMIT variables that hold a value the SDK would
    refuse: each said in one line naming it, and given the SDK's default for it instead
    (the global attribute setting's, where valid, for the span, event and link ones, as
    the SDK derives them). The valid variables are left to the SDK."""
    good: dict[str, int | None] = {}
    out: dict[str, int] = {}
    for keyword, name in _SPAN_LIMITS:
        raw = environ.get(name)
        if raw is None:
            continue
        try:
            good[name] = _limit_value(raw)
            continue
        except ValueError:
            _log.warning("tfobs: %s=%s is not a whole number of at least 0 (or 'unset'); "
                         "using OpenTelemetry's default limit (set it to such a number or "
                         "unset it)", name, raw[:40])
        if keyword.endswith("_length"):
            glob = good.get("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT")
            out[keyword] = _NO_LIMIT if keyword == "max_attribute_length" or glob is None \
                else glob
        else:
            glob = good.get("OTEL_ATTRIBUTE_COUNT_LIMIT")
            derived = keyword.endswith("_attributes") and keyword != "max_attributes"
            out[keyword] = glob if derived and glob is not None else _DEFAULT_COUNT_LIMIT
    return out


def _import_sdk_trace() -> None:
    """Import the SDK's trace module, hiding a refused OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT while
    it loads: the module reads that variable as it is imported (a constant kept for old
    callers) and raised on a refused value, so no TracerProvider could be made. The
    variable is put back at once; `span_limits` says it and gives the default."""
    if "opentelemetry.sdk.trace" in sys.modules:
        return
    name = "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT"
    hidden = os.environ.get(name)
    if hidden is not None:
        try:
            _limit_value(hidden)
            hidden = None  # valid: nothing to hide
        except ValueError:
            del os.environ[name]
    try:
        import opentelemetry.sdk.trace  # noqa: F401
    finally:
        if hidden is not None:
            os.environ[name] = hidden


# The files OpenTelemetry's exporters read their TLS settings from (each also as
# OTEL_EXPORTER_OTLP_TRACES_*): gRPC's reads them whole as it is made, in `enable()`.
_TLS_FILE_VARIABLES = tuple(
    f"OTEL_EXPORTER_OTLP_{part}{name}" for part in ("TRACES_", "")
    for name in ("CERTIFICATE", "CLIENT_KEY", "CLIENT_CERTIFICATE"))


def _tls_file_problem() -> str:
    """'' or the line that says which OTLP TLS variable names a path that is no regular file:
    the SDK reads it with a plain `read()`, which waits forever on a FIFO for a writer and
    fills memory from a device that never ends (/dev/zero, /dev/urandom): inside
    `enable()`, or on every export. The SDK reads the process's own environment."""
    for name in _TLS_FILE_VARIABLES:
        path = os.environ.get(name, "")
        if not path:
            continue
        try:
            mode = os.stat(path).st_mode
        except (OSError, ValueError):
            continue  # missing or unreadable: the SDK says so itself and goes on
        if not stat.S_ISREG(mode):
            return (f"{name}={path!r} is not a regular file (a FIFO or device is never read "
                    "to its end): point it at a PEM file, or unset it")
    return ""


def _span_limits_of(keywords: Mapping[str, int]) -> Any:
    from opentelemetry.sdk.trace import SpanLimits

    return SpanLimits(**keywords)


def otlp_exporter(endpoint: str, protocol: str, environ: Mapping[str, str] | None = None) -> Any:
    """The SDK's OTLP span exporter for `endpoint` (other settings from OTEL_* variables).
    Raises ValueError, naming the variable, for a TLS file variable that names a FIFO or a
    device (tracing stays off)."""
    env = os.environ if environ is None else environ
    problem = _tls_file_problem()
    if problem:
        raise ValueError(problem)
    try:
        if protocol == "http/protobuf":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        else:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcSpanExporter,
            )
    except ImportError as exc:  # the `otlp` extra is optional
        raise ImportError(f"{MISSING_OTLP} ({exc})") from exc
    # Always given: the SDK would read the variables with a bare float() (otlp_timeout).
    kw: dict[str, Any] = {"timeout": otlp_timeout(env)}
    if protocol == "http/protobuf":

        url = endpoint if "://" in endpoint else "http://" + endpoint
        scheme, _, rest = url.partition("://")
        if "/" not in rest.rstrip("/"):  # a base URL, as OTEL_EXPORTER_OTLP_ENDPOINT is
            url = f"{scheme}://{rest.rstrip('/')}/v1/traces"
        return OTLPSpanExporter(endpoint=url, **kw)

    problem = _grpc_timeout_problem()
    if problem:
        raise ValueError(problem)
    kw["compression"] = grpc_compression(env)
    if endpoint.startswith("unix:"):  # a local socket: no TLS (the SDK would ask for it)
        return GrpcSpanExporter(endpoint=endpoint, insecure=True, **kw)
    if "://" not in endpoint:  # host:port: plaintext unless OTEL_EXPORTER_OTLP_INSECURE=false
        insecure = env.get("OTEL_EXPORTER_OTLP_INSECURE", "true").strip().lower() != "false"
    else:
        # The scheme says it (http: plaintext, https: TLS); OTEL_EXPORTER_OTLP_INSECURE is for
        # an endpoint without one (the OTLP exporter spec). Left to the SDK, any value of it
        # but "true" (1, yes, false) made an http:// endpoint a TLS one: every export failed.
        insecure = endpoint.partition("://")[0].strip().lower() == "http"
    try:
        return GrpcSpanExporter(endpoint=endpoint, insecure=insecure, **kw)
    except ValueError as exc:
        # OpenTelemetry before 1.28 reads OTEL_EXPORTER_OTLP_TRACES_TIMEOUT with int(): 2.5
        # or inf, which later versions read, stop it as it is made.
        raw = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
        if raw is None:
            raise
        raise ValueError(f"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT={raw[:40]!r} is not a number "
                         f"this OpenTelemetry gRPC exporter can read ({exc}): set it to whole "
                         "seconds, e.g. 10, or unset it") from None


def _no_self_metrics(cls: type, noop: type) -> dict[str, Any]:
    """`meter_provider=NoOp` where the SDK takes it. The SDK's self-metrics (and that keyword)
    came after OpenTelemetry 1.27, the release pip picks beside protobuf 4 (TensorFlow
    <= 2.17); older SDKs have no self-metrics to keep out of the user's MeterProvider."""
    try:
        params = inspect.signature(cls).parameters  # the constructor's keywords
    except (TypeError, ValueError):
        return {}
    return {"meter_provider": noop()} if "meter_provider" in params else {}


@dataclass
class _Parts:
    provider: Any
    tracer: Any
    ids: Any
    otlp: Any
    context_cls: Any
    set_span_in_context: Any


class OtelExporter:
    """Sends each window's spans over OTLP; see the module doc. A `sinks.WindowSink`.

    `extra_resource` from the runtime (worker identity `tf_job`/`tf_task`, `devices`,
    `process.pid`) is added to what `resource_attributes` fills in itself (`service.name`,
    `host.name`, `tfobs.version`, `tensorflow.version` when TensorFlow is loaded). Lost
    spans are counted in `health` as they are lost.
    """

    stage: ErrorStage = "export_otel"

    def __init__(
        self,
        config: Config,
        extra_resource: Mapping[str, Any] | None = None,
        *,
        health: HealthLedger | None = None,
        span_exporter: Any = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if environ is None else environ
        self.top_n = config.trace_top_n
        self.max_spans = config.trace_max_spans
        self.cut_spans = 0
        self.windows = 0  # windows whose spans were queued
        self.disabled = env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
        self._lock = threading.Lock()
        self._closed = False
        on_dropped = None
        if health is not None:
            ledger = health

            def on_dropped(n: int) -> None:
                ledger.count_dropped("spans", n)

        self._room = _SpanQueueRoom(_env_int(env, "OTEL_BSP_MAX_QUEUE_SIZE", _DEFAULT_QUEUE),
                                    on_dropped)
        # The SDK refuses a batch larger than the queue; a small queue must not break us.
        batch = min(self._room.capacity, _env_int(env, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
                                                    _DEFAULT_BATCH))
        forks.after_fork_in_child(self._room.reset_after_fork)  # weakly held

        try:
            from opentelemetry import trace
            from opentelemetry.context import Context
            from opentelemetry.metrics import NoOpMeterProvider

            _import_sdk_trace()
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor

            from tfobs.export.otel_ids import PlannedIdGenerator
        except ImportError as exc:  # the `otlp` extra is optional
            raise ImportError(f"{MISSING_OTLP} ({exc})") from exc

        own_exporter = span_exporter is None
        if span_exporter is None:
            span_exporter = otlp_exporter(config.otlp_endpoint, config.otlp_protocol, env)
        ids = PlannedIdGenerator()
        # Our own provider: the user's global TracerProvider (and MeterProvider: the SDK's
        # self-metrics would land there) stays exactly as the user set it.
        limits = span_limits(os.environ)  # the SDK reads the process's own environment
        provider = TracerProvider(
            resource=_build_resource(extra_resource),
            **({"span_limits": _span_limits_of(limits)} if limits else {}),
            id_generator=ids,
            shutdown_on_exit=False,  # the runtime shuts us down with a deadline at exit
            **_no_self_metrics(TracerProvider, NoOpMeterProvider),
        )
        self._quiet = _ExporterLog()
        self._quiet.install()
        provider.add_span_processor(
            BatchSpanProcessor(
                _counting_exporter(span_exporter, self._room, self._quiet,
                                   config.otlp_endpoint if own_exporter else ""),
                max_queue_size=self._room.capacity,
                max_export_batch_size=batch,
                # The SDK's worker waits this long between exports: 0 or less turned tracing
                # off ("schedule_delay_millis must be positive", naming no setting), and
                # 10**17 killed the worker thread with an OverflowError traceback, every
                # later span queued and never sent.
                schedule_delay_millis=_env_int(env, "OTEL_BSP_SCHEDULE_DELAY",
                                               _DEFAULT_SCHEDULE_DELAY_MS),
                export_timeout_millis=_env_int(env, "OTEL_BSP_EXPORT_TIMEOUT",
                                               _DEFAULT_EXPORT_TIMEOUT_MS),
                **_no_self_metrics(BatchSpanProcessor, NoOpMeterProvider),
            )
        )
        from tfobs import __version__

        self._parts = _Parts(
            provider=provider,
            tracer=provider.get_tracer(SCOPE_NAME, __version__),
            ids=ids,
            otlp=span_exporter,
            context_cls=Context,
            set_span_in_context=trace.set_span_in_context,
        )

    @property
    def dropped_spans(self) -> int:
        """Spans lost: no room in the queue, export failed, or unsent at shutdown."""
        return self._room.dropped

    @property
    def resource(self) -> Any:
        return self._parts.provider.resource

    def publish(self, summary: WindowSummary, record: WindowRecord) -> int:
        """Queue the window's spans for export; returns how many were queued (never blocks
        on the network)."""
        if self.disabled or self._closed:
            return 0
        plan = plan_window(summary, record, top_n=self.top_n, max_spans=self.max_spans)
        with self._lock:  # one window at a time: the id plan is per call
            self.cut_spans += plan.cut
            if not self._room.reserve(len(plan.spans)):
                return 0
            queued = self._emit(plan)
            self._room.release(len(plan.spans) - queued)
            self.windows += 1
            return queued

    def _emit(self, plan: TracePlan) -> int:
        p = self._parts
        started: list[Any] = []
        try:
            for ps in plan.spans:
                if ps.parent < 0:
                    context = p.context_cls()  # an empty context: never a user's active span
                    p.ids.plan(trace_id=plan.trace_id, span_id=ps.span_id)
                else:
                    context = p.set_span_in_context(started[ps.parent])
                    p.ids.plan(span_id=ps.span_id)
                span = p.tracer.start_span(ps.name, context=context,
                                           attributes=_bounded(ps.attributes),
                                           start_time=ps.start_ns)
                for name, time_ns, attrs in ps.events:
                    span.add_event(name, attributes=_bounded(attrs), timestamp=time_ns)
                started.append(span)
        finally:
            p.ids.plan()
            # End children before parents, as a live trace would; a span that failed to
            # start is simply absent.
            for span, ps in reversed(list(zip(started, plan.spans[: len(started)], strict=True))):
                span.end(end_time=ps.end_ns)
        return sum(1 for s in started if s.get_span_context().trace_flags.sampled)

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        """Export what is queued now (tests; the batch thread does this on its own)."""
        return bool(self._parts.provider.force_flush(int(timeout_s * 1000)))

    def shutdown(self, timeout_s: float) -> None:
        """Send what is queued, then stop; returns within about `timeout_s` whatever the
        receiver does (a slow or absent one is cut off and its spans counted as dropped)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        deadline = time.monotonic() + max(0.0, timeout_s)
        worker = threading.Thread(
            target=self._shutdown_provider, name="tfobs-otel-shutdown", daemon=True
        )
        worker.start()
        worker.join(max(0.0, timeout_s) * 0.75)
        if worker.is_alive():
            # Cut the in-flight export short: the OTLP exporter's shutdown closes its channel
            # and ends its retry back-off. In its own thread: OpenTelemetry <= 1.27's waits
            # (30 s) for the lock that an export holds through each back-off sleep (up to 32 s).
            cutter = threading.Thread(target=self._cut_export, name="tfobs-otel-cut",
                                      daemon=True)
            cutter.start()
            cutter.join(max(0.0, deadline - time.monotonic()))
            worker.join(max(0.0, deadline - time.monotonic()))
        self._room.close()
        if not worker.is_alive():  # else its export may still log: keep the filter on
            self._quiet.uninstall()

    def _cut_export(self) -> None:
        self._quiet.enter()
        try:
            self._parts.otlp.shutdown()
        except Exception:  # shutting down must not raise
            _log.debug("OTLP exporter shutdown raised", exc_info=True)
        finally:
            self._quiet.leave()

    def _shutdown_provider(self) -> None:
        self._quiet.enter()
        try:
            self._parts.provider.shutdown()
        except Exception:
            _log.debug("TracerProvider shutdown raised", exc_info=True)
        finally:
            self._quiet.leave()
