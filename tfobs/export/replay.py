"""Replay: serve captures' figures at `/metrics` exactly as the live exporter would.

`tfobs analyze --serve PORT FILE...` calls `serve()`, so dashboards' panels (the GPU ones
included) can be checked against real captures on a machine without a GPU. Capture i is
worker `tf_job="replay", tf_task="i"`; its steps fill the step-time histogram with exemplars
pointing at a trace id drawn for it; each counts one `captured` window; the window's
publication time is when serving starts.
"""

from __future__ import annotations

import platform
import sys
import threading
import time
from collections.abc import Sequence

from tfobs.errors import ConfigError
from tfobs.export.http_server import MetricsServer
from tfobs.export.metrics_collector import Published
from tfobs.export.prometheus import MetricsState, health_of, render_overview
from tfobs.health import HealthLedger
from tfobs.summary import WindowSummary
from tfobs.window import WindowRecord

REPLAY_JOB = "replay"


def load_state(summaries: Sequence[WindowSummary], tf_job: str = REPLAY_JOB) -> MetricsState:
    """A registry holding one worker per summary, filled as the live exporter fills it."""
    from tfobs import __version__

    state = MetricsState()
    now = time.time()
    for i, summary in enumerate(summaries):
        identity = {"tf_job": tf_job, "tf_task": str(i)}
        health = HealthLedger({
            "version": __version__,
            "tensorflow_version": summary.environment.framework_version,
            "python_version": platform.python_version(),
            "devices": ",".join(d.device for d in summary.devices)
            or f"{summary.environment.device_type}:{summary.environment.device_count}",
        })
        step_series, worker = state.add_worker(identity, health)
        window = WindowRecord(index=i, start_ns=summary.start_ns,
                              end_ns=summary.start_ns + int(summary.duration_s * 1e9))
        steps = summary.steps.items
        for step in steps:
            step_series.observe(step.duration_s, window.exemplar(step.step_num, step.marker))
        if not steps:  # a capture whose steps were counted but not listed
            for _ in range(summary.steps.count):
                step_series.observe(summary.steps.mean_s, window.exemplar())
        health.steps = max(len(steps), summary.steps.count)
        health.count_window("captured", exemplar=window.exemplar())
        worker.latest = Published(summary, window, now)
    return state


def start(
    summaries: Sequence[WindowSummary], port: int, bind: str = "127.0.0.1"
) -> MetricsServer:
    """Start serving in a daemon thread; the caller shuts it down. ConfigError if bind fails."""
    state = load_state(summaries)
    first = next(iter(state.collector.workers()), None)

    def page() -> tuple[str, str]:
        if first is None:
            return "text/plain; charset=utf-8", "tfobs replay: no captures\n"
        latest = first.latest
        return render_overview(latest.summary if latest else None, health_of(first))

    server = MetricsServer(state.registry, bind=bind, port=port, page=page,
                           fixes=("set --serve to a free port",
                                  "set --bind to an address of this host"))
    server.start()
    return server


def serve(
    summaries: list[WindowSummary],
    port: int,
    bind: str = "127.0.0.1",
    seconds: float | None = None,
) -> int:
    """Serve until `seconds` pass (None: until Ctrl-C). Returns a process exit code."""
    try:
        server = start(summaries, port, bind)
    except ConfigError as e:
        print(f"tfobs analyze: {e}", file=sys.stderr)
        return 2
    print(f"tfobs: serving {len(summaries)} capture(s) at {server.url} "
          f"(tf_job={REPLAY_JOB}, tf_task=0..{max(len(summaries) - 1, 0)})", flush=True)
    stop = threading.Event()
    try:
        stop.wait(seconds)
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown(2.0)
    return 0
