"""NVML device metrics between profile windows (utilization, memory, power, clocks, ...).

A daemon thread samples the GPUs this process uses (CUDA_VISIBLE_DEVICES) once per
`interval_s` through `pynvml` (package `nvidia-ml-py`). Only NVML's ordinary device queries
are used, plus NVML's GPU Performance Monitoring counters where the GPU has them
(`tfobs.sources.gpm`, Hopper and newer: hardware Tensor Core, SM and DRAM activity). Without
the library, a driver or a GPU the sampler says so once (`available=False`,
`unavailable_reason`) and stays quiet; a failed query while running is counted in `errors`,
never raised.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tfobs.health import HealthLedger

from tfobs.once import Once
from tfobs.sources.gpm import GpmFigures, GpmReader
from tfobs.sources.periodic import Periodic

_log = logging.getLogger(__name__)

# NVML clock-event (throttle) reason bits, as nvml.h defines them.
THROTTLE_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)

_logged_unavailable = Once()  # per process: each sampler retried would say it again


@dataclass(frozen=True)
class GpuSample:
    index: int  # NVML's (physical) index
    uuid: str
    name: str
    device: str  # "/device:GPU:N", N as this process numbers its visible GPUs
    utilization_ratio: float
    memory_used_bytes: int
    memory_total_bytes: int
    power_watts: float  # NaN where the GPU does not report it
    temperature_celsius: float
    sm_clock_hertz: float
    memory_clock_hertz: float
    throttle_reasons: tuple[str, ...]
    gpm: GpmFigures | None = None  # hardware activity since the previous sample (GPM GPUs)


def throttle_reason_names(mask: int) -> tuple[str, ...]:
    return tuple(name for bit, name in THROTTLE_REASONS if mask & bit)


def visible_devices(env: str | None) -> list[str] | None:
    """CUDA_VISIBLE_DEVICES as a list of entries (indices or UUIDs); None = all GPUs."""
    if env is None:
        return None
    entries = [e.strip() for e in env.split(",")]
    out: list[str] = []
    for e in entries:
        if not e or e == "-1":  # CUDA stops at the first invalid entry
            break
        out.append(e)
    return out


class NvmlSampler:
    """Samples NVML at `interval_s`; `latest()` returns the newest samples (maybe empty)."""

    def __init__(self, interval_s: float, *, health: HealthLedger | None = None,
                 nvml: Any = None, cuda_visible_devices: str | None = None,
                 gpm: bool = True) -> None:
        self.interval_s = max(float(interval_s), 0.05)
        self.available = False
        self.unavailable_reason = "not started"
        self.errors = 0  # this sampler's own count; `health` is what tfobs publishes
        self._health = health
        self._nvml = nvml  # injected only by tests; else imported at start()
        self._env = (cuda_visible_devices if cuda_visible_devices is not None
                     else os.environ.get("CUDA_VISIBLE_DEVICES"))
        self._handles: list[tuple[int, str, Any]] = []  # (nvml index, device label, handle)
        self._latest: tuple[GpuSample, ...] = ()
        self._thread = Periodic("tfobs-nvml", self.interval_s, self._sample_once)
        self._lock = threading.Lock()
        self._initialised = False
        self._want_gpm = gpm
        self._gpm: GpmReader | None = None
        self._gpm_reason = "NVML not started"
        self._tick_lock = threading.Lock()  # GPM samples are freed only between ticks

    # lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Initialise NVML and start sampling; on failure mark unavailable. Never raises."""
        with self._lock:
            if self._thread.running:
                return
            try:
                self._open()
            except Exception as exc:  # any failure means: no NVML figures, say why once
                self._unavailable(_reason(exc))
                return
            self.available = True
            self.unavailable_reason = ""
            self._open_gpm()
            self._sample_once()
            self._thread.start()

    def stop(self, timeout_s: float = 1.0) -> None:
        self._thread.stop(timeout_s)
        gpm, self._gpm = self._gpm, None
        if gpm is not None:
            self._gpm_reason = gpm.unavailable_reason or "NVML sampler stopped"
        # A tick still running past the join keeps its samples: freeing them under it would
        # be a use after free in the driver; a few bytes left once is the lesser harm.
        if gpm is not None and self._tick_lock.acquire(timeout=max(timeout_s, 0.0)):
            try:
                gpm.close()
            finally:
                self._tick_lock.release()
        if self._initialised:
            self._initialised = False
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                self._count_error()

    def _count_error(self) -> None:
        self.errors += 1
        if self._health is not None:
            self._health.count_error("nvml")

    def _count_gpm_error(self) -> None:
        self.errors += 1
        if self._health is not None:
            self._health.count_error("gpm")

    def latest(self) -> tuple[GpuSample, ...]:
        return self._latest

    @property
    def gpm_available(self) -> bool:
        """True when at least one sampled GPU gives GPM figures."""
        return self._gpm is not None and self._gpm.available

    @property
    def gpm_unavailable_reason(self) -> str:
        """Why no GPM figures ("" when there are): NVML's own reason when NVML is off."""
        if not self.available:
            return self.unavailable_reason
        if self.gpm_available:
            return ""
        return self._gpm.unavailable_reason if self._gpm is not None else self._gpm_reason

    # internals -------------------------------------------------------------------------
    def _open(self) -> None:
        if self._nvml is None:
            import pynvml  # lazy: nvidia-ml-py is optional

            self._nvml = pynvml
        nvml = self._nvml
        nvml.nvmlInit()
        self._initialised = True
        wanted = visible_devices(self._env)
        count = nvml.nvmlDeviceGetCount()
        handles: list[tuple[int, str, Any]] = []
        if wanted is None:
            for i in range(count):
                handles.append((i, f"/device:GPU:{i}", nvml.nvmlDeviceGetHandleByIndex(i)))
        else:
            for logical, entry in enumerate(wanted):
                handle = (nvml.nvmlDeviceGetHandleByIndex(int(entry)) if entry.isdigit()
                          else nvml.nvmlDeviceGetHandleByUUID(entry))
                handles.append((nvml.nvmlDeviceGetIndex(handle), f"/device:GPU:{logical}",
                                handle))
        if not handles:
            raise LookupError("no GPU visible to this process (CUDA_VISIBLE_DEVICES)")
        self._handles = handles

    def _unavailable(self, reason: str) -> None:
        self.available = False
        self.unavailable_reason = reason
        if self._initialised:
            self._initialised = False
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # already off: what matters is said below
                _log.debug("tfobs: nvmlShutdown failed", exc_info=True)
        if _logged_unavailable.first():
            _log.info("tfobs: NVML metrics off: %s", reason)

    def _open_gpm(self) -> None:
        if not self._want_gpm:
            self._gpm_reason = "GPM sampling turned off"
            return
        reader = GpmReader(self._nvml, self._count_gpm_error)
        try:
            reader.open(self._handles)
        except Exception as exc:  # never let GPM cost the ordinary NVML figures
            self._count_gpm_error()
            self._gpm_reason = f"GPM unavailable: {exc}"
            return
        self._gpm_reason = reader.unavailable_reason
        if reader.available:
            self._gpm = reader

    def _sample_once(self) -> None:
        samples = []
        with self._tick_lock:
            gpm = self._gpm
            for index, device, handle in self._handles:
                figures = gpm.read(device) if gpm is not None else None
                try:
                    samples.append(self._sample(index, device, handle, figures))
                except Exception:
                    self._count_error()
        self._latest = tuple(samples)

    def _sample(self, index: int, device: str, handle: Any,
                gpm: GpmFigures | None = None) -> GpuSample:
        nvml = self._nvml
        util = nvml.nvmlDeviceGetUtilizationRates(handle)
        mem = nvml.nvmlDeviceGetMemoryInfo(handle)
        power_mw = self._optional(nvml.nvmlDeviceGetPowerUsage, handle)
        temp = self._optional(nvml.nvmlDeviceGetTemperature, handle, 0)  # NVML_TEMPERATURE_GPU
        sm_mhz = self._optional(nvml.nvmlDeviceGetClockInfo, handle, 1)  # NVML_CLOCK_SM
        mem_mhz = self._optional(nvml.nvmlDeviceGetClockInfo, handle, 2)  # NVML_CLOCK_MEM
        reasons_fn = (getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                      or getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None))
        mask = self._optional(reasons_fn, handle) if reasons_fn else math.nan
        return GpuSample(
            index=index,
            uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
            name=_text(nvml.nvmlDeviceGetName(handle)),
            device=device,
            utilization_ratio=float(util.gpu) / 100.0,
            memory_used_bytes=int(mem.used),
            memory_total_bytes=int(mem.total),
            power_watts=power_mw / 1000.0,
            temperature_celsius=float(temp),
            sm_clock_hertz=sm_mhz * 1e6,
            memory_clock_hertz=mem_mhz * 1e6,
            throttle_reasons=() if math.isnan(mask) else throttle_reason_names(int(mask)),
            gpm=gpm,
        )

    def _optional(self, fn: Any, *args: Any) -> float:
        """A query some GPUs do not support: NaN then, without counting an error."""
        try:
            return float(fn(*args))
        except Exception as exc:
            if "NotSupported" not in type(exc).__name__ and "Not Supported" not in str(exc):
                self._count_error()
            return math.nan


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ImportError):
        return "pynvml is not installed (pip install 'tfobs[nvml]', or pip install nvidia-ml-py)"
    name = type(exc).__name__
    text = str(exc) or name
    if "LibraryNotFound" in name or "Library Not Found" in text:
        return "NVML library not found (no NVIDIA driver on this machine)"
    if "DriverNotLoaded" in name:
        return "NVIDIA driver not loaded"
    return f"NVML unavailable: {text}"
