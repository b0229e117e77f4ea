"""16-bit share and Tensor Core "unknown" on GPU captures: tfobs's figures where XProf's
name rules cannot see, with XProf's figure kept beside them.

Real captures: the H100 JAX 0.11.2 recordings (tests/data/captures/recorded__h100_*) and the
AMD MI300X ones (tracelens__*); XProf 2.24.2 runs on a fresh copy at test time. Kernels no
name rule can judge (a Pallas/Triton kernel named `kernel`) are not in any capture here, so
that case is a synthetic XSpace built in the test (`_mock_gpu`).
"""

from __future__ import annotations

import pathlib
import tempfile

import pytest

import tfobs
from tests.conftest import CAPTURES
from tests.support import synthetic_gpu
from tests.support.xprof_reference import reference, run_tool
from tfobs.analysis import precision

pytest.importorskip("xprof")

H100 = {p.name.split("__")[-1].removesuffix(".xplane.pb"): p
        for p in CAPTURES.glob("recorded__h100_jax0.11.2__*.xplane.pb")}
GPU_CAPTURES = sorted(CAPTURES.glob("recorded__h100_*.xplane.pb")) + sorted(
    CAPTURES.glob("tracelens__mi300_*.xplane.pb"))


def _xprof_16bit(capture: pathlib.Path) -> float:
    tables = reference(str(capture), "overview_page")
    for t in tables:
        value = t.get("p", {}).get("device_compute_16bit_percent")
        if value is not None:
            return float(value.rstrip("%")) / 100.0
    raise AssertionError("XProf's overview has no 16-bit figure")


@pytest.mark.parametrize("name", [
    "sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x64",
    "sm90_xmma_wgrad_indexed_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc",
    "void cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized_bf16_256x64>",
    "void convolve_common_engine_float_NHWC<__nv_bfloat16, __nv_bfloat16, 128, 5, 5, 3>",
    "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NNN",
    "nvjet_hsh_256x128_64x4_2x1_v_bz_coopB_TNN",
    "sm90_xmma_gemm_e4m3e4m3_bf16f32_f32_tn_n_tilesize128x128x128",
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64",
    "volta_h884gemm_64x64_ldg8_nn",
])
def test_16bit_kernel_names(name: str) -> None:
    assert precision.name_width(name) == 16
    assert precision.kernel_width(name, 32) == 16  # the name's type wins over the HLO's


@pytest.mark.parametrize("name", [
    "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma",
    "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x256x32_warpgroupsize2x1x1",
    "nvjet_sm90_sss_128x128_64x6_2x1_v_bz_NNT",
])
def test_32bit_kernel_names(name: str) -> None:
    assert precision.name_width(name) == 32


def test_unnamed_types_come_from_the_hlo_instruction_then_xprofs_rule() -> None:
    assert precision.name_width("loop_add_fusion") == 0
    assert precision.kernel_width("loop_add_fusion", 16) == 16
    assert precision.kernel_width("loop_add_fusion", 0) == 32
    assert precision.kernel_width("my_half_kernel", 0) == 16  # XProf's "half"


@pytest.mark.parametrize("capture", GPU_CAPTURES, ids=lambda p: p.name.split(".")[0])
def test_16bit_share_is_the_kernels_and_xprofs_figure_is_kept(capture: pathlib.Path) -> None:
    s = tfobs.analyze(capture, top_n=1000)
    k = s.kernels
    assert s.device_compute_16bit_ratio_xprof == pytest.approx(_xprof_16bit(capture),
                                                                abs=0.0005)
    assert k.total_s > 0
    assert s.device_compute_16bit_ratio == pytest.approx(k.compute_16bit_s / k.total_s)
    # every kernel row is 16 or 32 bits, and the 16-bit rows add up to the figure
    assert {i.width_bits for i in k.items} <= {16, 32}
    assert sum(i.total_s for i in k.items if i.width_bits == 16) == pytest.approx(
        k.compute_16bit_s, rel=1e-6)


def test_bf16_and_fp32_captures_read_as_what_they_ran() -> None:
    ratio = {case: tfobs.analyze(p).device_compute_16bit_ratio for case, p in H100.items()}
    # XProf reads 0 on all of them; tfobs reads the bf16 ones as bf16
    assert ratio["bf16_matmul"] == pytest.approx(1.0)
    assert ratio["conv_train_bf16"] > 0.8 and ratio["flash_attention_bf16"] > 0.7
    assert ratio["transformer_train_bf16"] > 0.3
    for case in ("fp32_matmul_no_tf32", "fp32_matmul_tf32", "launch_bound_tiny_ops",
                 "h2d_d2h_copies"):
        assert ratio[case] == 0.0, case


