"""A real OTLP/gRPC trace receiver for tests: opentelemetry-proto's collector TraceService.

Started by a test on a free port of 127.0.0.1. It records every request it answers and can
misbehave on purpose:

- ``normal``: answers each export at once.
- ``slow``: sleeps ``delay_s`` (past the client's export timeout) before answering.
- ``failing``: answers with ``status`` (UNAVAILABLE, which clients retry, or INTERNAL).

Use it as a context manager; ``spans()`` flattens what arrived into `ReceivedSpan` rows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tfobs.summary import CATEGORIES

MODES = ("normal", "slow", "failing")


# Root attributes every window span carries (README, section traces).
WINDOW_ROOT_KEYS = {
    "tfobs.window.index",
    "tfobs.window.first_step",
    "tfobs.window.last_step",
    "tfobs.steps.count",
    "tfobs.steps.method",
    "tfobs.step_time.mean_seconds",
    "tfobs.input_bound.ratio",
    "tfobs.input_bound.verdict",
    "tfobs.device_compute_16bit_ratio",
    "tfobs.spans_cut",
} | {f"tfobs.breakdown.{c}.{u}" for c in CATEGORIES for u in ("seconds", "ratio")}


def any_value(value: AnyValue) -> Any:
    """An OTLP AnyValue as a plain Python value (lists for arrays)."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in kvs}


@dataclass
class ReceivedSpan:
    name: str
    trace_id: int
    span_id: int
    parent_span_id: int  # 0 for a root span
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, int, dict[str, Any]]]  # (name, time_ns, attributes)
    resource: dict[str, Any] = field(repr=False, default_factory=dict)
    scope: str = ""


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    def Export(self, request, context):  # the gRPC method's own name
        r = self._receiver
        with r._lock:
            r.calls += 1
        if r.mode == "slow" and r._stopping.wait(r.delay_s):
            # stop() cut the wait short: the export never completed, so nothing arrived
            # (an exporter that outlived its own shutdown may still be waiting for it).
            context.abort(grpc.StatusCode.UNAVAILABLE, "test receiver stopped")
        elif r.mode == "failing":
            context.abort(r.status, "test receiver is failing on purpose")
        if context.is_active():  # record only what the client can still be told arrived
            with r._lock:
                r.requests.append(request)
            r._arrived.set()
        return trace_service_pb2.ExportTraceServiceResponse()


class OtlpReceiver:
    def __init__(
        self,
        mode: str = "normal",
        *,
        delay_s: float = 5.0,
        status: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE,
        unix_socket: str = "",
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: use one of {MODES}")
        self.mode = mode
        self.delay_s = delay_s
        self.status = status
        self.calls = 0  # Export calls seen, answered or not
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.port = 0
        self.unix_socket = unix_socket  # a path: served on that Unix socket, not TCP
        self._lock = threading.Lock()
        self._arrived = threading.Event()
        self._stopping = threading.Event()
        self._server: grpc.Server | None = None

    @property
    def endpoint(self) -> str:
        if self.unix_socket:
            return f"unix://{self.unix_socket}"
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> OtlpReceiver:
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceService(self), self._server)
        if self.unix_socket:
            self._server.add_insecure_port(f"unix://{self.unix_socket}")
        else:
            self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.stop(grace=0.5).wait(5)
            self._server = None

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            requests = list(self.requests)
        out = []
        for request in requests:
            for rs in request.resource_spans:
                resource = attributes(rs.resource.attributes)
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        out.append(
                            ReceivedSpan(
                                name=s.name,
                                trace_id=int.from_bytes(s.trace_id, "big"),
                                span_id=int.from_bytes(s.span_id, "big"),
                                parent_span_id=int.from_bytes(s.parent_span_id, "big")
                                if s.parent_span_id
                                else 0,
                                start_ns=s.start_time_unix_nano,
                                end_ns=s.end_time_unix_nano,
                                attributes=attributes(s.attributes),
                                events=[
                                    (e.name, e.time_unix_nano, attributes(e.attributes))
                                    for e in s.events
                                ],
                                resource=resource,
                                scope=ss.scope.name,
                            )
                        )
        return out

    def wait_for(
        self, predicate: Callable[[list[ReceivedSpan]], bool], timeout_s: float = 10.0
    ) -> list[ReceivedSpan]:
        """Wait until `predicate(spans())` holds; returns the spans (the last seen on timeout)."""
        deadline = time.monotonic() + timeout_s
        while True:
            spans = self.spans()
            if predicate(spans) or time.monotonic() >= deadline:
                return spans
            self._arrived.wait(min(0.1, max(0.0, deadline - time.monotonic())))
            self._arrived.clear()
