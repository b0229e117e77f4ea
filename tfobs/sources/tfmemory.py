"""TensorFlow's own GPU memory figures between profile windows.

`tf.config.experimental.get_memory_info` per logical GPU: bytes in use now and the peak
since TensorFlow started (or since the peak was last reset). TensorFlow is imported only
when the sampler starts. On a machine without GPUs the sampler reports nothing and says so
(`available=False`, `unavailable_reason`).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tfobs.health import HealthLedger

from tfobs.sources.periodic import Periodic

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeviceMemorySample:
    device: str  # "/device:GPU:0"
    current_bytes: int
    peak_bytes: int


class TfMemorySampler:
    """Samples `get_memory_info` every `interval_s` on a daemon thread; never raises."""

    def __init__(self, interval_s: float, *, health: HealthLedger | None = None,
                 tf: Any = None) -> None:
        self.interval_s = max(float(interval_s), 0.05)
        self.available = False
        self.unavailable_reason = "not started"
        self.errors = 0  # this sampler's own count; `health` is what tfobs publishes
        self._health = health
        self._tf = tf  # injected only by tests; else imported at start()
        self._devices: list[str] = []
        self._latest: tuple[DeviceMemorySample, ...] = ()
        self._thread = Periodic("tfobs-tfmemory", self.interval_s, self._sample_once)
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            if self._thread.running:
                return
            try:
                if self._tf is None:
                    import tensorflow as tf  # lazy: heavy, and already loaded by training

                    self._tf = tf
                gpus = self._tf.config.list_logical_devices("GPU")
                self._devices = [_device_name(d) for d in gpus]
            except Exception as exc:
                self._off(f"TensorFlow device query failed: {exc}")
                return
            if not self._devices:
                self._off("TensorFlow sees no GPU; no device memory to report")
                return
            self.available = True
            self.unavailable_reason = ""
            self._sample_once()
            self._thread.start()

    def stop(self, timeout_s: float = 1.0) -> None:
        self._thread.stop(timeout_s)

    def _count_error(self) -> None:
        self.errors += 1
        if self._health is not None:
            self._health.count_error("tfmemory")

    def latest(self) -> tuple[DeviceMemorySample, ...]:
        return self._latest

    def _off(self, reason: str) -> None:
        self.available = False
        self.unavailable_reason = reason
        _log.info("tfobs: TensorFlow memory metrics off: %s", reason)

    def _sample_once(self) -> None:
        samples = []
        get = self._tf.config.experimental.get_memory_info
        for device in self._devices:
            try:
                info = get(device.removeprefix("/device:"))
                samples.append(
                    DeviceMemorySample(device, int(info["current"]), int(info["peak"]))
                )
            except Exception:
                self._count_error()
        self._latest = tuple(samples)


def _device_name(logical_device: Any) -> str:
    """'/job:localhost/replica:0/task:0/device:GPU:0' -> '/device:GPU:0'."""
    name = str(getattr(logical_device, "name", logical_device))
    at = name.find("/device:")
    return name[at:] if at >= 0 else name