def _opaque_capture() -> bytes:
    K = synthetic_gpu.Kernel
    return synthetic_gpu.build([
        # a Pallas matmul: Triton names the kernel `kernel`
        K("kernel", 0, 400, tf_op="jit(step)/pallas_call"),
        # a library GEMM no rule knows, of a matrix op
        K("acme_gemm_128x128_kernel", 500, 300, tf_op="model/dense/MatMul"),
        # a cuBLAS Tensor Core GEMM (known) and an elementwise fusion (known: no MMA)
        K("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 900, 200,
          tf_op="model/dense_1/MatMul"),
        K("loop_add_fusion", 1200, 100, tf_op="jit(step)/add"),
    ])


def test_kernels_no_rule_can_judge_are_unknown_with_their_time_mock_gpu() -> None:
    from tfobs.analysis.kernels import reduce_kernels
    from tfobs.xspace.reader import parse

    data = _opaque_capture()
    k = reduce_kernels(parse(data))
    rows = {i.name: i for i in k.items}
    assert rows["kernel"].tensor_core_unknown and not rows["kernel"].uses_tensor_cores
    assert rows["acme_gemm_128x128_kernel"].tensor_core_unknown
    assert rows["sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"].uses_tensor_cores
    assert not rows["loop_add_fusion"].tensor_core_unknown
    assert k.tensor_core_unknown_s == pytest.approx(700e-6)
    assert k.tensor_core_s == pytest.approx(200e-6)
    # XProf counts the opaque kernels as not on Tensor Cores
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "opaque.xplane.pb"
        path.write_bytes(data)
        table = run_tool(path, "kernel_stats")
    cols = [c["id"] for c in table["cols"]]
    xprof = {}
    for row in table["rows"]:
        v = dict(zip(cols, (c.get("v") for c in row["c"]), strict=False))
        xprof[v["kernel_name"]] = v["is_kernel_using_tensor_core"]
    assert xprof["kernel"] is False and xprof["acme_gemm_128x128_kernel"] is False


@pytest.mark.parametrize(("name", "width"), [
    # PyTorch ATen, FlashAttention, xFormers, CUTLASS 3, Eigen, cuBLASLt split-K, Ada fp8
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<"
     "c10::BFloat16>, at::detail::Array<char*, 3> >(int)", 16),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>"
     "(float*, float const*, int)", 32),
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 32, 4, false, false, "
     "cutlass::half_t> >(Flash_fwd_params)", 16),
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<"
     "cutlass::bfloat16_t, cutlass::arch::Sm80, true, 64, 64, 64>::Params)", 16),
    ("cutlass3x_sm90_tensorop_gemm_f16_f16_f32_void_f16_128x128x64_1x1x1_0_tnn_align8_"
     "warpspecialized_cooperative_epi_tma", 16),
    ("void Eigen::internal::EigenMetaKernel<Eigen::TensorEvaluator<Eigen::TensorAssignOp<"
     "Eigen::TensorMap<Eigen::Tensor<Eigen::half, 1, 1, long>, 16> >, Eigen::GpuDevice>, "
     "long>(long)", 16),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, __nv_bfloat16, __nv_bfloat16, float, "
     "__nv_bfloat16, true, false, false>(cublasLt::cublasSplitKParams<float>)", 16),
    ("sm89_xmma_gemm_e4m3e4m3_f32f32_f32_tn_n_tilesize128x128x64_stage3_warpsize2x2x1", 16),
    ("nvjet_sm100_tst_256x128_64x4_2x1_2cta_h_bz_coopA_TNT", 16),
    ("turing_fp16_s1688gemm_fp16_256x128_ldg8_f2f_tn", 16),
    ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn", 16),
    # TF32 and fp32 libraries' kernels: 32-bit inputs
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_tf32_128x128_16x4_tt_align4>"
     "(cutlass_80_tensorop_s1688gemm_tf32_128x128_16x4_tt_align4::Params)", 32),
    ("sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16", 32),
    ("void implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false, false, true>"
     "(int, int, int)", 32),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int=512, bool=1, int=1>"
     "(cudnnTensorStruct, float const*)", 32),
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, "
     "false>(float, float)", 32),
    # no type in the name: the HLO instruction's, else XProf's rule
    ("ampere_sgemm_128x64_tn", 0),
    ("loop_multiply_fusion", 0),
])
def test_kernel_names_of_more_libraries(name: str, width: int) -> None:
    assert precision.name_width(name) == width
