"""Scrape-time collector: turns each worker's health ledger, latest published WindowSummary
and the samplers' latest readings into metric families.

Publishing only swaps one reference per worker and the ledger is read through one locked
snapshot; all the work happens in `collect()` on the scrape thread (prometheus_client's
"collect on scrape"), so no metric object is mutated from the training or reduction threads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client import utils as _prom_utils
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.samples import Exemplar

from tfobs.export.catalog import (
    ADVICE_RULES,
    BY_NAME,
    COPY_DIRECTIONS,
    IDENTITY_LABELS,
    IDLE_CAUSES,
    INPUT_KINDS,
    METRICS,
    STEP_DURATION,
    identity_values,
)
from tfobs.health import WORK_BUCKETS, Durations, HealthLedger, HealthSnapshot
from tfobs.identity import distinct_suffix, keep_ends
from tfobs.sources.gpm import GpmFigures
from tfobs.sources.nvml import GpuSample
from tfobs.sources.tfmemory import DeviceMemorySample
from tfobs.summary import (
    CATEGORIES,
    DROP_WHATS,
    ERROR_STAGES,
    VERDICTS,
    DeviceActivity,
    WindowSummary,
)
from tfobs.window import WindowRecord

# prometheus_client's own rendering of a bucket bound ("+Inf", "0.005"), untyped there.
go_float: Callable[[float], str] = _prom_utils.floatToGoString
_log = logging.getLogger(__name__)

_ORDER = {d.family: i for i, d in enumerate(METRICS)}


# A label value from the capture (a tf.data stage's name, an allocator's) is as long as the
# job's pipeline makes it: a stage 32,000 levels deep made a 1.5 MB label on every scrape.
# Longer values keep their start and their end (the stage's own kind), joined by "...",
# 8 hex digits of the whole and "...": two names that differ only in the middle stay two
# series (cut alike, they were two samples of one series, and Prometheus kept one).
MAX_LABEL_CHARS = 256


def label_value(text: str) -> str:
    """`text`, at most MAX_LABEL_CHARS characters: its start and end where longer."""
    if len(text) <= MAX_LABEL_CHARS:
        return text
    return keep_ends(text, MAX_LABEL_CHARS, f"...{distinct_suffix(text)}...")


@dataclass(frozen=True)
class Published:
    summary: WindowSummary
    window: WindowRecord | None
    at_s: float  # Unix time of publication


_INFO_KEYS = BY_NAME["tfobs_info"].labels
_MAX_INFO_VALUE = 200


class GpuSource(Protocol):
    """What the collector reads of the NVML sampler."""

    available: bool

    def latest(self) -> tuple[GpuSample, ...]: ...


class MemorySource(Protocol):
    """What the collector reads of the TF memory sampler."""

    def latest(self) -> tuple[DeviceMemorySample, ...]: ...


@dataclass
class WorkerState:
    """One worker: its ledger (read on scrape), its samplers, and what it last published
    (`latest` is replaced whole, never edited)."""

    identity: tuple[str, ...]
    health: HealthLedger = field(default_factory=HealthLedger)
    nvml: GpuSource | None = None
    tfmemory: MemorySource | None = None
    latest: Published | None = None


class _Families:
    """Metric families created on first use, in catalog order on output."""

    def __init__(self) -> None:
        self._gauges: dict[str, GaugeMetricFamily] = {}
        self._counters: dict[str, CounterMetricFamily] = {}
        self._histograms: dict[str, HistogramMetricFamily] = {}
        self._info: InfoMetricFamily | None = None

    def add(self, name: str, ident: tuple[str, ...], labels: tuple[str, ...], value: float) -> None:
        fam = self._gauges.get(name)
        if fam is None:
            d = BY_NAME[name]
            fam = self._gauges[name] = GaugeMetricFamily(
                name, d.help, labels=[*IDENTITY_LABELS, *d.labels], unit=d.unit
            )
        fam.add_metric([*ident, *map(label_value, labels)], float(value))

    def counter(self, name: str, ident: tuple[str, ...], labels: tuple[str, ...], value: float,
                exemplar: tuple[dict[str, str], float] | None = None) -> None:
        d = BY_NAME[name]
        fam = self._counters.get(d.family)
        if fam is None:
            fam = self._counters[d.family] = CounterMetricFamily(
                d.family, d.help, labels=[*IDENTITY_LABELS, *d.labels], unit=d.unit
            )
        names = [*IDENTITY_LABELS, *d.labels]
        fam.add_sample(name, dict(zip(names, [*ident, *map(label_value, labels)], strict=True)),
                       float(value),
                       exemplar=Exemplar(exemplar[0], 1.0, exemplar[1]) if exemplar else None)

    def histogram(self, name: str, ident: tuple[str, ...], durations: Durations) -> None:
        fam = self._histograms.get(name)
        if fam is None:
            d = BY_NAME[name]
            fam = self._histograms[name] = HistogramMetricFamily(
                name, d.help, labels=list(IDENTITY_LABELS), unit=d.unit
            )
        buckets: list[tuple[str, float]] = []
        running = 0
        for le, n in zip([*WORK_BUCKETS, float("inf")], durations.counts, strict=True):
            running += n
            buckets.append((go_float(le), float(running)))
        fam.add_metric(list(ident), buckets, durations.sum_s)

    def info(self, ident: tuple[str, ...], value: dict[str, str]) -> None:
        if self._info is None:
            self._info = InfoMetricFamily(
                "tfobs", BY_NAME["tfobs_info"].help, labels=list(IDENTITY_LABELS)
            )
        self._info.add_metric(list(ident), value)

    def __iter__(self) -> Iterator[Metric]:
        fams: list[Metric] = [*self._gauges.values(), *self._counters.values(),
                              *self._histograms.values()]
        if self._info is not None:
            fams.append(self._info)
        return iter(sorted(fams, key=lambda f: _ORDER.get(f.name, 0)))


class SummaryCollector:
    """A prometheus_client custom collector over one or more workers' latest state."""

    def __init__(self) -> None:
        self._workers: dict[tuple[str, ...], WorkerState] = {}

    def worker(self, identity: dict[str, str], health: HealthLedger | None = None) -> WorkerState:
        """The worker's state, created with `health` (a fresh ledger when None) on first use."""
        key = identity_values(identity)
        state = self._workers.get(key)
        if state is None:
            state = self._workers[key] = WorkerState(identity=key,
                                                     health=health or HealthLedger())
        return state

    def workers(self) -> list[WorkerState]:
        return list(self._workers.values())

    def describe(self) -> Iterator[Metric]:
        """Every family this collector can yield, empty: the registry learns the series names,
        so `/metrics?name[]=...` (a restricted registry) finds them. The step histogram has a
        collector of its own (`step_histogram.py`)."""
        kinds = {"gauge": GaugeMetricFamily, "counter": CounterMetricFamily,
                 "histogram": HistogramMetricFamily}
        for d in METRICS:
            if d.name == STEP_DURATION:
                continue
            if d.type == "info":
                yield InfoMetricFamily(d.family, d.help, labels=list(IDENTITY_LABELS))
            else:
                yield kinds[d.type](d.family, d.help, labels=[*IDENTITY_LABELS, *d.labels],
                                    unit=d.unit)

    def collect(self) -> Iterator[Metric]:
        fams = _Families()
        for state in list(self._workers.values()):
            for part in (_health, _summary, _sources):
                try:
                    part(fams, state)
                except Exception:  # one bad figure must not fail the whole scrape
                    _log.debug("tfobs: building %s failed", part.__name__, exc_info=True)
                    state.health.count_error("export_prometheus")
        yield from fams


