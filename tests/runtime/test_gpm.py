"""NVML GPM (hardware Tensor Core, SM and DRAM activity): the pairing of samples, the
figures, the unsupported paths and the cleanup, against a stand-in for the driver's NVML
(there is no GPU here; tests named `_mock_gpu`). The stand-in uses the real pynvml's ctypes
structures and metric ids, so a wrong field or id name fails here as it would on a GPU."""

from __future__ import annotations

import logging
import math

import pytest

from tests.support.fake_gpm import BF16, FP32, MEMORY, FakeGpmNvml
from tfobs.health import HealthLedger
from tfobs.once import OncePer
from tfobs.sources import gpm as gpm_source
from tfobs.sources.gpm import GpmReader, figures_from
from tfobs.sources.nvml import NvmlSampler


def _reader(fake, handles=((0, "/device:GPU:0", 0),)):
    errors = []
    reader = GpmReader(fake, lambda: errors.append(1))
    reader.open(list(handles))
    return reader, errors


def test_figures_come_from_consecutive_sample_pairs_mock_gpu() -> None:
    fake = FakeGpmNvml()
    reader, errors = _reader(fake)
    assert reader.available and reader.unavailable_reason == ""
    assert reader.read("/device:GPU:0") is None  # one sample: no interval yet
    bf16 = reader.read("/device:GPU:0")
    fp32 = reader.read("/device:GPU:0")
    memory = reader.read("/device:GPU:0")
    assert bf16 and fp32 and memory and errors == []
    assert bf16.tensor_active_ratio == pytest.approx(0.748)
    assert dict(bf16.tensor_pipe_ratio) == pytest.approx({"hmma": 0.748, "imma": 0.0,
                                                          "dmma": 0.0})
    assert "dfma" not in dict(bf16.tensor_pipe_ratio)  # not reported: left out, not 0
    assert bf16.sm_active_ratio == pytest.approx(0.763)
    assert bf16.sm_occupancy_ratio == pytest.approx(0.113)
    assert fp32.tensor_active_ratio == 0.0
    assert dict(fp32.math_pipe_ratio)["fp32"] == pytest.approx(0.752)
    assert memory.dram_bandwidth_ratio == pytest.approx(0.437)
    assert memory.dram_bandwidth_ratio > max(bf16.dram_bandwidth_ratio,
                                             fp32.dram_bandwidth_ratio)
    assert memory.interval_s >= 0.0
    # Two samples allocated once and reused, freed at close.
    assert len(fake.allocated) == 2 and fake.metric_calls == 3
    reader.close()
    assert fake.freed == fake.allocated and not reader.available


def test_failed_sample_is_counted_and_the_next_pair_skips_it_mock_gpu() -> None:
    fake = FakeGpmNvml(schedule={0: [BF16, BF16, FP32, FP32, MEMORY]})
    reader, errors = _reader(fake)
    reader.read("/device:GPU:0")
    assert reader.read("/device:GPU:0") is not None
    fake.fail_sample = True
    assert reader.read("/device:GPU:0") is None
    assert errors == [1]
    fake.fail_sample = False
    # The first sample after the failure starts a new pair: no figure spanning the gap.
    assert reader.read("/device:GPU:0") is None
    assert reader.read("/device:GPU:0") is not None
    assert errors == [1]


def test_pre_hopper_gpu_is_left_out_and_said_once_mock_gpu(caplog, monkeypatch) -> None:
    monkeypatch.setattr(gpm_source, "_logged", OncePer())
    fake = FakeGpmNvml(supported=(True, False), schedule={0: [BF16], 1: [BF16]})
    handles = ((0, "/device:GPU:0", 0), (1, "/device:GPU:1", 1))
    with caplog.at_level(logging.INFO, logger="tfobs.sources.gpm"):
        reader, _ = _reader(fake, handles)
        again, _ = _reader(fake, handles)
    assert reader.available  # one GPU has GPM
    assert reader.read("/device:GPU:1") is None and reader.read("/device:GPU:1") is None
    reader.read("/device:GPU:0")
    assert reader.read("/device:GPU:0") is not None
    said = [r.getMessage() for r in caplog.records if "GPM metrics" in r.getMessage()]
    assert len(said) == 1, said
    assert "Tesla T4 has no GPM" in said[0] and "Hopper" in said[0]
    reader.close()
    again.close()


