"""TensorFlow memory sampler: real TensorFlow on this GPU-less machine, and the sampling
loop against a stand-in `tf` module (named synthetic_gpu)."""

from __future__ import annotations

import time
from types import SimpleNamespace

from tfobs.health import HealthLedger
from tfobs.sources.tfmemory import DeviceMemorySample, TfMemorySampler


def test_no_gpu_reports_nothing_and_says_so_with_real_tensorflow() -> None:
    import tensorflow as tf

    if tf.config.list_logical_devices("GPU"):  # pragma: no cover - GPU machines
        sampler = TfMemorySampler(interval_s=0.05)
        sampler.start()
        assert sampler.available and sampler.latest()
        sampler.stop(1.0)
        return
    sampler = TfMemorySampler(interval_s=0.05)
    sampler.start()
    assert sampler.available is False
    assert "no GPU" in sampler.unavailable_reason
    assert sampler.latest() == ()
    sampler.stop(0.1)


def _fake_tf(fail_after: int):
    calls = {"n": 0}

    def get_memory_info(device: str):
        calls["n"] += 1
        if device == "GPU:1" and calls["n"] > fail_after:
            raise RuntimeError("device gone")
        return {"current": 1000 * (int(device[-1]) + 1), "peak": 5000}

    devices = [SimpleNamespace(name=f"/job:localhost/replica:0/task:0/device:GPU:{i}")
               for i in range(2)]
    config = SimpleNamespace(
        list_logical_devices=lambda kind: devices if kind == "GPU" else [],
        experimental=SimpleNamespace(get_memory_info=get_memory_info),
    )
    return SimpleNamespace(config=config)


def test_sampling_synthetic_gpu_tf() -> None:
    health = HealthLedger()
    sampler = TfMemorySampler(interval_s=0.02, health=health, tf=_fake_tf(fail_after=3))
    sampler.start()
    try:
        assert sampler.available
        assert sampler.latest() == (
            DeviceMemorySample("/device:GPU:0", 1000, 5000),
            DeviceMemorySample("/device:GPU:1", 2000, 5000),
        )
        deadline = time.monotonic() + 5
        while sampler.errors == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert sampler.errors > 0
        assert [s.device for s in sampler.latest()] == ["/device:GPU:0"]
    finally:
        sampler.stop(1.0)
    assert health.errors == {"tfmemory": sampler.errors}  # reported as they happened
