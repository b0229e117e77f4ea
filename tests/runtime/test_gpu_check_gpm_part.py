"""The prepared GPU check's GPM part (tools/gpu_window_end_check.py, role `gpm`) read
through: the part enables tfobs for JAX on CPU, scrapes tfobs's own /metrics while three
workloads run, and lays the GPM figures beside the name-based share. NVML is a stand-in
here (no GPU: `_mock_gpu`), the rest is real (JAX, tfobs, its HTTP server)."""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import sys

import pytest

from tests.support.fake_gpm import BF16, FakeGpmNvml

pytest.importorskip("jax")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TOOL = pathlib.Path(__file__).resolve().parents[2] / "tools" / "gpu_window_end_check.py"


def _tool():
    spec = importlib.util.spec_from_file_location("gpu_window_end_check", TOOL)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpm_part_scrapes_gpm_figures_beside_windows_mock_gpu(monkeypatch) -> None:
    import tfobs

    tool = _tool()
    fake = FakeGpmNvml(schedule={0: [BF16] * 100_000})
    monkeypatch.setitem(sys.modules, "pynvml", fake)  # the sampler imports it lazily
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    args = argparse.Namespace(smoke=True, phase_s=3.0, window_steps=3, scrape_s=0.25)
    try:
        got = tool.job_gpm(args)
    finally:
        tfobs.disable()
    assert got["status"] == "GPM available" and got["gpm_available"], got["status"]
    assert got["errors"].get("gpm", 0) == 0 and got["scrape_errors"] == []
    phases = {p["workload"]: p for p in got["phases"]}
    assert list(phases) == ["bf16_matmul", "fp32_highest", "elementwise"]
    for p in phases.values():
        assert p["gpm"]["tensor"] == pytest.approx(0.748)  # what the stand-in GPU counted
        assert p["gpm"]["hmma"] == pytest.approx(0.748) and p["gpm"]["dfma"] is None
        assert p["gpm"]["dram_bw"] == pytest.approx(0.143)
        assert p["windows"] and all(w["outcome"] == "captured" for w in p["windows"])
    # The verdict reads the order; the stand-in ran one workload throughout, so it fails.
    verdict = tool.gpm_verdict({**got, "died": False})
    assert verdict["gpm"] == "order NOT as expected"
    assert verdict["gpm_tensor"]["fp32_highest"] == pytest.approx(0.748)
    assert fake.freed == fake.allocated  # samples freed when tfobs stopped


def test_gpm_verdict_reads_the_expected_order() -> None:
    tool = _tool()

    def phase(name: str, tensor: float, dram: float) -> dict:
        return {"workload": name, "gpm": {"tensor": tensor, "dram_bw": dram},
                "names_tensor_core_share": 0.9 if name == "bf16_matmul" else 0.0}

    run = {"gpm_available": True, "died": False, "errors": {},
           "phases": [phase("bf16_matmul", 0.75, 0.14), phase("fp32_highest", 0.0, 0.035),
                      phase("elementwise", 0.0, 0.44)]}
    assert tool.gpm_verdict(run)["gpm"] == "order as expected"
    run["phases"][2] = phase("elementwise", 0.0, 0.01)  # DRAM not highest on the loop
    assert tool.gpm_verdict(run)["gpm"] == "order NOT as expected"
    assert tool.gpm_verdict({"died": False, "gpm_available": False,
                             "status": "GPM unavailable: x"}) == {"gpm": "GPM unavailable: x"}
    assert tool.gpm_verdict(None) == {"gpm": "did not run"}
