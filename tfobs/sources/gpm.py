"""NVML GPU Performance Monitoring (GPM): the GPU's own activity counters, Hopper and newer.

Tensor Core names in a capture cannot say whether the tensor pipes were busy; GPM counts it
in the hardware. Per GPU the reader keeps two GPM samples (allocated once, freed at close)
and takes one per sampler tick; the figures come from the pair (the previous tick's sample
and this one), so each tick covers the whole interval since the last. Read from inside the
job's own process: no root, no DCGM, no profiling module. GPM counts every process on the
GPU, not only this one.

Where a GPU has no GPM (pre-Hopper, a MIG instance NVML cannot sample, a driver or
nvidia-ml-py without the API) the reader says why once and leaves that GPU out; a failed
read while running is counted (`count_error`), never raised.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tfobs.once import OncePer

_log = logging.getLogger(__name__)

TENSOR_PIPES: tuple[str, ...] = ("hmma", "imma", "dfma", "dmma")
MATH_PIPES: tuple[str, ...] = ("fp16", "fp32", "fp64", "integer")

# Figure key -> (pynvml constant, its value in nvml.h, for a pynvml that lacks the name).
METRICS: dict[str, tuple[str, int]] = {
    "tensor_any": ("NVML_GPM_METRIC_ANY_TENSOR_UTIL", 5),
    "tensor_hmma": ("NVML_GPM_METRIC_HMMA_TENSOR_UTIL", 7),
    "tensor_imma": ("NVML_GPM_METRIC_IMMA_TENSOR_UTIL", 9),
    "tensor_dfma": ("NVML_GPM_METRIC_DFMA_TENSOR_UTIL", 6),
    "tensor_dmma": ("NVML_GPM_METRIC_DMMA_TENSOR_UTIL", 8),
    "sm_active": ("NVML_GPM_METRIC_SM_UTIL", 2),
    "sm_occupancy": ("NVML_GPM_METRIC_SM_OCCUPANCY", 3),
    "dram_bandwidth": ("NVML_GPM_METRIC_DRAM_BW_UTIL", 10),
    "pipe_fp16": ("NVML_GPM_METRIC_FP16_UTIL", 13),
    "pipe_fp32": ("NVML_GPM_METRIC_FP32_UTIL", 12),
    "pipe_fp64": ("NVML_GPM_METRIC_FP64_UTIL", 11),
    "pipe_integer": ("NVML_GPM_METRIC_INTEGER_UTIL", 4),
}

_logged = OncePer()  # reasons already logged in this process (a few at most)


@dataclass(frozen=True)
class GpmFigures:
    """One GPU over one sampling interval; ratios 0..1, NaN where the GPU did not report."""

    tensor_active_ratio: float  # any tensor pipe
    tensor_pipe_ratio: tuple[tuple[str, float], ...]  # (pipe, ratio), pipes it reported
    sm_active_ratio: float
    sm_occupancy_ratio: float
    dram_bandwidth_ratio: float
    math_pipe_ratio: tuple[tuple[str, float], ...]  # non-tensor fp16/fp32/fp64/integer
    interval_s: float


def figures_from(values: dict[str, float], interval_s: float) -> GpmFigures:
    """GpmFigures from GPM's percentages by figure key (missing keys: not reported)."""
    def ratio(key: str) -> float:
        v = values.get(key, math.nan)
        return min(max(v / 100.0, 0.0), 1.0) if math.isfinite(v) else math.nan

    return GpmFigures(
        tensor_active_ratio=ratio("tensor_any"),
        tensor_pipe_ratio=tuple((p, ratio(f"tensor_{p}")) for p in TENSOR_PIPES
                                if f"tensor_{p}" in values),
        sm_active_ratio=ratio("sm_active"),
        sm_occupancy_ratio=ratio("sm_occupancy"),
        dram_bandwidth_ratio=ratio("dram_bandwidth"),
        math_pipe_ratio=tuple((p, ratio(f"pipe_{p}")) for p in MATH_PIPES
                              if f"pipe_{p}" in values),
        interval_s=interval_s,
    )


class _Device:
    """One GPU's two samples and the request structure, allocated once."""

    def __init__(self, nvml: Any, handle: Any, mig: tuple[Any, int] | None) -> None:
        self.handle = handle
        self.mig = mig  # (parent handle, GPU instance id) of a MIG instance
        self.samples: list[Any] = []
        for _ in range(2):
            self.samples.append(nvml.nvmlGpmSampleAlloc())
        self.request = nvml.c_nvmlGpmMetricsGet_t()
        self.previous = -1  # index of the sample that holds the previous tick, -1: none
        self.previous_t = 0.0


