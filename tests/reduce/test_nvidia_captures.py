"""Real H100 captures of known character: tfobs's GPU figures show what each workload did.

The captures (tests/data/captures/recorded__h100_jax0.11.2__*) were recorded by
`tools/record_gpu_captures.py` on an NVIDIA H100 with JAX's profiler (CUPTI kernels and
copies, `correlation_id` links, real cuBLAS/cuBLASLt/cuDNN/XLA kernel names). XProf's answers
for them are compared in test_fidelity_xprof.py and test_kernels_fidelity.py; here each
capture is held to the character its workload was built to have.
"""

from __future__ import annotations

import functools
import json

import pytest

import tfobs
from tests.conftest import CAPTURES

DATA = CAPTURES.parent
STEM = "recorded__h100_jax0.11.2__"
CASES = ("launch_bound_tiny_ops", "bf16_matmul", "fp32_matmul_no_tf32", "fp32_matmul_tf32",
         "input_bound_host_wait", "h2d_d2h_copies", "conv_train_bf16", "flash_attention_bf16",
         "transformer_train_bf16")


@functools.cache
def summary(case: str) -> tfobs.WindowSummary:
    return tfobs.analyze(CAPTURES / f"{STEM}{case}.xplane.pb", top_n=100)


def gpu(case: str) -> tfobs.summary.DeviceActivity:
    (device,) = summary(case).devices
    assert device.device == "/device:GPU:0"
    return device


def tensor_core_share(case: str) -> float:
    k = summary(case).kernels
    return k.tensor_core_s / k.total_s


@pytest.mark.parametrize("case", CASES)
def test_capture_is_real_h100_with_provenance(case: str) -> None:
    prov = json.loads((DATA / "provenance" / f"{STEM}{case}.json").read_text())
    env = prov["environment"]
    assert env["nvidia_smi"]["gpu_name"] == "NVIDIA H100 80GB HBM3"
    assert env["nvidia_smi"]["driver_version"] and env["cuda"]["cuda_runtime"]
    assert env["jax_version"] == "0.11.2" and prov["for_gpu_test_data"] is True
    assert prov["case"] == case and prov["recorded_at_utc"].startswith("2026-")
    path = CAPTURES / f"{STEM}{case}.xplane.pb"
    assert path.stat().st_size == prov["bytes"] < 8 * 1024 * 1024
    s = summary(case)
    assert s.environment.device_type == "GPU" and s.steps.method == "markers"
    assert s.steps.count == prov["steps"] - 2  # XProf's first/last rule
    assert all(st.device_span_s > 0 for st in s.steps.items)


def test_launch_bound_loop_shows_kernel_launch_idle() -> None:
    d = gpu("launch_bound_tiny_ops")
    assert d.kernel_count >= 1000 and d.mean_kernel_s < 5e-6
    assert d.idle_s["kernel_launch"] / d.span_s > 0.9  # the GPU waits on Python dispatch
    assert d.idle_s["input"] == 0.0
    assert d.busy_s / d.span_s < 0.05
    assert "small_kernels" in {a.code for a in summary("launch_bound_tiny_ops").advice}


def test_bf16_matmul_runs_on_tensor_cores() -> None:
    assert tensor_core_share("bf16_matmul") > 0.5
    top = summary("bf16_matmul").kernels.items[0]
    assert top.name.startswith("nvjet_") and top.tensor_core_rule == "tfobs.nvidia.nvjet"
    assert top.op_name == "jit(<lambda>)/dot_general"


def test_fp32_matmul_without_tf32_is_eligible_but_not_on_tensor_cores() -> None:
    k = summary("fp32_matmul_no_tf32").kernels
    assert tensor_core_share("fp32_matmul_no_tf32") < 0.05  # XProf says 1.0 ("xmma_gemm")
    assert (k.eligible_op_s - k.eligible_op_tensor_core_s) / k.total_s > 0.9
    assert "_ffma_" in k.items[0].name and not k.items[0].uses_tensor_cores
    assert "tensor_core_unused" in {a.code for a in summary("fp32_matmul_no_tf32").advice}


def test_fp32_matmul_at_default_precision_uses_tf32_tensor_cores() -> None:
    assert tensor_core_share("fp32_matmul_tf32") > 0.5
    assert "tf32" in summary("fp32_matmul_tf32").kernels.items[0].name


def test_host_wait_between_steps_is_input_bound() -> None:
    s = summary("input_bound_host_wait")
    assert s.input_bound.verdict == "highly" and s.input_bound.ratio > 0.5
    assert "input_bound" in {a.code for a in s.advice}
    d = gpu("input_bound_host_wait")
    assert d.busy_s / d.span_s < 0.05  # the device is idle while the host reads
    # ... and that idle time is input's, not slow launches' (TfobsKernelLaunchBound quiet)
    assert d.idle_s["input"] / d.span_s > 0.9 and d.idle_s["kernel_launch"] / d.span_s < 0.03


def test_copies_both_ways_are_measured() -> None:
    d = gpu("h2d_d2h_copies")
    mib = 1024 * 1024
    assert d.copy_s["h2d"] > 0 and d.copy_s["d2h"] > 0
    # 64 MiB each way per step, as the case copies them
    assert d.copy_bytes["h2d"] == pytest.approx(64 * mib, rel=0.05)
    assert d.copy_bytes["d2h"] == pytest.approx(64 * mib, rel=0.05)


def test_bf16_convolution_training_step_uses_cudnn_tensor_core_kernels() -> None:
    items = summary("conv_train_bf16").kernels.items
    conv = [k for k in items if k.op_name.endswith("conv_general_dilated")]
    assert conv and all(k.op_tensor_core_eligible for k in conv)
    assert sum(k.total_s for k in conv if k.uses_tensor_cores) > 0.5 * sum(
        k.total_s for k in conv if "workspace" not in k.name)
    assert not next(k for k in items if "init_device_workspace" in k.name).uses_tensor_cores
    assert tensor_core_share("conv_train_bf16") > 0.3


def test_flash_attention_kernels_counted_and_helpers_not() -> None:
    items = summary("flash_attention_bf16").kernels.items
    names = {k.name: k for k in items}
    flash = [k for n, k in names.items() if "sdpa" in n and "flash" in n]
    assert {"fprop", "bprop"} <= {p for k in flash for p in ("fprop", "bprop") if p in k.name}
    assert all(k.uses_tensor_cores for k in flash)
    helpers = [k for n, k in names.items() if "dot_do_o" in n or "convert_dq" in n]
    assert len(helpers) == 2 and not any(k.uses_tensor_cores for k in helpers)
    assert tensor_core_share("flash_attention_bf16") > 0.5


def test_ordinary_transformer_step_is_mostly_on_tensor_cores() -> None:
    # XProf 2.24.2's rules count none of this step's kernels (nvjet GEMMs, cuDNN flash
    # attention, XLA Triton GEMMs): tfobs's rules find most of its kernel time there.
    k = summary("transformer_train_bf16").kernels
    assert tensor_core_share("transformer_train_bf16") > 0.5
    rules = {i.tensor_core_rule for i in k.items if i.uses_tensor_cores}
    assert {"tfobs.nvidia.nvjet", "tfobs.nvidia.warpgroup_mma",
            "tfobs.nvidia.xla_gemm_fusion"} <= rules
    assert not any(r.startswith("xprof.") for r in rules)