def _health(fams: _Families, st: WorkerState) -> None:
    ident = st.identity
    h: HealthSnapshot = st.health.snapshot()
    for outcome, n in h.windows.items():
        fams.counter("tfobs_windows_total", ident, (outcome,), n,
                     h.window_exemplars.get(outcome))
    # Every stage and every drop at 0 from the start, as the window outcomes: a series that
    # appeared with its first errors would start at their number, which increase() (and so
    # the TfobsErrorsRising alert) takes as its baseline, not as errors.
    errors: dict[str, int] = {**dict.fromkeys(ERROR_STAGES, 0), **h.errors}
    dropped: dict[str, int] = {**dict.fromkeys(DROP_WHATS, 0), **h.dropped}
    for stage, n in sorted(errors.items()):
        fams.counter("tfobs_errors_total", ident, (stage,), n)
    for what, n in sorted(dropped.items()):
        fams.counter("tfobs_dropped_total", ident, (what,), n)
    for cause, n in sorted(h.cut.items()):
        fams.counter("tfobs_windows_cut_total", ident, (cause,), n)
    for at, n in sorted(h.window_ends.items()):
        fams.counter("tfobs_window_ends_total", ident, (at,), n)
    if h.window_ends:
        for part, seconds in sorted(h.window_end_s.items()):
            fams.counter("tfobs_window_end_seconds_total", ident, (part,), seconds)
    fams.histogram("tfobs_capture_duration_seconds", ident, h.capture_s)
    fams.histogram("tfobs_reduce_duration_seconds", ident, h.reduce_s)
    fams.counter("tfobs_capture_bytes_total", ident, (), h.capture_bytes)
    if h.duty_cycle_ratio is not None and h.overhead_ratio is not None:
        fams.add("tfobs_profiler_duty_cycle_ratio", ident, (), h.duty_cycle_ratio)
        fams.add("tfobs_estimated_overhead_ratio", ident, (), h.overhead_ratio)
    if st.latest is not None:
        fams.add("tfobs_last_window_timestamp_seconds", ident, (), st.latest.at_s)
    if h.export_step_stretch is not None and h.next_window_steps is not None:
        fams.add("tfobs_export_step_stretch", ident, (), h.export_step_stretch)
        fams.add("tfobs_next_window_steps", ident, (), h.next_window_steps)
    if h.kept_last is not None:
        fams.counter("tfobs_kept_captures_total", ident, (), h.kept)
        fams.add("tfobs_kept_capture_window", ident, (), h.kept_last.index)
        fams.add("tfobs_kept_capture_timestamp_seconds", ident, (), h.kept_last.at_s)
        fams.add("tfobs_kept_bytes", ident, (), h.kept_bytes)
    available = st.nvml is not None and st.nvml.available
    fams.add("tfobs_nvml_available", ident, (), 1.0 if available else 0.0)
    gpm = available and bool(getattr(st.nvml, "gpm_available", False))
    fams.add("tfobs_gpm_available", ident, (), 1.0 if gpm else 0.0)
    fams.info(ident, {k: str(h.info.get(k, ""))[:_MAX_INFO_VALUE] for k in _INFO_KEYS})


