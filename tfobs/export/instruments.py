"""Counters and histograms updated as events happen (every step, every window).

These are prometheus_client metric objects (thread-safe, exemplar-capable), except the
step-time histogram, which takes every training step and has its own cheaper collector
(`step_histogram.py`). Everything read from a window summary is pulled on scrape instead
(`metrics_collector.py`).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from tfobs.export.catalog import BY_NAME, IDENTITY_LABELS, identity_values
from tfobs.export.step_histogram import StepHistogram, StepSeries
from tfobs.window import OUTCOMES

# Steps from about a millisecond (small models) to a minute (huge batches).
STEP_BUCKETS: tuple[float, ...] = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0,
)
# Capture export + read back, and reduction: tens of milliseconds to tens of seconds.
WORK_BUCKETS: tuple[float, ...] = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def _help(name: str) -> str:
    return BY_NAME[name].help


class Instruments:
    """The event-driven metrics of one registry; `bind()` gives one worker's children."""

    def __init__(self, registry: CollectorRegistry) -> None:
        ident = list(IDENTITY_LABELS)
        self.step = StepHistogram(
            "tfobs_step_duration_seconds", _help("tfobs_step_duration_seconds"), ident,
            buckets=STEP_BUCKETS,
        )
        registry.register(self.step)
        self.windows = Counter(
            "tfobs_windows", _help("tfobs_windows_total"), [*ident, "outcome"], registry=registry
        )
        self.errors = Counter(
            "tfobs_errors", _help("tfobs_errors_total"), [*ident, "stage"], registry=registry
        )
        self.dropped = Counter(
            "tfobs_dropped", _help("tfobs_dropped_total"), [*ident, "what"], registry=registry
        )
        self.capture_s = Histogram(
            "tfobs_capture_duration_seconds", _help("tfobs_capture_duration_seconds"), ident,
            buckets=WORK_BUCKETS, unit="seconds", registry=registry,
        )
        self.reduce_s = Histogram(
            "tfobs_reduce_duration_seconds", _help("tfobs_reduce_duration_seconds"), ident,
            buckets=WORK_BUCKETS, unit="seconds", registry=registry,
        )
        self.capture_bytes = Counter(
            "tfobs_capture_bytes", _help("tfobs_capture_bytes_total"), ident, unit="bytes",
            registry=registry,
        )

    def bind(self, identity: dict[str, str]) -> BoundInstruments:
        return BoundInstruments(self, identity_values(identity))


class BoundInstruments:
    """One worker's children, resolved once so the hot path does no label lookups."""

    def __init__(self, inst: Instruments, ident: tuple[str, ...]) -> None:
        self._inst = inst
        self._ident = ident
        self.step: StepSeries = inst.step.labels(*ident)
        # Every outcome exists from the start so rate() and increase() see the first window.
        self.windows = {o: inst.windows.labels(*ident, o) for o in OUTCOMES}
        self.capture_s = inst.capture_s.labels(*ident)
        self.reduce_s = inst.reduce_s.labels(*ident)
        self.capture_bytes = inst.capture_bytes.labels(*ident)
        self.errors = inst.errors
        self.dropped = inst.dropped

    def window(self, outcome: str) -> Counter:
        child = self.windows.get(outcome)
        if child is None:  # an outcome added later in window.py still gets counted
            child = self.windows[outcome] = self._inst.windows.labels(*self._ident, outcome)
        return child

    def error(self, stage: str) -> Counter:
        return self._inst.errors.labels(*self._ident, stage)

    def drop(self, what: str) -> Counter:
        return self._inst.dropped.labels(*self._ident, what)
