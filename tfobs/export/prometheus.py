"""Prometheus exporter of one training process.

Three parts, each in its own module: the event-driven counters and histograms
(`instruments.py`, updated as steps and windows happen), the scrape-time collector over the
latest published summary (`metrics_collector.py`), and the HTTP endpoint (`http_server.py`).
Everything lives in a private `CollectorRegistry`, so the user's own prometheus_client
metrics and the default registry are left alone.

The runtime owns the threads; this class only stores what it is given. `observe_step` runs on
the training thread at every step; every method swallows its own errors (counted as
`tfobs_errors_total{stage="export_prometheus"}`), so the exporter never raises into training.
"""

from __future__ import annotations

import logging
import platform
import re
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry

from tfobs.export.catalog import IDENTITY_LABELS, RESERVED_LABELS, identity_values
from tfobs.export.http_server import MetricsServer
from tfobs.export.instruments import Instruments
from tfobs.export.metrics_collector import Published, SummaryCollector
from tfobs.summary import WindowSummary
from tfobs.window import WindowRecord

log = logging.getLogger(__name__)

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_MAX_INFO_VALUE = 200
_EXEMPLAR_KEYS = frozenset({"trace_id", "span_id"})


def _checked_exemplar(exemplar: dict[str, str]) -> dict[str, str]:
    """Slow path for exemplars with other keys: a bad label name would make the whole
    exposition unparsable for Prometheus, so refuse it here (the caller counts the error)."""
    for key in exemplar:
        if not _LABEL_NAME.match(key):
            raise ValueError(f"bad exemplar label name {key!r}")
    return exemplar


class MetricsState:
    """A registry with the instruments and collector for one or more workers.

    The live exporter holds one worker; the replay server (`replay.py`) holds one per capture.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.instruments = Instruments(self.registry)
        self.collector = SummaryCollector(on_error=self._collector_error)
        self.registry.register(self.collector)
        self._error_sink: Callable[[str], None] | None = None

    def _collector_error(self, stage: str) -> None:
        if self._error_sink is not None:
            self._error_sink(stage)


class PrometheusExporter:
    """`tfobs_*` metrics for one worker, served at `/metrics` (see README "metrics")."""

    def __init__(self, config: Any, identity: dict[str, str]) -> None:
        self.config = config
        self.identity = dict(zip(IDENTITY_LABELS, identity_values(identity), strict=True))
        self._state = MetricsState()
        self._state._error_sink = self.count_error
        self.registry = self._state.registry
        self._bound = self._state.instruments.bind(self.identity)
        self._worker = self._state.collector.worker(self.identity)
        self._worker.info = {"version": _tfobs_version(), "tensorflow_version": "",
                             "python_version": platform.python_version(), "devices": ""}
        self._server: MetricsServer | None = None
        self._capture_handler: Callable[[], Any] | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Bind the HTTP server per config; ConfigError on a taken port or a bad option."""
        cfg = self.config
        port = cfg.resolved_metrics_port() if hasattr(cfg, "resolved_metrics_port") else (
            cfg.metrics_port)
        if port < 0 or self._server is not None:
            return
        server = MetricsServer(
            self.registry,
            bind=cfg.metrics_bind,
            port=port,
            tls_cert=cfg.metrics_tls_cert,
            tls_key=cfg.metrics_tls_key,
            basic_auth=cfg.metrics_basic_auth,
            page=self._page,
            remote_capture=cfg.remote_capture,
            capture_token=cfg.remote_capture_token,
            on_error=self.count_error,
        )
        server.capture_handler = self._capture_handler
        server.start()
        self._server = server

    def shutdown(self, timeout_s: float = 2.0) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown(timeout_s)

    @property
    def url(self) -> str:
        """The `/metrics` URL ("" when the HTTP server is off)."""
        return self._server.url if self._server is not None else ""

    @property
    def port(self) -> int:
        return self._server.port if self._server is not None else 0

    # -- hot path ----------------------------------------------------------------------------

    def observe_step(self, duration_s: float, exemplar: dict[str, str] | None = None) -> None:
        try:
            if exemplar is not None and not exemplar.keys() <= _EXEMPLAR_KEYS:
                exemplar = _checked_exemplar(exemplar)
            self._bound.step.observe(duration_s, exemplar)
        except Exception:
            self.count_error("export_prometheus")

    def step_sink(self) -> Callable[[float], None]:
        """The cheapest way to record a step without an exemplar (see step_histogram.py)."""
        return self._bound.step.sink()

    def fold_steps(self) -> None:
        """Sort waiting step durations into buckets (the runtime calls it once a second)."""
        try:
            self._state.instruments.step.fold()
        except Exception:
            self.count_error("export_prometheus")

    # -- window events -----------------------------------------------------------------------

    def count_window(self, outcome: str, exemplar: dict[str, str] | None = None) -> None:
        try:
            if exemplar is not None and not exemplar.keys() <= _EXEMPLAR_KEYS:
                exemplar = _checked_exemplar(exemplar)
            self._bound.window(outcome).inc(1, exemplar)
        except Exception:
            self.count_error("export_prometheus")

    def count_error(self, stage: str) -> None:
        try:
            self._bound.error(stage).inc()
        except Exception:  # a bad stage name must not raise either
            log.debug("tfobs: could not count error %r", stage, exc_info=True)

    def count_dropped(self, what: str, n: int = 1) -> None:
        try:
            self._bound.drop(what).inc(n)
        except Exception:
            self.count_error("export_prometheus")

    def observe_capture(self, seconds: float, nbytes: int) -> None:
        try:
            self._bound.capture_s.observe(seconds)
            self._bound.capture_bytes.inc(max(int(nbytes), 0))
        except Exception:
            self.count_error("export_prometheus")

    def observe_reduce(self, seconds: float) -> None:
        try:
            self._bound.reduce_s.observe(seconds)
        except Exception:
            self.count_error("export_prometheus")

    def set_cost(self, duty_cycle_ratio: float, overhead_ratio: float) -> None:
        self._worker.cost = (float(duty_cycle_ratio), float(overhead_ratio))

    def publish(self, summary: WindowSummary, window: WindowRecord | None = None) -> None:
        """Make `summary` the figures of the next scrape (one reference swap)."""
        self._worker.latest = Published(summary, window, time.time())

    # -- sources and identity ----------------------------------------------------------------

    def set_sources(self, nvml: Any = None, tfmemory: Any = None) -> None:
        self._worker.nvml = nvml
        self._worker.tfmemory = tfmemory

    def set_info(self, **labels: Any) -> None:
        """Add labels to `tfobs_info` (e.g. tensorflow_version, devices)."""
        info = dict(self._worker.info)
        for key, value in labels.items():
            if key in RESERVED_LABELS or not _LABEL_NAME.match(key) or key.startswith("__"):
                self.count_error("export_prometheus_info")
                continue
            if isinstance(value, (list, tuple)):
                value = ",".join(str(v) for v in value)
            info[key] = str(value)[:_MAX_INFO_VALUE]
        self._worker.info = info

    def set_capture_request_handler(self, fn: Callable[[], Any] | None) -> None:
        """Called by `POST /capture` (only served when remote_capture is on)."""
        self._capture_handler = fn
        if self._server is not None:
            self._server.capture_handler = fn

    # -- overview page -----------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """tfobs's own state for the overview page."""
        return health_of(self.registry, self._worker, url=self.url)

    def _page(self) -> tuple[str, str]:
        latest = self._worker.latest
        return render_overview(latest.summary if latest else None, self.health())