def _summary(fams: _Families, st: WorkerState) -> None:
    if st.latest is None:
        return
    s = st.latest.summary
    ident = st.identity
    add = fams.add
    steps = s.steps.count if s.steps.count > 0 else 1  # "per step" falls back to per window
    add("tfobs_window_steps", ident, (), s.steps.count)
    first, last = _window_steps(st.latest)
    if first >= 0:
        add("tfobs_window_first_step", ident, (), first)
        add("tfobs_window_last_step", ident, (), last)
    add("tfobs_window_step_time_seconds", ident, (), s.steps.mean_s)
    add("tfobs_window_step_interval_seconds", ident, (), s.steps.interval_s)
    add("tfobs_window_outside_steps_ratio", ident, (), s.steps.outside_ratio)
    add("tfobs_window_input_between_steps_ratio", ident, (),
        s.steps.input_between_s / s.steps.interval_s if s.steps.interval_s > 0 else 0.0)
    add("tfobs_window_tfdata_next_ratio", ident, (),
        s.steps.python_tfdata_next_s / s.steps.mean_s if s.steps.mean_s > 0 else 0.0)
    ratios = s.breakdown_ratio
    for cat in CATEGORIES:
        add("tfobs_step_time_breakdown_seconds", ident, (cat,), s.breakdown_s.get(cat, 0.0))
        add("tfobs_step_time_breakdown_ratio", ident, (cat,), ratios.get(cat, 0.0))
    add("tfobs_input_bound_ratio", ident, (), s.input_bound.ratio)
    for verdict in VERDICTS:
        add("tfobs_input_bound_verdict", ident, (verdict,), verdict == s.input_bound.verdict)
    add("tfobs_device_compute_16bit_ratio", ident, (), s.device_compute_16bit_ratio)
    host_input = s.input_pipeline.host_input_s
    for kind in INPUT_KINDS:
        add("tfobs_input_host_seconds", ident, (kind,), host_input.get(kind, 0.0))
    slowest = s.input_pipeline.slowest_stage
    if slowest is not None:
        add("tfobs_tfdata_slowest_stage_seconds", ident, (slowest.name,), slowest.self_s / steps)
    add("tfobs_op_time_host_ratio", ident, (), s.ops.host_ratio)
    _advice(add, ident, s)
    for dev in s.devices:
        _device(fams, ident, dev, steps)
    k = s.kernels
    if k.total_s > 0:
        add("tfobs_tensor_core_kernel_ratio", ident, (), k.tensor_core_s / k.total_s)
        unused = max(k.eligible_op_s - k.eligible_op_tensor_core_s, 0.0)
        add("tfobs_tensor_core_eligible_op_seconds", ident, (), k.eligible_op_s / steps)
        add("tfobs_tensor_core_eligible_unused_seconds", ident, (), unused / steps)
        add("tfobs_tensor_core_eligible_unused_ratio", ident, (),
            unused / k.eligible_op_s if k.eligible_op_s > 0 else 0.0)
    for mem in s.memory:
        labels = (mem.allocator,)
        add("tfobs_memory_peak_bytes", ident, labels, mem.peak_bytes)
        add("tfobs_memory_capacity_bytes", ident, labels, mem.capacity_bytes)
        add("tfobs_memory_fragmentation_ratio", ident, labels, mem.fragmentation_ratio)