def test_no_gpm_anywhere_reasons_mock_gpu() -> None:
    none, _ = _reader(FakeGpmNvml(supported=(False,)))
    assert not none.available and "has no GPM" in none.unavailable_reason

    class OldDriver(FakeGpmNvml):
        def nvmlGpmQueryDeviceSupport(self, h):
            raise self.NVMLError_FunctionNotFound("Function Not Found")

    old, _ = _reader(OldDriver())
    assert not old.available and "older driver" in old.unavailable_reason

    class OldBindings(FakeGpmNvml):
        def __getattribute__(self, name: str):
            if name.startswith("nvmlGpm"):  # an nvidia-ml-py from before GPM
                raise AttributeError(name)
            return super().__getattribute__(name)

    old_py, _ = _reader(OldBindings())
    assert not old_py.available and "pip install -U nvidia-ml-py" in old_py.unavailable_reason


def test_mig_instance_is_sampled_through_its_parent_mock_gpu() -> None:
    fake = FakeGpmNvml(mig=True)
    reader, errors = _reader(fake)
    reader.read("/device:GPU:0")
    got = reader.read("/device:GPU:0")
    assert got is not None and got.tensor_active_ratio == pytest.approx(0.748)
    assert fake.mig_calls == [(10, 7), (10, 7)] and errors == []


def test_figures_clamp_and_mark_missing() -> None:
    f = figures_from({"tensor_any": 100.4, "sm_active": -0.2, "pipe_fp32": 50.0}, 1.0)
    assert f.tensor_active_ratio == 1.0 and f.sm_active_ratio == 0.0
    assert math.isnan(f.dram_bandwidth_ratio) and f.tensor_pipe_ratio == ()
    assert f.math_pipe_ratio == (("fp32", 0.5),)


def test_sampler_attaches_gpm_and_frees_at_stop_mock_gpu() -> None:
    fake = FakeGpmNvml(schedule={0: [BF16] * 1000})
    health = HealthLedger()
    sampler = NvmlSampler(interval_s=0.05, health=health, nvml=fake, cuda_visible_devices="0")
    sampler.start()
    try:
        assert sampler.gpm_available and sampler.gpm_unavailable_reason == ""
        assert sampler.latest()[0].gpm is None  # the first sample has no pair yet
        sampler._sample_once()
        (g,) = sampler.latest()
        assert g.gpm is not None and g.gpm.tensor_active_ratio == pytest.approx(0.748)
        assert g.utilization_ratio == pytest.approx(0.83)  # the ordinary figures stay
    finally:
        sampler.stop(1.0)
    assert fake.freed == fake.allocated and len(fake.allocated) == 2
    assert fake.shutdown and health.errors == {}


def test_sampler_counts_gpm_failures_in_health_mock_gpu() -> None:
    fake = FakeGpmNvml()
    health = HealthLedger()
    sampler = NvmlSampler(interval_s=3600, health=health, nvml=fake, cuda_visible_devices="0")
    sampler.start()
    fake.fail_sample = True
    sampler._sample_once()
    sampler.stop(1.0)
    assert health.errors == {"gpm": 1}
    assert sampler.latest()[0].gpm is None and sampler.latest()[0].name == "NVIDIA H200"


def test_sampler_without_gpm_says_why_mock_gpu(monkeypatch) -> None:
    sampler = NvmlSampler(interval_s=3600, nvml=FakeGpmNvml(supported=(False,)),
                          cuda_visible_devices="0")
    sampler.start()
    sampler.stop(1.0)
    assert sampler.available and not sampler.gpm_available
    assert "Tesla T4 has no GPM" in sampler.gpm_unavailable_reason
    off = NvmlSampler(interval_s=3600, nvml=FakeGpmNvml(), gpm=False,
                      cuda_visible_devices="0")
    off.start()
    off.stop(1.0)
    assert "turned off" in off.gpm_unavailable_reason
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)  # no bindings at all
    missing = NvmlSampler(interval_s=3600)
    missing.start()
    assert not missing.gpm_available
    assert "pip install nvidia-ml-py" in missing.gpm_unavailable_reason


def test_gpu_refusing_reads_is_dropped_said_once_not_counted_mock_gpu(caplog, monkeypatch) -> None:
    monkeypatch.setattr(gpm_source, "_logged", OncePer())
    fake = FakeGpmNvml()  # says it has GPM, then refuses samples (a GPU in MIG mode)
    health = HealthLedger()
    sampler = NvmlSampler(interval_s=3600, health=health, nvml=fake, cuda_visible_devices="0")
    with caplog.at_level(logging.INFO, logger="tfobs.sources.gpm"):
        fake.fail_sample = "mig"
        sampler.start()
        for _ in range(3):
            sampler._sample_once()
    sampler.stop(1.0)
    assert not sampler.gpm_available
    assert "GPM not supported here" in sampler.gpm_unavailable_reason
    assert health.errors == {}  # a refusal is a reason, not an error per tick
    assert fake.freed == fake.allocated
    said = [r for r in caplog.records if "GPM metrics" in r.getMessage()]
    assert len(said) == 1
