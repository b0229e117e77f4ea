"""Every metric tfobs exports: name, type, labels beyond the worker identity, help text.

One list, read by the collector (HELP text), the metrics table in docs/metrics.md and the
tests, so a name cannot drift between them. Units are the name's suffix (Prometheus conventions).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tfobs.summary import COPY_DIRECTIONS, IDLE_CAUSES, INPUT_KINDS, RULE_IDS

__all__ = [
    "ADVICE_RULES", "BY_NAME", "COPY_DIRECTIONS", "IDENTITY_LABELS", "IDLE_CAUSES",
    "INPUT_KINDS", "METRICS", "RESERVED_LABELS", "STEP_DURATION", "MetricDef",
    "identity_values", "markdown_table",
]

# Every series carries the worker identity (config.worker_identity: TF_CONFIG's task type and
# index, or the tf_job/tf_task options; a hash of TF_CONFIG's cluster; the local rank).
IDENTITY_LABELS: tuple[str, ...] = ("tf_job", "tf_task", "tf_cluster", "local_rank")
_IDENTITY_DEFAULTS = {"tf_job": "local", "tf_task": "0", "tf_cluster": "none", "local_rank": "0"}


def identity_values(identity: dict[str, str]) -> tuple[str, ...]:
    """The identity labels' values in IDENTITY_LABELS order (defaults for missing ones)."""
    return tuple(str(identity.get(k, _IDENTITY_DEFAULTS[k])) for k in IDENTITY_LABELS)


# The advice rule ids: a fixed set, so `tfobs_advice_active{rule}` stays bounded.
ADVICE_RULES: tuple[str, ...] = RULE_IDS

# Label names a scrape target's own labels would clash with (Prometheus renames them
# `exported_*`), so tfobs never emits them.
RESERVED_LABELS: frozenset[str] = frozenset(
    {"pod", "namespace", "container", "instance", "job", "le", "quantile", *IDENTITY_LABELS}
)


MetricType = Literal["counter", "gauge", "histogram", "info"]
_UNITS = ("seconds", "bytes", "ratio", "watts", "celsius", "hertz")


@dataclass(frozen=True)
class MetricDef:
    name: str  # as exposed (counters end in _total)
    type: MetricType
    labels: tuple[str, ...]  # beyond the identity labels
    help: str

    @property
    def unit(self) -> str:
        base = self.name.removesuffix("_total")
        return next((u for u in _UNITS if base.endswith("_" + u)), "")

    @property
    def family(self) -> str:
        """The OpenMetrics family name (counters without `_total`, info without `_info`)."""
        if self.type == "counter":
            return self.name.removesuffix("_total")
        if self.type == "info":
            return self.name.removesuffix("_info")
        return self.name


def _m(name: str, typ: MetricType, labels: tuple[str, ...], help_text: str) -> MetricDef:
    clash = RESERVED_LABELS.intersection(labels)
    if clash:  # e.g. `quantile` is a summary's label: promtool rejects it on a gauge
        raise ValueError(f"{name}: label(s) {sorted(clash)} are reserved")
    return MetricDef(name, typ, labels, help_text)


_DEV = ("device",)
_NVML = ("device", "gpu_uuid")

STEP_DURATION = "tfobs_step_duration_seconds"  # the one series not built from summaries

