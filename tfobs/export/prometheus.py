"""Prometheus exporter of one training process.

Three parts, each in its own module: the step-time histogram (`step_histogram.py`, the
runtime's per-step sink), the scrape-time collector over the worker's health ledger, latest
published summary and samplers (`metrics_collector.py`), and the HTTP endpoint
(`http_server.py`). Everything lives in a private `CollectorRegistry`, so the user's own
prometheus_client metrics and the default registry are left alone.

The exporter is a `WindowSink` (`sinks.py`): the runtime hands it each window's summary and
shuts it down by a deadline; everything else it reads on scrape. Its own failures (a bad
figure while collecting, an HTTP error) go to the health ledger it was given.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry

from tfobs.config import Config
from tfobs.export.catalog import BY_NAME, IDENTITY_LABELS, STEP_DURATION, identity_values
from tfobs.export.http_server import MetricsServer
from tfobs.export.metrics_collector import (
    GpuSource,
    MemorySource,
    Published,
    SummaryCollector,
    WorkerState,
)
from tfobs.export.recent import RecentWindows
from tfobs.export.step_histogram import STEP_BUCKETS, StepHistogram, StepSeries
from tfobs.health import HealthLedger
from tfobs.summary import ERROR_STAGES, ErrorStage, WindowSummary
from tfobs.window import WindowRecord

_log = logging.getLogger(__name__)


class MetricsState:
    """A registry with the step histogram and the collector for one or more workers.

    The live exporter holds one worker; the replay server (`replay.py`) holds one per capture.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.steps = StepHistogram(
            STEP_DURATION, _help(STEP_DURATION),
            list(IDENTITY_LABELS), buckets=STEP_BUCKETS,
        )
        self.registry.register(self.steps)
        self.collector = SummaryCollector()
        self.registry.register(self.collector)

    def add_worker(self, identity: dict[str, str],
                   health: HealthLedger) -> tuple[StepSeries, WorkerState]:
        """The worker's step series and state; its collector failures count in `health`."""
        series = self.steps.labels(*identity_values(identity))
        return series, self.collector.worker(identity, health)


class PrometheusExporter:
    """`tfobs_*` metrics for one worker, served at `/metrics` (see docs/metrics.md)."""

    stage: ErrorStage = "export_prometheus"

    def __init__(
        self,
        config: Config,
        identity: dict[str, str],
        health: HealthLedger,
        *,
        nvml: GpuSource | None = None,
        tfmemory: MemorySource | None = None,
        capture_request: Callable[[], bool] | None = None,
    ) -> None:
        self.config = config
        self.identity = dict(zip(IDENTITY_LABELS, identity_values(identity), strict=True))
        self.health = health
        self._state = MetricsState()
        self.registry = self._state.registry
        #: the runtime's per-step sink (a `sinks.StepSink`)
        self.step_sink, self._worker = self._state.add_worker(self.identity, health)
        self._worker.nvml, self._worker.tfmemory = nvml, tfmemory
        self._capture_request = capture_request
        self._server: MetricsServer | None = None
        self.recent = RecentWindows()  # the page's history and /api/windows

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, port: int | None = None) -> None:
        """Bind the HTTP server per config (`port`: this one instead of the configured one);
        ConfigError on a bad option, PortInUseError (a ConfigError) on a taken port."""
        cfg = self.config
        port = cfg.resolved_metrics_port() if port is None else port
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
            on_error=self._count_server_error,
            on_late=lambda: self.health.count_dropped("late_rendering"),
        )
        server.capture_handler = self._capture_request
        server.api = self._api
        server.start()
        self._server = server

    def _count_server_error(self, stage: str) -> None:
        # The server names its stages as plain strings: one it has newly made up still counts.
        self.health.count_error(stage if stage in ERROR_STAGES else "http_server")

    def shutdown(self, timeout_s: float) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown(timeout_s)

    @property
    def url(self) -> str:
        """The `/metrics` URL ("" when the HTTP server is off)."""
        return self._server.url if self._server is not None else ""

    @property
    def port(self) -> int:
        """The port served (0 when the HTTP server is off)."""
        return self._server.port if self._server is not None else 0

    # -- window sink -------------------------------------------------------------------------

    def publish(self, summary: WindowSummary, record: WindowRecord) -> None:
        """Make `summary` the figures of the next scrape (one reference swap)."""
        now = time.time()
        self._worker.latest = Published(summary, record, now)
        self.recent.add(summary, record, now)

    # -- overview page -----------------------------------------------------------------------

    def page_health(self) -> dict[str, Any]:
        """tfobs's own state for the overview page."""
        return {**health_of(self._worker, url=self.url),
                "overhead_budget": self.config.overhead_budget}

    def _page(self) -> tuple[str, str]:
        latest = self._worker.latest
        return render_overview(latest.summary if latest else None, self.page_health(),
                               history_of(self.recent))

    def _api(self) -> tuple[str, str]:
        return "application/json", self.recent.to_json(self.identity)


def history_of(recent: RecentWindows) -> list[tuple[str, WindowSummary]]:
    """The page's history rows: window number, steps and publication time (UTC)."""
    return [(f"#{w.index} steps {w.first_step}-{w.last_step} "
             f"{time.strftime('%H:%M:%S', time.gmtime(w.published_at_s))}", w.summary)
            for w in recent.items()]


def health_of(worker: WorkerState, url: str = "") -> dict[str, Any]:
    """The overview page's health section: the ledger's counts plus the latest window."""
    h = worker.health.snapshot()
    latest = worker.latest
    return {
        "identity": dict(zip(IDENTITY_LABELS, worker.identity, strict=True)),
        "url": url,
        "info": h.info,
        "steps_observed": h.steps,
        "windows": {k: v for k, v in h.windows.items() if v},
        "errors": h.errors,
        "dropped": h.dropped,
        "duty_cycle_ratio": h.duty_cycle_ratio,
        "estimated_overhead_ratio": h.overhead_ratio,
        "last_window_timestamp_s": latest.at_s if latest else None,
        "window_index": latest.window.index if latest and latest.window else None,
        "kept": h.kept,
        "kept_last": h.kept_last,
        "window_ends": h.window_ends,
        "window_end_s": h.window_end_s,
        "gpm": gpm_of(worker),
    }


def gpm_of(worker: WorkerState) -> dict[str, Any] | None:
    """The page's hardware activity rows (NVML GPM): latest figures per GPU, or why none;
    None where NVML reads no GPU (a CPU job's page says nothing of GPM)."""
    nvml = worker.nvml
    if nvml is None or not nvml.available:
        return None
    try:
        gpus = [g for g in nvml.latest() if getattr(g, "gpm", None) is not None]
        return {"gpus": [(g.device, g.name, g.gpm) for g in gpus],
                "reason": str(getattr(nvml, "gpm_unavailable_reason", "") or "")}
    except Exception:  # the page must render whatever a sampler returns
        worker.health.count_error("export_prometheus")
        return None


def render_overview(summary: WindowSummary | None, health: dict[str, Any],
                    history: list[tuple[str, WindowSummary]] | None = None) -> tuple[str, str]:
    """(content type, body) of `/`: the overview page, or plain text if it is unavailable."""
    try:
        from tfobs.export.page import render_page
    except ImportError:
        return "text/plain; charset=utf-8", _text_page(summary, health)
    return "text/html; charset=utf-8", render_page(summary, health, history or ())


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


def _help(name: str) -> str:
    return BY_NAME[name].help
