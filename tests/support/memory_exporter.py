"""A real in-memory stand-in for PrometheusExporter: records every call the runtime makes.

Implements the agreed exporter methods (see tfobs/runtime.py) and keeps what it was given,
so runtime tests can assert on the exact sequence without an HTTP server.
"""

from __future__ import annotations

import threading
from typing import Any


class MemoryExporter:
    def __init__(self, fail_on: tuple[str, ...] = ()) -> None:
        self.fail_on = set(fail_on)
        self.lock = threading.Lock()
        self.steps: list[tuple[float, dict[str, str] | None]] = []
        self.windows: list[tuple[str, dict[str, str] | None]] = []
        self.errors: list[str] = []
        self.dropped: list[tuple[str, int]] = []
        self.captures: list[tuple[float, int]] = []
        self.reduces: list[float] = []
        self.costs: list[tuple[float, float]] = []
        self.published: list[tuple[Any, Any]] = []
        self.sources: tuple[Any, Any] | None = None
        self.info: dict[str, Any] = {}
        self.capture_handler: Any = None
        self.shutdown_calls: list[float] = []
        self.window_done = threading.Event()

    def _maybe_fail(self, name: str) -> None:
        if name in self.fail_on:
            raise RuntimeError(f"{name} broke on purpose")

    def observe_step(self, duration_s: float, exemplar: dict[str, str] | None = None) -> None:
        self._maybe_fail("observe_step")
        self.steps.append((duration_s, exemplar))

    def count_window(self, outcome: str, exemplar: dict[str, str] | None = None) -> None:
        with self.lock:
            self.windows.append((outcome, exemplar))
        self.window_done.set()

    def count_error(self, stage: str) -> None:
        with self.lock:
            self.errors.append(stage)

    def count_dropped(self, what: str, n: int = 1) -> None:
        with self.lock:
            self.dropped.append((what, n))

    def observe_capture(self, seconds: float, nbytes: int) -> None:
        self.captures.append((seconds, nbytes))

    def observe_reduce(self, seconds: float) -> None:
        self.reduces.append(seconds)

    def set_cost(self, duty_cycle_ratio: float, overhead_ratio: float) -> None:
        self.costs.append((duty_cycle_ratio, overhead_ratio))

    def publish(self, summary: Any, window: Any = None) -> None:
        self._maybe_fail("publish")
        self.published.append((summary, window))

    def set_sources(self, nvml: Any = None, tfmemory: Any = None) -> None:
        self.sources = (nvml, tfmemory)

    def set_info(self, **labels: Any) -> None:
        self.info = dict(labels)

    def set_capture_request_handler(self, fn: Any) -> None:
        self.capture_handler = fn

    def fold_steps(self) -> None:
        pass

    def shutdown(self, timeout_s: float = 2.0) -> None:
        self.shutdown_calls.append(timeout_s)

    def outcomes(self) -> list[str]:
        with self.lock:
            return [o for o, _ in self.windows]
