"""The two small interfaces between the runtime and the exporters.

The runtime is handed its sinks at construction and calls only these methods; it never
looks an exporter's method up by name. Both follow OpenTelemetry SDK's processors: a sink
that fails raises, and the runtime counts it (`tfobs_errors_total{stage}`) and goes on.
Everything else an exporter needs (the health ledger, the samplers, the capture-request
handler) it is given when it is built, and it reads them itself, on scrape.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from tfobs.summary import ErrorStage, WindowSummary
from tfobs.window import WindowRecord


class WindowSink(Protocol):
    """Takes each captured window (reduction thread) and shuts down by a deadline."""

    #: the `tfobs_errors_total{stage}` its failures are counted under
    stage: ErrorStage

    def publish(self, summary: WindowSummary, record: WindowRecord) -> object:
        """Take one window's figures (what it returns is ignored); must not block on the
        network."""

    def shutdown(self, timeout_s: float) -> None:
        """Send or drop what is pending and stop; return within about `timeout_s`."""


class StepSink(Protocol):
    """Takes every training step's duration (training thread: cheap, never blocks)."""

    #: the `tfobs_errors_total{stage}` its failures are counted under
    stage: ErrorStage

    def append(self, seconds: float) -> None:
        """The hot path: a step without an exemplar."""

    def observe(self, seconds: float, exemplar: Mapping[str, str] | None = None) -> None:
        """A step of an open window, with the exemplar linking it to the window's trace."""

    def fold(self) -> None:
        """Tidy what `append` left (the runtime calls it about once a second)."""