METRICS: tuple[MetricDef, ...] = (
    # Every step.
    _m(STEP_DURATION, "histogram", (),
       "Duration of every training step in seconds; while a profile window is open its "
       "samples carry exemplars (trace_id, span_id) of the window's trace."),
    # Latest profile window.
    _m("tfobs_window_steps", "gauge", (), "Steps in the latest profile window."),
    _m("tfobs_window_first_step", "gauge", (),
       "Step number of the latest profile window's first step (windows are aligned to step "
       "numbers, so the workers of a synchronous job show the same)."),
    _m("tfobs_window_last_step", "gauge", (),
       "Step number of the latest profile window's last step."),
    _m("tfobs_window_step_time_seconds", "gauge", (),
       "Mean step time of the latest profile window in seconds."),
    _m("tfobs_window_step_interval_seconds", "gauge", (),
       "Mean time from one step's start to the next in the latest profile window, in seconds "
       "(0 with fewer than two consecutive steps)."),
    _m("tfobs_window_outside_steps_ratio", "gauge", (),
       "Share of the step interval that no step covers (0..1), latest window: Keras callbacks "
       "after the step marker closed, Python between steps. Step time and the breakdown "
       "leave this time out."),
    _m("tfobs_window_input_between_steps_ratio", "gauge", (),
       "Share of the step interval (0..1) spent waiting for input (IteratorGetNext) between "
       "the step markers, latest window: a batch fetched outside the marked step, which the "
       "breakdown and tfobs_input_bound_ratio do not count."),
    _m("tfobs_window_tfdata_next_ratio", "gauge", (),
       "Share of step time (0..1) spent inside a tf.data iterator's next() where the capture "
       "holds no tf.data op, latest window: a JAX job fed by tf.data, whose wait XProf's "
       "breakdown and tfobs_input_bound_ratio count as 'other' (or host compute), not input."),
    _m("tfobs_step_time_breakdown_seconds", "gauge", ("category",),
       "Mean time per step in each step-time category (XProf's breakdown) in seconds, "
       "latest window."),
    _m("tfobs_step_time_breakdown_ratio", "gauge", ("category",),
       "Share of step time in each category (0..1), latest window."),
    _m("tfobs_input_bound_ratio", "gauge", (),
       "Share of step time spent waiting for input (0..1), latest window."),
    _m("tfobs_input_bound_verdict", "gauge", ("verdict",),
       "1 for the latest window's input-bound verdict (highly, moderately, potentially, not, "
       "unknown), 0 for the others."),
    _m("tfobs_device_compute_16bit_ratio", "gauge", (),
       "Share of device compute time in 16-bit ops (0..1), latest window."),
    _m("tfobs_input_host_seconds", "gauge", ("kind",),
       "Host input time per step in seconds by kind (demanded_file_read, advanced_file_read, "
       "preprocessing, enqueue, unclassified), latest window."),
    _m("tfobs_tfdata_slowest_stage_seconds", "gauge", ("stage",),
       "Self time per step in seconds of the slowest tf.data stage (named by `stage`; "
       "`[*]` in it: an interleave's cycle elements or a repeat's epochs together), "
       "latest window."),
    _m("tfobs_op_time_host_ratio", "gauge", (),
       "Share of op time spent on the host rather than a device (0..1), latest window."),
    _m("tfobs_advice_active", "gauge", ("rule",),
       "1 for each advice rule that fired in the latest window, 0 for every other rule "
       "(`rule`: one of the fixed rule ids in the advice table, docs/advice.md)."),
    # Per GPU, latest window.
    _m("tfobs_gpu_busy_ratio", "gauge", _DEV,
       "Share of the window the GPU ran kernels, overlapping kernels merged (0..1)."),
    _m("tfobs_gpu_idle_ratio", "gauge", (*_DEV, "cause"),
       "Share of the window the GPU was idle (0..1) by cause: kernel_launch (waiting for the "
       "host to launch), input (waiting while the host waited for input), short_gap (gaps "
       "under short_gap_s), other."),
    _m("tfobs_kernel_launch_delay_seconds", "gauge", (*_DEV, "stat"),
       "Kernel start minus the end of its launch call in seconds, mean and p95, latest window."),
    _m("tfobs_kernels_per_step", "gauge", _DEV,
       "Kernels run per step (per window when the capture has no steps), latest window."),
    _m("tfobs_kernel_mean_duration_seconds", "gauge", _DEV,
       "Mean kernel duration in seconds, latest window."),
    _m("tfobs_small_kernel_ratio", "gauge", _DEV,
       "Share of kernels shorter than their launch overhead (0..1), latest window."),
    _m("tfobs_memcpy_seconds", "gauge", (*_DEV, "direction"),
       "Copy time per step in seconds by direction (h2d, d2h, d2d), latest window."),
    _m("tfobs_memcpy_bytes", "gauge", (*_DEV, "direction"),
       "Bytes copied per step by direction (h2d, d2h, d2d), latest window."),
    _m("tfobs_collective_seconds", "gauge", _DEV,
       "Collective communication (NCCL/RCCL) time per step in seconds, latest window."),
    # Tensor Cores, window-wide.
    _m("tfobs_tensor_core_kernel_ratio", "gauge", (),
       "Share of kernel time in Tensor Core kernels (0..1), latest window."),
    _m("tfobs_tensor_core_eligible_op_seconds", "gauge", (),
       "Time per step in seconds in ops eligible for Tensor Cores (per window when the "
       "capture has no steps), latest window."),
    _m("tfobs_tensor_core_eligible_unused_seconds", "gauge", (),
       "Time per step in seconds in Tensor Core eligible ops that did not use Tensor Cores "
       "(per window when the capture has no steps), latest window."),
    _m("tfobs_tensor_core_eligible_unused_ratio", "gauge", (),
       "Share of Tensor Core eligible op time that did not use Tensor Cores (0..1), "
       "latest window."),
    # Memory from the capture, per allocator.
    _m("tfobs_memory_peak_bytes", "gauge", ("allocator",),
       "Peak bytes in use by the allocator during the latest window."),
    _m("tfobs_memory_capacity_bytes", "gauge", ("allocator",),
       "Allocator capacity in bytes, latest window."),
    _m("tfobs_memory_fragmentation_ratio", "gauge", ("allocator",),
       "Allocator fragmentation at the peak (0..1), latest window."),
    # tf.config.experimental.get_memory_info, between windows.
    _m("tfobs_device_memory_bytes", "gauge", _DEV,
       "Bytes in use on the device now (TensorFlow's memory info)."),
    _m("tfobs_device_memory_peak_bytes", "gauge", _DEV,
       "Peak bytes in use on the device since start (TensorFlow's memory info)."),
    # NVML.
    _m("tfobs_nvml_available", "gauge", (),
       "1 when the NVML sampler reads GPUs, 0 when NVML or a GPU is missing."),
    _m("tfobs_gpu_utilization_ratio", "gauge", _NVML,
       "GPU utilization reported by NVML (0..1)."),
    _m("tfobs_gpu_memory_used_bytes", "gauge", _NVML, "GPU memory in use in bytes (NVML)."),
    _m("tfobs_gpu_memory_total_bytes", "gauge", _NVML, "GPU memory in total in bytes (NVML)."),
    _m("tfobs_gpu_power_watts", "gauge", _NVML, "GPU power draw in watts (NVML)."),
    _m("tfobs_gpu_temperature_celsius", "gauge", _NVML,
       "GPU temperature in degrees Celsius (NVML)."),
    _m("tfobs_gpu_sm_clock_hertz", "gauge", _NVML, "GPU SM clock in hertz (NVML)."),
    _m("tfobs_gpu_memory_clock_hertz", "gauge", _NVML, "GPU memory clock in hertz (NVML)."),
    _m("tfobs_gpu_throttle_active", "gauge", (*_NVML, "reason"),
       "1 for each clock throttle reason NVML reports active."),
    # NVML GPU Performance Monitoring (Hopper and newer), over the last sampling interval.
    _m("tfobs_gpm_available", "gauge", (),
       "1 when NVML's GPU Performance Monitoring (GPM) counters are read for at least one "
       "GPU, 0 where none has them (pre-Hopper, a MIG instance without GPM, an older driver "
       "or nvidia-ml-py; the log says why once)."),
    _m("tfobs_gpu_tensor_active_ratio", "gauge", _NVML,
       "Share of time the GPU's SMs ran any Tensor Core instruction (0..1), counted by the "
       "hardware (NVML GPM) over the last sampling interval; beside it "
       "tfobs_tensor_core_kernel_ratio is the share by kernel names. GPM counts every "
       "process on the GPU, not only this job."),
    _m("tfobs_gpu_tensor_pipe_active_ratio", "gauge", (*_NVML, "pipe"),
       "Share of time the GPU's SMs ran Tensor Core instructions of one kind (0..1), NVML "
       "GPM over the last sampling interval: hmma (fp16, bf16, tf32, fp8), imma (integer), "
       "dfma and dmma (fp64), those the GPU reports. Counts every process on the GPU."),
    _m("tfobs_gpu_sm_active_ratio", "gauge", _NVML,
       "Share of SMs busy (0..1), NVML GPM over the last sampling interval; counts every "
       "process on the GPU."),
    _m("tfobs_gpu_sm_occupancy_ratio", "gauge", _NVML,
       "Active warps against the SMs' maximum (0..1), NVML GPM over the last sampling "
       "interval; counts every process on the GPU."),
    _m("tfobs_gpu_dram_bandwidth_ratio", "gauge", _NVML,
       "DRAM bandwidth used against its maximum (0..1), NVML GPM over the last sampling "
       "interval; counts every process on the GPU."),
    _m("tfobs_gpu_math_pipe_active_ratio", "gauge", (*_NVML, "pipe"),
       "Share of time the GPU's SMs ran non-tensor math of one kind (0..1), NVML GPM over "
       "the last sampling interval: fp16, fp32, fp64, integer. Counts every process on the "
       "GPU."),
    # tfobs's own health.
    _m("tfobs_windows_total", "counter", ("outcome",),
       "Profile windows by outcome (captured, skipped_busy, skipped_budget, empty, "
       "dropped_too_large, failed); exemplars point at the window's trace."),
    _m("tfobs_errors_total", "counter", ("stage",), "Errors inside tfobs by stage."),
    _m("tfobs_dropped_total", "counter", ("what",),
       "Items tfobs dropped to bound its memory or time (window, spans, keep, "
       "late_rendering: a scrape answered with the previous rendering)."),
    _m("tfobs_windows_cut_total", "counter", ("cause",),
       "Windows closed before their planned steps to bound what they cost: time (the cap "
       "learned from earlier captures), live_bytes (the trace's own memory), rss."),
    _m("tfobs_window_ends_total", "counter", ("at",),
       "Windows whose tracing was stopped, by where: step_boundary or train_end (on the "
       "training thread, after its device work drained: cannot race the job's kernels or "
       "collectives), steps_open (at a step boundary while another thread's step ran: "
       "threads whose steps always overlap), capture_thread (no step came to end it; the "
       "job had stopped stepping)."),
    _m("tfobs_window_end_seconds_total", "counter", ("part",),
       "Training-thread seconds spent ending windows, by part: drain (waiting for the "
       "job's queued device work), stop (the profiler's stop and collection). Charged to "
       "the overhead budget."),
    _m("tfobs_capture_duration_seconds", "histogram", (),
       "Time to hand one capture on after tracing stopped (write or read) in seconds."),
    _m("tfobs_reduce_duration_seconds", "histogram", (),
       "Time to reduce one capture to a summary in seconds."),
    _m("tfobs_capture_bytes_total", "counter", (), "Bytes of captures read back."),
    _m("tfobs_profiler_duty_cycle_ratio", "gauge", (),
       "Measured share of wall time the profiler was on (0..1)."),
    _m("tfobs_estimated_overhead_ratio", "gauge", (),
       "Estimated share of training time tfobs costs (0..1)."),
    _m("tfobs_last_window_timestamp_seconds", "gauge", (),
       "Unix time in seconds when the latest window's summary was published."),
    _m("tfobs_export_step_stretch", "gauge", (),
       "The longest step that overlapped the latest measured window export, as a multiple "
       "of the median step before the window (1 = not slowed)."),
    _m("tfobs_next_window_steps", "gauge", (),
       "Steps the next window will trace: window_steps, or fewer where exports slowed "
       "steps beyond export_step_stretch."),
    # Kept captures (keep_dir, tfobs/runtime/keep.py).
    _m("tfobs_kept_captures_total", "counter", (),
       "Windows whose capture was kept in keep_dir (TensorBoard's layout)."),
    _m("tfobs_kept_capture_window", "gauge", (),
       "Index of the latest kept window; its span's tfobs.window.kept_path and the overview "
       "page name the file."),
    _m("tfobs_kept_capture_timestamp_seconds", "gauge", (),
       "Unix time in seconds when the latest kept capture was written."),
    _m("tfobs_kept_bytes", "gauge", (),
       "Bytes of kept captures this worker holds in keep_dir (at most keep_max_bytes)."),
    _m("tfobs_info", "info", ("version", "tensorflow_version", "jax_version", "framework",
                           "python_version", "devices"),
       "tfobs, TensorFlow and Python versions and devices of this worker (value 1)."),
)

BY_NAME: dict[str, MetricDef] = {m.name: m for m in METRICS}


def markdown_table() -> str:
    """The metrics table of docs/metrics.md."""
    rows = ["| Metric | Type | Labels | Unit | Meaning |", "|---|---|---|---|---|"]
    for m in METRICS:
        labels = ", ".join(f"`{label}`" for label in (*IDENTITY_LABELS, *m.labels))
        if m.type == "info":
            labels += ", ..."
        rows.append(f"| `{m.name}` | {m.type} | {labels} | {m.unit or '-'} | {m.help} |")
    return "\n".join(rows)
