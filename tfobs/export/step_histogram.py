"""The step-time histogram, built for the training thread's hot path.

prometheus_client's `Histogram.observe` takes two locks and scans the buckets: about 2 us on a
warm core, but 8 us measured inside a real Keras step, where the training step has just
evicted the interpreter's caches (`benchmarks/overhead.py` times tfobs's per-step work in
place). Here a step is one `deque.append` (atomic under the GIL, no lock); the durations are
sorted into buckets in bulk by whoever reads or tidies the histogram: a scrape and the
runtime's capture thread once a second.

Exposed exactly as a prometheus_client `Histogram` would be: `_bucket{le}` cumulative
counts with exemplars, `_count`, `_sum`, one series per worker identity.
"""

from __future__ import annotations

import bisect
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence

from prometheus_client import utils as _prom_utils
from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.samples import Exemplar

from tfobs.summary import ErrorStage

# prometheus_client's own rendering of a bucket bound ("+Inf", "0.005"), untyped there.
go_float: Callable[[float], str] = _prom_utils.floatToGoString
MAX_PENDING = 100_000  # about 3 MB of floats
MAX_EXEMPLAR_RUNES = 128  # OpenMetrics: label names and values together
# Steps from about a millisecond (small models) to a minute (huge batches).
STEP_BUCKETS: tuple[float, ...] = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0,
)
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_TRACE_KEYS = frozenset({"trace_id", "span_id"})


def check_exemplar(exemplar: Mapping[str, str]) -> None:
    """ValueError for an exemplar OpenMetrics would reject: a bad label name would make the
    whole exposition unparsable for Prometheus, too many characters are refused by it."""
    if not exemplar.keys() <= _TRACE_KEYS:
        for key in exemplar:
            if not _LABEL_NAME.match(key):
                raise ValueError(f"bad exemplar label name {key!r}")
    runes = sum(len(k) + len(v) for k, v in exemplar.items())
    if runes > MAX_EXEMPLAR_RUNES:
        raise ValueError(f"exemplar labels have {runes} characters, over {MAX_EXEMPLAR_RUNES}")


class StepSeries:
    """One worker's histogram; the runtime's per-step sink (`tfobs.export.sinks.StepSink`).

    `append(seconds)` is the hot path: the pending deque's own C-level `append`, no Python
    frame at all. `observe(seconds, exemplar)` takes a step that carries an exemplar.
    """

    __slots__ = ("_bounds", "_counts", "_exemplars", "_lock", "_pending", "_sum", "append",
                 "labels")
    stage: ErrorStage = "export_prometheus"

    def __init__(self, bounds: Sequence[float], labels: tuple[str, ...]) -> None:
        self.labels = labels
        self._bounds = list(bounds)  # ends with +inf
        self._counts = [0] * len(self._bounds)
        self._exemplars: list[Exemplar | None] = [None] * len(self._bounds)
        self._sum = 0.0
        # Bounded: if nobody folded for MAX_PENDING steps (the capture thread gone), the
        # oldest waiting durations give way rather than memory growing.
        self._pending: deque[float] = deque(maxlen=MAX_PENDING)
        self._lock = threading.Lock()  # folding only; the hot path takes none
        self.append: Callable[[float], None] = self._pending.append

    def observe(self, seconds: float, exemplar: Mapping[str, str] | None = None) -> None:
        """Record one step (training thread). Raises ValueError/TypeError on bad input."""
        seconds = float(seconds)
        if exemplar:
            check_exemplar(exemplar)
            with self._lock:
                i = self._add(seconds)
                self._exemplars[i] = Exemplar(dict(exemplar), seconds, time.time())
            return
        pending = self._pending
        pending.append(seconds)
        if len(pending) == MAX_PENDING:
            self.fold()

    def fold(self) -> None:
        """Sort the waiting durations into their buckets (any thread)."""
        with self._lock:
            pending = self._pending
            for _ in range(len(pending)):  # only what is there now; appends may go on
                self._add(pending.popleft())

    def _add(self, seconds: float) -> int:
        if seconds != seconds:  # NaN: no bucket would take it; count it under +Inf
            i = len(self._bounds) - 1
        else:
            i = bisect.bisect_left(self._bounds, seconds)  # first bucket with seconds <= le
        self._counts[i] += 1
        self._sum += seconds
        return i

    def snapshot(self) -> tuple[list[tuple[str, float] | tuple[str, float, Exemplar]], float]:
        """(cumulative buckets with their exemplars, sum) after a fold."""
        self.fold()
        with self._lock:
            counts, exemplars, total = list(self._counts), list(self._exemplars), self._sum
        buckets: list[tuple[str, float] | tuple[str, float, Exemplar]] = []
        running = 0
        for le, n, ex in zip(self._bounds, counts, exemplars, strict=True):
            running += n
            bound = go_float(le)
            buckets.append((bound, float(running)) if ex is None else (bound, float(running), ex))
        return buckets, total


class StepHistogram:
    """A collector for `tfobs_step_duration_seconds`; register it on a registry."""

    def __init__(self, name: str, documentation: str, label_names: Sequence[str],
                 buckets: Sequence[float]) -> None:
        if not name.endswith("_seconds"):
            raise ValueError(f"{name}: a step histogram is in seconds")
        self.name = name
        self.documentation = documentation
        self.label_names = list(label_names)
        self.bounds = sorted(buckets)
        if self.bounds[-1] != float("inf"):
            self.bounds.append(float("inf"))
        self._series: dict[tuple[str, ...], StepSeries] = {}
        self._lock = threading.Lock()

    def labels(self, *values: str) -> StepSeries:
        key = tuple(str(v) for v in values)
        if len(key) != len(self.label_names):
            raise ValueError(f"{self.name} takes labels {self.label_names}")
        with self._lock:
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = StepSeries(self.bounds, key)
        return series

    def fold(self) -> None:
        for series in self._all():
            series.fold()

    def _all(self) -> list[StepSeries]:
        with self._lock:
            return list(self._series.values())

    def _family(self) -> HistogramMetricFamily:
        return HistogramMetricFamily(self.name, self.documentation, labels=self.label_names,
                                     unit="seconds")

    def describe(self) -> Iterator[Metric]:
        yield self._family()

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        for series in self._all():
            buckets, total = series.snapshot()
            family.add_metric(list(series.labels), buckets, total)
        yield family
