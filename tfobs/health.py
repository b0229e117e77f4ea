"""HealthLedger: tfobs's own counts in one place, written as things happen, read on scrape.

The runtime counts windows, errors and drops here; the samplers and exporters count their
own failures and drops here too (each is handed the ledger at construction), so nothing is
polled back out of them. The Prometheus collector (`export/metrics_collector.py`) and the
overview page read a `snapshot()`; nothing else keeps a second count.

One lock guards everything except `steps`, which only the training thread writes (one int
increment under the GIL, the hot path takes no lock; readers may see it a step late).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from tfobs.summary import OUTCOMES, CutCause, DropWhat, ErrorStage, Outcome

# Capture export + read back, and reduction: tens of milliseconds to tens of seconds.
WORK_BUCKETS: tuple[float, ...] = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass
class Durations:
    """A histogram of seconds over WORK_BUCKETS (+Inf last), kept as plain counts."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(WORK_BUCKETS) + 1))
    sum_s: float = 0.0

    def add(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(WORK_BUCKETS, seconds)] += 1
        self.sum_s += seconds

    def copy(self) -> Durations:
        return Durations(list(self.counts), self.sum_s)


@dataclass(frozen=True)
class KeptCapture:
    """The latest window kept in keep_dir (tfobs/runtime/keep.py)."""

    index: int  # the window's index in this process
    at_s: float  # Unix time it was written
    path: str  # <keep_dir>/plugins/profile/<run>/<host>.xplane.pb
    reason: str  # the triggers that kept it, e.g. "first", "input_bound,step_time"


@dataclass(frozen=True)
class HealthSnapshot:
    """A consistent copy of the ledger (what one scrape or one page shows)."""

    steps: int
    windows: dict[str, int]
    # outcome -> the latest such window's trace ids, and the Unix time it was counted
    window_exemplars: dict[str, tuple[dict[str, str], float]]
    errors: dict[str, int]
    dropped: dict[str, int]
    cut: dict[str, int]  # windows cut short, by cause
    capture_s: Durations
    reduce_s: Durations
    capture_bytes: int
    duty_cycle_ratio: float | None
    overhead_ratio: float | None
    info: dict[str, str]
    last_reason: str
    kept: int = 0  # windows kept in keep_dir
    kept_last: KeptCapture | None = None
    kept_bytes: int = 0  # bytes this worker holds in keep_dir now
    # The step that overlapped the latest measured export / the median step, and the steps
    # the next window will trace (capture/window_length.py); None until measured.
    export_step_stretch: float | None = None
    next_window_steps: int | None = None
    # Window ends by where tracing was stopped (session.EndAt), and the training thread's
    # seconds spent ending them, by part ("drain": waiting for the device; "stop").
    window_ends: dict[str, int] = field(default_factory=dict)
    window_end_s: dict[str, float] = field(default_factory=dict)


