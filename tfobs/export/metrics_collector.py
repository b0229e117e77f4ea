"""Scrape-time collector: turns the latest published WindowSummary (and the samplers' latest
readings) into metric families.

Publishing only swaps one reference per worker; all the work happens in `collect()` on the
scrape thread, so nothing here is mutated from the training or reduction threads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.metrics_core import GaugeMetricFamily, InfoMetricFamily, Metric

from tfobs.export.catalog import (
    ADVICE_RULES,
    BY_NAME,
    COPY_DIRECTIONS,
    IDENTITY_LABELS,
    IDLE_CAUSES,
    INPUT_KINDS,
    METRICS,
)
from tfobs.summary import CATEGORIES, VERDICTS, WindowSummary
from tfobs.window import WindowRecord

log = logging.getLogger(__name__)

_ORDER = {d.family: i for i, d in enumerate(METRICS)}


@dataclass(frozen=True)
class Published:
    summary: WindowSummary
    window: WindowRecord | None
    at_s: float  # Unix time of publication


@dataclass
class WorkerState:
    """What one worker last published; each attribute is replaced whole, never edited."""

    identity: tuple[str, ...]
    latest: Published | None = None
    cost: tuple[float, float] | None = None  # duty cycle, estimated overhead
    info: dict[str, str] = field(default_factory=dict)
    nvml: Any = None  # object with .latest() -> tuple[GpuSample, ...] and .available
    tfmemory: Any = None  # object with .latest() -> tuple[DeviceMemorySample, ...]


class _Families:
    """Metric families created on first use, in catalog order on output."""

    def __init__(self) -> None:
        self._fams: dict[str, Metric] = {}

    def add(self, name: str, ident: tuple[str, ...], labels: tuple[str, ...], value: float) -> None:
        fam = self._fams.get(name)
        if fam is None:
            d = BY_NAME[name]
            fam = self._fams[name] = GaugeMetricFamily(
                name, d.help, labels=[*IDENTITY_LABELS, *d.labels], unit=d.unit
            )
        fam.add_metric([*ident, *labels], float(value))

    def info(self, ident: tuple[str, ...], value: dict[str, str]) -> None:
        fam = self._fams.get("tfobs_info")
        if fam is None:
            fam = self._fams["tfobs_info"] = InfoMetricFamily(
                "tfobs", BY_NAME["tfobs_info"].help, labels=list(IDENTITY_LABELS)
            )
        fam.add_metric(list(ident), value)

    def __iter__(self) -> Iterator[Metric]:
        return iter(sorted(self._fams.values(), key=lambda f: _ORDER.get(f.name, 0)))


class SummaryCollector:
    """A prometheus_client custom collector over one or more workers' latest state."""

    def __init__(self, on_error: Callable[[str], None] | None = None) -> None:
        self._workers: dict[tuple[str, ...], WorkerState] = {}
        self._on_error = on_error

    def worker(self, identity: dict[str, str]) -> WorkerState:
        key = tuple(identity[k] for k in IDENTITY_LABELS)
        state = self._workers.get(key)
        if state is None:
            state = self._workers[key] = WorkerState(identity=key)
        return state

    def workers(self) -> list[WorkerState]:
        return list(self._workers.values())

    def collect(self) -> Iterator[Metric]:
        fams = _Families()
        for state in list(self._workers.values()):
            for part in (_health, _summary, _sources):
                try:
                    part(fams, state)
                except Exception:  # one bad figure must not fail the whole scrape
                    log.debug("tfobs: building %s failed", part.__name__, exc_info=True)
                    if self._on_error is not None:
                        self._on_error("export_prometheus")
        yield from fams


def _health(fams: _Families, st: WorkerState) -> None:
    ident = st.identity
    if st.cost is not None:
        fams.add("tfobs_profiler_duty_cycle_ratio", ident, (), st.cost[0])
        fams.add("tfobs_estimated_overhead_ratio", ident, (), st.cost[1])
    if st.latest is not None:
        fams.add("tfobs_last_window_timestamp_seconds", ident, (), st.latest.at_s)
    nvml = st.nvml
    fams.add("tfobs_nvml_available", ident, (), 1.0 if getattr(nvml, "available", False) else 0.0)
    fams.info(ident, st.info)


def _summary(fams: _Families, st: WorkerState) -> None:
    if st.latest is None:
        return
    s = st.latest.summary
    ident = st.identity
    add = fams.add
    steps = s.steps.count if s.steps.count > 0 else 1  # "per step" falls back to per window
    add("tfobs_window_steps", ident, (), s.steps.count)
    add("tfobs_window_step_time_seconds", ident, (), s.steps.mean_s)
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


def _advice(add: Callable[..., None], ident: tuple[str, ...], s: WindowSummary) -> None:
    """Every rule id, 1 where the rule fired: a series per rule, whether it fired or not."""
    active = {a.code for a in s.advice}
    for rule in ADVICE_RULES:
        add("tfobs_advice_active", ident, (rule,), rule in active)


def _device(fams: _Families, ident: tuple[str, ...], d: Any, steps: int) -> None:
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
    if st.nvml is not None and getattr(st.nvml, "available", False):
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
    if st.tfmemory is not None:
        for m in st.tfmemory.latest():
            fams.add("tfobs_device_memory_bytes", ident, (m.device,), m.current_bytes)
            fams.add("tfobs_device_memory_peak_bytes", ident, (m.device,), m.peak_bytes)
