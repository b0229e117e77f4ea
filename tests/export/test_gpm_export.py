"""GPM figures on the real exporter: the NvmlSampler driven by a stand-in for the driver's
NVML (no GPU here: `_mock_gpu`), scraped over HTTP from /metrics and read on the overview
page beside the window's name-based Tensor Core share; and the unsupported GPU's page."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.fake_gpm import BF16, FakeGpmNvml
from tests.support.scrape import scrape
from tfobs.config import Config
from tfobs.export.prometheus import PrometheusExporter
from tfobs.health import HealthLedger
from tfobs.sources.nvml import NvmlSampler
from tfobs.summary import Kernels, WindowSummary
from tfobs.window import WindowRecord

pytestmark = pytest.mark.slow  # starts the metrics HTTP server


def _scraped(fake: Any) -> tuple[dict[str, Any], str, NvmlSampler]:
    """The served metric families, the page and the (stopped) sampler, scraped once with
    `fake` as NVML."""
    exporter, sampler = _serve(fake)
    try:
        text = _get(exporter.url)
        page = _get(exporter.url.removesuffix("metrics"))
    finally:
        exporter.shutdown(2.0)
        sampler.stop(1.0)
    return {f.name: f for f in text_string_to_metric_families(text)}, page, sampler


def _serve(fake: FakeGpmNvml) -> tuple[PrometheusExporter, NvmlSampler]:
    health = HealthLedger()
    sampler = NvmlSampler(interval_s=3600, health=health, nvml=fake, cuda_visible_devices="0")
    sampler.start()
    sampler._sample_once()  # a second sample: the first pair (the thread's period is long)
    cfg = Config.load(metrics_port=0, metrics_bind="127.0.0.1")
    exporter = PrometheusExporter(cfg, cfg.identity(), health, nvml=sampler)
    exporter.start()
    window = WindowSummary(kernels=Kernels(total_s=0.4, tensor_core_s=0.3))
    exporter.publish(window, WindowRecord(index=1))
    return exporter, sampler


def _get(url: str) -> str:
    r = scrape(url)
    assert r.status == 200, r
    return r.text


def test_gpm_series_and_page_mock_gpu() -> None:
    fams, page, _ = _scraped(FakeGpmNvml(schedule={0: [BF16] * 10}))
    gpu = {"device": "/device:GPU:0", "gpu_uuid": "GPU-0"}

    def value(name: str, **labels: str) -> float:
        (hit,) = [s.value for s in fams[name].samples
                  if all(s.labels.get(k) == v for k, v in {**gpu, **labels}.items())]
        return hit

    assert fams["tfobs_gpm_available"].samples[0].value == 1
    assert value("tfobs_gpu_tensor_active_ratio") == pytest.approx(0.748)
    assert value("tfobs_gpu_tensor_pipe_active_ratio", pipe="hmma") == pytest.approx(0.748)
    assert value("tfobs_gpu_tensor_pipe_active_ratio", pipe="imma") == 0.0
    pipes = {s.labels["pipe"] for s in fams["tfobs_gpu_tensor_pipe_active_ratio"].samples}
    assert pipes == {"hmma", "imma", "dmma"}  # dfma not reported by this GPU: no series
    assert value("tfobs_gpu_sm_active_ratio") == pytest.approx(0.763)
    assert value("tfobs_gpu_sm_occupancy_ratio") == pytest.approx(0.113)
    assert value("tfobs_gpu_dram_bandwidth_ratio") == pytest.approx(0.143)
    assert value("tfobs_gpu_math_pipe_active_ratio", pipe="fp32") == 0.0
    assert "every process on the GPU" in fams["tfobs_gpu_tensor_active_ratio"].documentation
    # The page: the hardware's figure beside the window's share by kernel names (75 %).
    assert 'id="gpm"' in page and "74.8 %" in page and "75.0 %" in page
    assert "every process" in page


def test_gpu_without_gpm_series_and_page_mock_gpu() -> None:
    fams, page, _ = _scraped(FakeGpmNvml(supported=(False,)))
    assert fams["tfobs_gpm_available"].samples[0].value == 0
    assert fams["tfobs_nvml_available"].samples[0].value == 1
    assert "tfobs_gpu_tensor_active_ratio" not in fams or not fams[
        "tfobs_gpu_tensor_active_ratio"].samples
    assert 'id="gpm"' in page and "Tesla T4 has no GPM" in page


def test_no_driver_page_says_nothing_of_gpm_mock_gpu() -> None:
    class NoDriver(FakeGpmNvml):
        class NVMLError_LibraryNotFound(Exception):
            pass

        def nvmlInit(self) -> None:
            raise self.NVMLError_LibraryNotFound("NVML Shared Library Not Found")

    fams, page, sampler = _scraped(NoDriver())
    assert "NVML library not found" in sampler.gpm_unavailable_reason
    assert fams["tfobs_gpm_available"].samples[0].value == 0
    assert 'id="gpm"' not in page and 'id="overview"' in page  # a CPU job's page: no noise