def _window_steps(latest: Published) -> tuple[int, int]:
    """First and last step number of the window: as the runtime marked them, else the
    capture's own step numbers (a replayed capture); (-1, -1) when neither has any."""
    window = latest.window
    if window is not None and window.first_step >= 0:
        return window.first_step, window.last_step
    # The first and last steps in time: step numbers may restart (an epoch's batch index).
    items = sorted(latest.summary.steps.items, key=lambda st: st.start_ns)
    return (items[0].step_num, items[-1].step_num) if items else (-1, -1)


def _advice(add: Callable[..., None], ident: tuple[str, ...], s: WindowSummary) -> None:
    """Every rule id, 1 where the rule fired: a series per rule, whether it fired or not."""
    active = {a.code for a in s.advice}
    for rule in ADVICE_RULES:
        add("tfobs_advice_active", ident, (rule,), rule in active)


def _device(fams: _Families, ident: tuple[str, ...], d: DeviceActivity, steps: int) -> None:
    add = fams.add
    dev = (d.device,)
    span = d.span_s
    add("tfobs_gpu_busy_ratio", ident, dev, d.busy_s / span if span > 0 else 0.0)
    for cause in IDLE_CAUSES:
        idle = d.idle_s.get(cause, 0.0)
        add("tfobs_gpu_idle_ratio", ident, (*dev, cause), idle / span if span > 0 else 0.0)
    add("tfobs_kernel_launch_delay_seconds", ident, (*dev, "mean"), d.launch_delay_mean_s)
    add("tfobs_kernel_launch_delay_seconds", ident, (*dev, "p95"), d.launch_delay_p95_s)
    add("tfobs_kernels_per_step", ident, dev, d.kernel_count / steps)
    add("tfobs_kernel_mean_duration_seconds", ident, dev, d.mean_kernel_s)
    add("tfobs_small_kernel_ratio", ident, dev, d.small_kernel_ratio)
    for direction in COPY_DIRECTIONS:
        add("tfobs_memcpy_seconds", ident, (*dev, direction), d.copy_s.get(direction, 0.0))
        add("tfobs_memcpy_bytes", ident, (*dev, direction), d.copy_bytes.get(direction, 0.0))
    add("tfobs_collective_seconds", ident, dev, d.collective_s)


def _sources(fams: _Families, st: WorkerState) -> None:
    ident = st.identity
    if st.nvml is not None and st.nvml.available:
        for g in st.nvml.latest():
            lab = (g.device, g.uuid)
            fams.add("tfobs_gpu_utilization_ratio", ident, lab, g.utilization_ratio)
            fams.add("tfobs_gpu_memory_used_bytes", ident, lab, g.memory_used_bytes)
            fams.add("tfobs_gpu_memory_total_bytes", ident, lab, g.memory_total_bytes)
            fams.add("tfobs_gpu_power_watts", ident, lab, g.power_watts)
            fams.add("tfobs_gpu_temperature_celsius", ident, lab, g.temperature_celsius)
            fams.add("tfobs_gpu_sm_clock_hertz", ident, lab, g.sm_clock_hertz)
            fams.add("tfobs_gpu_memory_clock_hertz", ident, lab, g.memory_clock_hertz)
            for reason in g.throttle_reasons:
                fams.add("tfobs_gpu_throttle_active", ident, (*lab, reason), 1.0)
            if g.gpm is not None:
                _gpm(fams, ident, lab, g.gpm)
    if st.tfmemory is not None:
        for m in st.tfmemory.latest():
            fams.add("tfobs_device_memory_bytes", ident, (m.device,), m.current_bytes)
            fams.add("tfobs_device_memory_peak_bytes", ident, (m.device,), m.peak_bytes)


def _gpm(fams: _Families, ident: tuple[str, ...], lab: tuple[str, str], g: GpmFigures) -> None:
    """The GPU's own counters; a figure the GPU did not report (NaN) is left out."""
    def add(name: str, labels: tuple[str, ...], value: float) -> None:
        if value == value:  # not NaN
            fams.add(name, ident, labels, value)

    add("tfobs_gpu_tensor_active_ratio", lab, g.tensor_active_ratio)
    for pipe, value in g.tensor_pipe_ratio:
        add("tfobs_gpu_tensor_pipe_active_ratio", (*lab, pipe), value)
    add("tfobs_gpu_sm_active_ratio", lab, g.sm_active_ratio)
    add("tfobs_gpu_sm_occupancy_ratio", lab, g.sm_occupancy_ratio)
    add("tfobs_gpu_dram_bandwidth_ratio", lab, g.dram_bandwidth_ratio)
    for pipe, value in g.math_pipe_ratio:
        add("tfobs_gpu_math_pipe_active_ratio", (*lab, pipe), value)