def health_of(registry: CollectorRegistry, worker: Any, url: str = "") -> dict[str, Any]:
    """Counters by label plus the latest cost and window, read from the registry itself."""
    counts: dict[str, dict[str, float]] = {"windows": {}, "errors": {}, "dropped": {}}
    steps = 0.0
    ident = dict(zip(IDENTITY_LABELS, worker.identity, strict=True))
    wanted = {"tfobs_windows_total": ("windows", "outcome"),
              "tfobs_errors_total": ("errors", "stage"),
              "tfobs_dropped_total": ("dropped", "what")}
    for fam in registry.collect():
        for s in fam.samples:
            if any(s.labels.get(k) != v for k, v in ident.items()):
                continue
            if s.name in wanted:
                key, label = wanted[s.name]
                counts[key][s.labels[label]] = s.value
            elif s.name == "tfobs_step_duration_seconds_count":
                steps = s.value
    latest = worker.latest
    return {
        "identity": ident,
        "url": url,
        "info": dict(worker.info),
        "steps_observed": int(steps),
        "windows": counts["windows"],
        "errors": counts["errors"],
        "dropped": counts["dropped"],
        "duty_cycle_ratio": worker.cost[0] if worker.cost else None,
        "estimated_overhead_ratio": worker.cost[1] if worker.cost else None,
        "last_window_timestamp_s": latest.at_s if latest else None,
        "window_index": latest.window.index if latest and latest.window else None,
    }


def render_overview(summary: WindowSummary | None, health: dict[str, Any]) -> tuple[str, str]:
    """(content type, body) of `/`: the overview page, or plain text if it is unavailable."""
    try:
        from tfobs.export.page import render_page
    except ImportError:
        return "text/plain; charset=utf-8", _text_page(summary, health)
    return "text/html; charset=utf-8", render_page(summary, health)


def _text_page(summary: WindowSummary | None, health: dict[str, Any]) -> str:
    ident = health.get("identity", {})
    lines = [f"tfobs {health.get('info', {}).get('version', '')} "
             f"tf_job={ident.get('tf_job')} tf_task={ident.get('tf_task')}",
             f"steps observed: {health.get('steps_observed', 0)}",
             "windows: " + ", ".join(f"{k}={int(v)}" for k, v in health["windows"].items())]
    if summary is not None:
        lines.append(f"latest window: {summary.steps.count} steps, mean step "
                     f"{summary.steps.mean_s * 1e3:.2f} ms, input-bound "
                     f"{summary.input_bound.ratio:.1%} ({summary.input_bound.verdict})")
    lines.append("metrics: /metrics")
    return "\n".join(lines) + "\n"


def _tfobs_version() -> str:
    from tfobs import __version__

    return __version__
