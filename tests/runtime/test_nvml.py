"""NVML sampler: the unavailable path against the real pynvml library (no GPU here), and
the sampling loop against a stand-in NVML module (named synthetic_gpu)."""

from __future__ import annotations

import logging
import math
import threading
import time
from types import SimpleNamespace

import pynvml
import pytest

from tfobs.health import HealthLedger
from tfobs.sources import nvml as nvml_source
from tfobs.sources.nvml import GpuSample, NvmlSampler, throttle_reason_names, visible_devices


def _real_nvml_works() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


HAS_GPU = _real_nvml_works()


@pytest.mark.skipif(HAS_GPU, reason="this machine has an NVIDIA driver: see the GPU test")
def test_unavailable_with_real_pynvml_and_no_driver(caplog) -> None:
    nvml_source._logged_unavailable.reset()
    threads_before = threading.active_count()
    with caplog.at_level(logging.INFO, logger="tfobs.sources.nvml"):
        sampler = NvmlSampler(interval_s=0.05)
        sampler.start()
        again = NvmlSampler(interval_s=0.05)
        again.start()
    assert sampler.available is False and again.available is False
    assert "NVML library not found" in sampler.unavailable_reason
    assert sampler.latest() == ()
    assert sampler.errors == 0
    assert threading.active_count() == threads_before  # no sampling thread left behind
    logged = [r for r in caplog.records if "NVML metrics off" in r.getMessage()]
    assert len(logged) == 1  # said once, then quiet
    sampler.stop(0.1)
    again.stop(0.1)


@pytest.mark.skipif(not HAS_GPU, reason="needs an NVIDIA driver and GPU")
def test_samples_real_gpu() -> None:
    sampler = NvmlSampler(interval_s=0.1)
    sampler.start()
    try:
        assert sampler.available, sampler.unavailable_reason
        (first, *_rest) = sampler.latest()
        assert first.device == "/device:GPU:0" and first.uuid.startswith(("GPU-", "MIG-"))
        assert 0.0 <= first.utilization_ratio <= 1.0
        assert 0 < first.memory_used_bytes <= first.memory_total_bytes
        assert first.sm_clock_hertz > 1e8
    finally:
        sampler.stop(1.0)
    assert sampler.errors == 0


def test_missing_pynvml_module_is_unavailable(monkeypatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)  # import now fails
    sampler = NvmlSampler(interval_s=1.0)
    sampler.start()
    assert not sampler.available
    assert "pip install nvidia-ml-py" in sampler.unavailable_reason


def test_visible_devices_and_throttle_names() -> None:
    assert visible_devices(None) is None
    assert visible_devices("") == []
    assert visible_devices("2,0") == ["2", "0"]
    assert visible_devices("1,-1,3") == ["1"]
    assert visible_devices("GPU-8f2b,1") == ["GPU-8f2b", "1"]
    assert throttle_reason_names(0x4 | 0x40) == ("sw_power_cap", "hw_thermal_slowdown")
    assert throttle_reason_names(0) == ()


class _FakeNvml:
    """Stands in for pynvml on a machine without a GPU: two GPUs, the second failing
    its memory query after a while, power not supported on the first."""

    class NVMLError_NotSupported(Exception):
        pass

    def __init__(self) -> None:
        self.calls = 0
        self.shutdown = False

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: self.shutdown = True
    def nvmlDeviceGetCount(self) -> int: return 4
    def nvmlDeviceGetHandleByIndex(self, i): return i
    def nvmlDeviceGetHandleByUUID(self, u): return 3
    def nvmlDeviceGetIndex(self, h): return h
    def nvmlDeviceGetUUID(self, h): return f"GPU-{h}"
    def nvmlDeviceGetName(self, h): return b"NVIDIA H100 80GB HBM3"
    def nvmlDeviceGetUtilizationRates(self, h): return SimpleNamespace(gpu=87)

    def nvmlDeviceGetMemoryInfo(self, h):
        self.calls += 1
        if h == 3 and self.calls > 4:
            raise RuntimeError("GPU is lost")
        return SimpleNamespace(used=10 * 2**30, total=80 * 2**30)

    def nvmlDeviceGetPowerUsage(self, h):
        if h == 2:
            raise self.NVMLError_NotSupported("Not Supported")
        return 350_000

    def nvmlDeviceGetTemperature(self, h, sensor): return 61
    def nvmlDeviceGetClockInfo(self, h, kind): return 1980 if kind == 1 else 2619
    def nvmlDeviceGetCurrentClocksEventReasons(self, h): return 0x4


def test_sampling_and_errors_synthetic_gpu_nvml() -> None:
    fake = _FakeNvml()
    health = HealthLedger()
    sampler = NvmlSampler(interval_s=0.05, health=health, nvml=fake,
                          cuda_visible_devices="2,GPU-3")
    sampler.start()
    try:
        assert sampler.available
        first = sampler.latest()
        assert [s.device for s in first] == ["/device:GPU:0", "/device:GPU:1"]
        a = first[0]
        assert isinstance(a, GpuSample) and a.index == 2 and a.uuid == "GPU-2"
        assert a.name == "NVIDIA H100 80GB HBM3"
        assert a.utilization_ratio == pytest.approx(0.87)
        assert a.memory_total_bytes == 80 * 2**30
        assert math.isnan(a.power_watts)  # not supported: NaN, not an error
        assert first[1].power_watts == pytest.approx(350.0)
        assert a.sm_clock_hertz == pytest.approx(1.98e9)
        assert a.memory_clock_hertz == pytest.approx(2.619e9)
        assert a.temperature_celsius == 61.0
        assert a.throttle_reasons == ("sw_power_cap",)
        deadline = time.monotonic() + 5
        while sampler.errors == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert sampler.errors > 0  # the lost GPU is counted, not raised
        assert [s.device for s in sampler.latest()] == ["/device:GPU:0"]
    finally:
        sampler.stop(1.0)
    # The sampler reports its failures into tfobs's health ledger itself, as they happen.
    assert health.errors == {"nvml": sampler.errors}
    assert fake.shutdown