class GpmReader:
    """GPM for the sampler's GPUs. `open` once after nvmlInit, `read` each tick, `close`."""

    def __init__(self, nvml: Any, count_error: Callable[[], None]) -> None:
        self._nvml = nvml
        self._count_error = count_error
        self._devices: dict[str, _Device] = {}  # by device label
        self._ids: list[tuple[str, int]] = []
        self.available = False
        self.unavailable_reason = "not started"

    def open(self, handles: list[tuple[int, str, Any]]) -> None:
        """Check each GPU and allocate its samples; say once why one is left out."""
        nvml = self._nvml
        if not hasattr(nvml, "nvmlGpmQueryDeviceSupport"):
            self._off("this nvidia-ml-py has no GPM API (pip install -U nvidia-ml-py)")
            return
        self._ids = [(key, int(getattr(nvml, const, fallback)))
                     for key, (const, fallback) in METRICS.items()]
        reasons: list[str] = []
        for _index, device, handle in handles:
            try:
                mig = _mig_parent(nvml, handle)
                support = nvml.nvmlGpmQueryDeviceSupport(mig[0] if mig else handle)
                if not getattr(support, "isSupportedDevice", 0):
                    reasons.append(f"{device}: {_name(nvml, handle)} has no GPM "
                                   "(NVML GPM needs a Hopper or newer data-center GPU)")
                    continue
                self._devices[device] = _Device(nvml, handle, mig)
            except Exception as exc:
                reasons.append(f"{device}: {_reason(exc)}")
        if reasons:
            self._say("; ".join(reasons))
        if self._devices:
            self.available = True
            self.unavailable_reason = ""
        else:
            self.available = False
            self.unavailable_reason = "; ".join(reasons) or "no GPU"

    def read(self, device: str) -> GpmFigures | None:
        """Take this tick's sample for `device`; the figures since the previous one (None on
        the first tick, for a GPU without GPM, or after a failed read, which is counted)."""
        dev = self._devices.get(device)
        if dev is None:
            return None
        nvml = self._nvml
        current = 0 if dev.previous == 1 else 1
        try:
            if dev.mig is not None:
                nvml.nvmlGpmMigSampleGet(dev.mig[0], dev.mig[1], dev.samples[current])
            else:
                nvml.nvmlGpmSampleGet(dev.handle, dev.samples[current])
        except Exception as exc:
            dev.previous = -1  # the next pair must not span the failed read
            if _unsupported(exc):  # e.g. a GPU in MIG mode: no use asking every tick
                self._drop(device, dev, f"{device}: {_reason(exc)}")
            else:
                self._count_error()
            return None
        now = time.monotonic()
        previous, previous_t = dev.previous, dev.previous_t
        dev.previous, dev.previous_t = current, now
        if previous < 0:
            return None
        try:
            values = self._metrics(dev, dev.samples[previous], dev.samples[current])
        except Exception:
            self._count_error()
            return None
        return figures_from(values, now - previous_t)

    def close(self) -> None:
        """Free every sample (before nvmlShutdown); failures counted."""
        devices, self._devices = self._devices, {}
        for dev in devices.values():
            self._free(dev)
        self.available = False

    def _free(self, dev: _Device) -> None:
        for sample in dev.samples:
            try:
                self._nvml.nvmlGpmSampleFree(sample)
            except Exception:
                self._count_error()
        dev.samples = []

    def _drop(self, device: str, dev: _Device, reason: str) -> None:
        """Stop reading a GPU whose reads the driver refuses; say why once."""
        self._devices.pop(device, None)
        self._free(dev)
        self._say(reason)
        if not self._devices:
            self.available = False
            self.unavailable_reason = reason

    def _metrics(self, dev: _Device, first: Any, second: Any) -> dict[str, float]:
        req = dev.request
        req.version = getattr(self._nvml, "NVML_GPM_METRICS_GET_VERSION", 1)
        req.numMetrics = len(self._ids)
        req.sample1, req.sample2 = first, second
        for i, (_key, metric_id) in enumerate(self._ids):
            req.metrics[i].metricId = metric_id
        self._nvml.nvmlGpmMetricsGet(req)
        out: dict[str, float] = {}
        for i, (key, _metric_id) in enumerate(self._ids):
            m = req.metrics[i]
            if int(getattr(m, "nvmlReturn", 0)) == 0:  # this metric not on this GPU: left out
                out[key] = float(m.value)
        return out

    def _off(self, reason: str) -> None:
        self.available = False
        self.unavailable_reason = reason
        self._say(reason)

    @staticmethod
    def _say(reason: str) -> None:
        if _logged.first(reason):
            _log.info("tfobs: GPM metrics (hardware Tensor Core activity) off for %s", reason)


def _mig_parent(nvml: Any, handle: Any) -> tuple[Any, int] | None:
    """(parent GPU, GPU instance id) when `handle` is a MIG instance, else None."""
    is_mig = getattr(nvml, "nvmlDeviceIsMigDeviceHandle", None)
    try:
        flag = is_mig(handle) if is_mig is not None else 0
    except Exception:  # a GPU without MIG may not answer: it is not a MIG instance
        _log.debug("tfobs: MIG query failed", exc_info=True)
        return None
    if not int(getattr(flag, "value", flag)):  # pynvml returns a c_uint
        return None
    parent = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
    return parent, int(nvml.nvmlDeviceGetGpuInstanceId(handle))


def _name(nvml: Any, handle: Any) -> str:
    try:
        name = nvml.nvmlDeviceGetName(handle)
    except Exception:  # only a name in a message
        _log.debug("tfobs: GPU name unreadable", exc_info=True)
        return "this GPU"
    return name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)


def _unsupported(exc: BaseException) -> bool:
    name, text = type(exc).__name__, str(exc)
    return ("NotSupported" in name or "Not Supported" in text or "FunctionNotFound" in name
            or "Function Not Found" in text)


def _reason(exc: BaseException) -> str:
    name = type(exc).__name__
    text = str(exc) or name
    if "FunctionNotFound" in name or "Function Not Found" in text:
        return "this driver's NVML has no GPM functions (an older driver; update it)"
    if "NotSupported" in name or "Not Supported" in text:
        return "GPM not supported here (pre-Hopper GPU, or a MIG instance without GPM)"
    if "NoPermission" in name or "Insufficient Permissions" in text:
        return "no permission to read GPM on this GPU"
    return f"GPM unavailable: {text}"