class HealthLedger:
    """tfobs's own counters, kept whether or not an exporter is attached."""

    def __init__(self, info: Mapping[str, str] | None = None) -> None:
        self.steps = 0  # training thread only (see module doc)
        self._lock = threading.Lock()
        self._windows: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
        self._exemplars: dict[str, tuple[dict[str, str], float]] = {}
        self._errors: dict[str, int] = {}
        self._dropped: dict[str, int] = {}
        self._cut: dict[str, int] = {}
        self._capture_s = Durations()
        self._reduce_s = Durations()
        self._capture_bytes = 0
        self._cost: tuple[float, float] | None = None
        self._info: dict[str, str] = dict(info or {})
        self._last_reason = ""
        self._kept = 0
        self._kept_last: KeptCapture | None = None
        self._kept_bytes = 0
        self._length: tuple[float, int] | None = None
        self._ends: dict[str, int] = {}
        self._end_s: dict[str, float] = {"drain": 0.0, "stop": 0.0}

    # -- written by the runtime, samplers and exporters ----------------------------------

    def count_window(self, outcome: Outcome, reason: str = "",
                     exemplar: Mapping[str, str] | None = None) -> None:
        with self._lock:
            self._windows[outcome] = self._windows.get(outcome, 0) + 1
            if exemplar:
                self._exemplars[outcome] = (dict(exemplar), time.time())
            if reason:
                self._last_reason = reason

    def count_error(self, stage: ErrorStage, n: int = 1) -> None:
        with self._lock:
            self._errors[stage] = self._errors.get(stage, 0) + n

    def count_dropped(self, what: DropWhat, n: int = 1) -> None:
        if n <= 0:
            return
        with self._lock:
            self._dropped[what] = self._dropped.get(what, 0) + n

    def count_cut(self, cause: CutCause) -> None:
        with self._lock:
            self._cut[cause] = self._cut.get(cause, 0) + 1

    def count_kept(self, kept: KeptCapture, held_bytes: int) -> None:
        with self._lock:
            self._kept += 1
            self._kept_last = kept
            self._kept_bytes = max(int(held_bytes), 0)

    def set_kept_bytes(self, held_bytes: int) -> None:
        with self._lock:
            self._kept_bytes = max(int(held_bytes), 0)

    def observe_capture(self, seconds: float, nbytes: int) -> None:
        with self._lock:
            self._capture_s.add(seconds)
            self._capture_bytes += max(int(nbytes), 0)

    def observe_window_end(self, at: str, drain_s: float, stop_s: float) -> None:
        with self._lock:
            self._ends[at] = self._ends.get(at, 0) + 1
            self._end_s["drain"] += max(drain_s, 0.0)
            self._end_s["stop"] += max(stop_s, 0.0)

    def observe_reduce(self, seconds: float) -> None:
        with self._lock:
            self._reduce_s.add(seconds)

    def set_cost(self, duty_cycle_ratio: float, overhead_ratio: float) -> None:
        with self._lock:
            self._cost = (float(duty_cycle_ratio), float(overhead_ratio))

    def set_window_length(self, stretch: float, next_steps: int) -> None:
        with self._lock:
            self._length = (float(stretch), int(next_steps))

    def set_info(self, info: Mapping[str, str]) -> None:
        """Add or replace `tfobs_info` labels (versions, devices)."""
        with self._lock:
            self._info = {**self._info, **info}

    # -- read on scrape ------------------------------------------------------------------

    def snapshot(self) -> HealthSnapshot:
        with self._lock:
            cost = self._cost
            return HealthSnapshot(
                steps=self.steps,
                windows=dict(self._windows),
                window_exemplars=dict(self._exemplars),
                errors=dict(self._errors),
                dropped=dict(self._dropped),
                cut=dict(self._cut),
                capture_s=self._capture_s.copy(),
                reduce_s=self._reduce_s.copy(),
                capture_bytes=self._capture_bytes,
                duty_cycle_ratio=cost[0] if cost else None,
                overhead_ratio=cost[1] if cost else None,
                info=dict(self._info),
                last_reason=self._last_reason,
                kept=self._kept,
                kept_last=self._kept_last,
                kept_bytes=self._kept_bytes,
                export_step_stretch=self._length[0] if self._length else None,
                next_window_steps=self._length[1] if self._length else None,
                window_ends=dict(self._ends),
                window_end_s=dict(self._end_s),
            )

    # Read-only views for scripts and tests: counts that happened (zeros left out).

    @property
    def windows(self) -> dict[str, int]:
        with self._lock:
            return {k: v for k, v in self._windows.items() if v}

    @property
    def errors(self) -> dict[str, int]:
        with self._lock:
            return dict(self._errors)

    @property
    def dropped(self) -> dict[str, int]:
        with self._lock:
            return dict(self._dropped)

    @property
    def last_reason(self) -> str:
        return self._last_reason

    def __repr__(self) -> str:
        return (f"HealthLedger(steps={self.steps}, windows={self.windows}, "
                f"errors={self.errors}, dropped={self.dropped})")
