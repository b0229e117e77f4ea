"""An in-memory exporter for runtime tests: a real `WindowSink` and `StepSink`.

It implements the two protocols of `tfobs/export/sinks.py` exactly as the Prometheus
exporter does (the runtime's per-step `append` path included) and keeps what it was given,
so tests assert on what the runtime sent without an HTTP server. `fail_on` names methods
that raise, to check that the runtime counts a broken sink and goes on.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping

from tfobs.summary import WindowSummary
from tfobs.window import WindowRecord


class MemoryExporter:
    stage = "export_memory"

    def __init__(self, fail_on: tuple[str, ...] = ()) -> None:
        self.fail_on = set(fail_on)
        self.lock = threading.Lock()
        self.pending: deque[float] = deque()  # what `append` took and `fold` has not yet
        self.steps: list[tuple[float, dict[str, str] | None]] = []
        self.published: list[tuple[WindowSummary, WindowRecord]] = []
        self.shutdown_calls: list[float] = []
        self.window_done = threading.Event()
        # The hot path, as StepSeries does it: a C-level deque.append, no Python frame.
        self.append = self.pending.append

    def _maybe_fail(self, name: str) -> None:
        if name in self.fail_on:
            raise RuntimeError(f"{name} broke on purpose")

    # -- StepSink ------------------------------------------------------------------------

    def observe(self, seconds: float, exemplar: Mapping[str, str] | None = None) -> None:
        self._maybe_fail("observe")
        with self.lock:
            self._drain()  # the training thread's earlier steps first: one ordered list
            self.steps.append((seconds, dict(exemplar) if exemplar else None))

    def fold(self) -> None:
        self._maybe_fail("fold")
        with self.lock:
            self._drain()

    def _drain(self) -> None:
        for _ in range(len(self.pending)):
            self.steps.append((self.pending.popleft(), None))

    # -- WindowSink ----------------------------------------------------------------------

    def publish(self, summary: WindowSummary, record: WindowRecord) -> None:
        self._maybe_fail("publish")
        with self.lock:
            self.published.append((summary, record))
        self.window_done.set()

    def shutdown(self, timeout_s: float) -> None:
        self.shutdown_calls.append(timeout_s)

    # -- for assertions ------------------------------------------------------------------

    def all_steps(self) -> list[tuple[float, dict[str, str] | None]]:
        self.fold()
        with self.lock:
            return list(self.steps)
