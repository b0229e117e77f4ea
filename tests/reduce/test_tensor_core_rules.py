"""Every Tensor Core / matrix-core name rule, each with a real kernel name and its source."""

from __future__ import annotations

import pytest

from tfobs.analysis import tensor_cores as tc
from tfobs.analysis.tensor_cores import AMD, NVIDIA

# (vendor, kernel name as profilers record it, rule expected to match). The comment on each
# line says where the name was seen.
REAL_NAMES = [
    # XProf's own tests (xprof/utils/kernel_stats_utils_test.cc)
    (NVIDIA, "volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_tn", "xprof.nvidia.s884"),
    # HolisticTraceAnalysis tests/test_timeline.py (A100 PyTorch trace)
    (NVIDIA, "cutlass_80_tensorop_s1688gemm_128x128_16x5_nt_align4", "xprof.nvidia.s1688"),
    # NVIDIA/TensorRT-LLM issue #1541 (cuBLAS on H100)
    (NVIDIA, "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
             "execute_segment_k_off_kernel__5x_cublas", "xprof.nvidia.xmma_gemm"),
    # PyTorch profiler tables on H100 (cuBLASLt), several public perf reports
    (NVIDIA, "nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "tfobs.nvidia.nvjet"),
    (NVIDIA, "nvjet_tst_64x32_64x16_2x2_2cta_h_bz_splitK_TNT", "tfobs.nvidia.nvjet"),
    # CUTLASS 3 profiler / generated sources (NVIDIA/cutlass library manifest)
    (NVIDIA, "cutlass3x_sm90_tensorop_s64x128x16gemm_f16_f16_f32_f16_f16_128x128x64_2x1x1_0_"
             "ttt_align8_warpspecialized_pingpong_epi_tma", "tfobs.nvidia.cutlass_tensorop"),
    # cuDNN convolution on A100, PyTorch profiler output in public perf notes
    (NVIDIA, "sm80_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize256x64x32_"
             "stage3_warpsize4x1x1_g1_tensor16x8x16_execute_kernel__5x_cudnn", "tfobs.nvidia.xmma"),
    # cuDNN v9 fused attention on H100 (PyTorch SDPA cuDNN backend, public FSDP report)
    (NVIDIA, "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x",
     "tfobs.nvidia.warpgroup_mma"),
    (NVIDIA, "cudnn_generated_fort_native_sdpa_sm90_flash_fprop", "tfobs.nvidia.sm90_gemm"),
    # cuDNN v9 runtime engine on A100 (PyTorch SDPA backend sweep, public notes)
    (NVIDIA, "cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_3_64x64x128_4x1x1_"
             "kernel0_0", "tfobs.nvidia.cudnn_runtime"),
    # FlashAttention 2 inside PyTorch (profiler tables)
    (NVIDIA, "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128",
     "tfobs.nvidia.flash_attention"),
    # PyTorch memory-efficient attention (CUTLASS based), public profiler listings
    (NVIDIA, "fmha_cutlassF_bf16_aligned_64x128_rf_sm80", "tfobs.nvidia.flash_attention"),
    # XLA Triton GEMM fusion: XLA names it the same on both vendors; this one is from the
    # MI300 capture in tests/data (XProf counts it on AMD only)
    (NVIDIA, "gemm_fusion_dot_general_1.kd", "tfobs.nvidia.xla_gemm_fusion"),
    # H100 captures in tests/data (recorded__h100_jax0.11.2__*): cuBLASLt, cuDNN v9, CUTLASS
    (NVIDIA, "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NNN", "tfobs.nvidia.nvjet"),
    (NVIDIA, "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x256x32_warpgroupsize2x1x1_"
             "execute_segment_k_off_kernel__5x_cublas", "xprof.nvidia.xmma_gemm"),
    (NVIDIA, "sm90_xmma_wgrad_indexed_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_"
             "tilesize64x64x64_warpgroupsize1x1x1_g1_execute_segment_k_on_kernel__5x_cudnn",
     "tfobs.nvidia.xmma"),
    (NVIDIA, "void cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized_bf16_"
             "256x64_32x4_nhwc_align8>", "xprof.nvidia.16816"),
    (NVIDIA, "_ZN17cutlass__5x_cudnn6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11"
             "threadblock22ImplicitGemmMultistageINS_4gemm9GemmShapeILi64ELi64ELi64EEE"
             "NS6_4warp11MmaTensorOpINS7_ILi32ELi32ELi64EEE", "tfobs.nvidia.cutlass_mma_tensor_op"),
    (NVIDIA, "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_"
             "cga1x1x1_kernel0_0", "tfobs.nvidia.warpgroup_mma"),
    # AMD: hipBLASLt kernels in tests/data/captures/tracelens__mi300_jax08_gemm__tw003
    (AMD, "Cijk_Ailk_Bljk_BBS_BH_MT256x224x64_MI16x16x16x1_SN_1LDSB1_APM1_ABV0_ACED0",
     "xprof.amd.tensile_mi"),
    (AMD, "gemm_fusion_dot_general_1.kd", "xprof.amd.gemm_fusion"),
    # Composable Kernel FP8 GEMM on MI300 (vLLM profiles, public reports)
    (AMD, "void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemmMultiD_ABScale_xdl_cshuffle_v3<"
          "ck::tensor_layout::gemm::RowMajor, c", "xprof.amd._xdl"),
    # MIOpen / Composable Kernel convolution (kernel symbol in ROCm's MIOpen sources)
    (AMD, "gridwise_convolution_forward_implicit_gemm_v4r4_xdlops_nchw_kcyx_nkhw",
     "xprof.amd._xdl"),
    # CK-tile flash attention on MI300 (PyTorch profiler tables)
    (AMD, "void ck_tile::kentry<256, 2, ck_tile::FmhaFwdKernel<...", "tfobs.amd.fmha"),
    # aiter MoE GEMM on MI355X (public kernel tables)
    (AMD, "void ck::kernel_moe_mxgemm_2lds<ck::GridwiseMoeGemmMX_BPreshuffle<",
     "xprof.amd.moe_mxgemm"),
]

# Matrix-shaped kernels that do NOT use Tensor/matrix cores.
NOT_TENSOR_CORE = [
    # Tensile kernel without a matrix-instruction tag (FMA path), rocBLAS naming
    (AMD, "Cijk_Ailk_Bljk_SB_MT64x64x16_SN_GSU1"),
    # the copy and elementwise kernels of the MI300 captures in tests/data
    (AMD, "__amd_rocclr_copyBuffer.kd"),
    (AMD, "loop_convert_fusion.kd"),
    (AMD, "Im3d2Col.kd"),
    # H100 captures in tests/data: cuBLAS FP32 SGEMM on CUDA cores (TF32 off; XProf counts
    # it by "xmma_gemm"), cuDNN's workspace clear, SIMT convolution, attention helpers
    (NVIDIA, "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_"
             "aligna4_alignc4_execute_kernel__5x_cublas"),
    (NVIDIA, "void cask_plugin__5x_cudnn::xmma__5x_cudnn::init_device_workspace_kernel<"
             "xmma__5x_cudnn::implicit_gemm::wgrad_indexed::Kernel_params>"),
    (NVIDIA, "void convolve_common_engine_float_NHWC<__nv_bfloat16, __nv_bfloat16, 128, 5, 5, 3>"),
    (NVIDIA, "void cudnn::fusion::compute_dot_do_o_specialized<true, 64>(void const*)"),
    (NVIDIA, "void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*)"),
    (NVIDIA, "void cutlass__5x_cudnn::Kernel<cutlass__5x_cudnn::reduction::kernel::ReduceSplitK<"
             "cutlass__5x_cudnn::MatrixShape<4, 256>>"),
    # CUDA-core SGEMM (cuBLAS, Ampere) and a PyTorch elementwise kernel
    (NVIDIA, "ampere_sgemm_128x64_nn"),
    (NVIDIA, "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>"),
]


@pytest.mark.parametrize("vendor,name,rule", REAL_NAMES)
def test_rule_matches_real_kernel_name(vendor: str, name: str, rule: str) -> None:
    assert tc.tensor_core_rule(name, vendor) == rule
    # XProf's own rules must give XProf's answer: only xprof.* rules fire with extended off.
    assert tc.uses_tensor_cores(name, vendor, extended=False) == rule.startswith("xprof.")


@pytest.mark.parametrize("vendor,name", NOT_TENSOR_CORE)
def test_non_tensor_core_kernels_stay_unflagged(vendor: str, name: str) -> None:
    assert tc.tensor_core_rule(name, vendor) == ""


def test_every_tfobs_rule_has_a_real_example() -> None:
    covered = {rule for _, _, rule in REAL_NAMES}
    missing = [r.id for r in tc.ALL_RULES if not r.from_xprof and r.id not in covered]
    assert missing == []


def test_vendor_decides_the_xprof_rule_set() -> None:
    # XProf applies the NVIDIA list to NVIDIA planes only: an AMD plane ignores "hmma".
    assert tc.uses_tensor_cores("volta_h884gemm", NVIDIA, extended=False)
    assert not tc.uses_tensor_cores("volta_h884gemm", AMD, extended=False)
    assert not tc.uses_tensor_cores("volta_h884gemm", "", extended=False)
    # Unknown vendor: tfobs tries every vendor's rules.
    assert tc.tensor_core_rule("volta_h884gemm", "") == "xprof.nvidia.h884"
    assert tc.vendor_of("Nvidia") == NVIDIA and tc.vendor_of("AMD") == AMD
    assert tc.vendor_of(None) == "" and tc.vendor_of("Intel") == ""


@pytest.mark.parametrize("op,equation,eligible", [
    ("model/conv2d/Conv2D", "", True),
    ("model/dense/MatMul", "", True),
    ("MatMul", "", False),  # XProf wants "/MatMul"
    ("model/dense/BatchMatMulV2", "", True),
    ("model/lstm/CudnnRNNV3", "", True),
    ("jit(dot)/dot_general", "", True),
    ("jit(forward_3d_conv)/conv_general_dilated", "", True),
    ("model/einsum/Einsum", "ab,bc->ac", True),
    ("model/einsum/Einsum", "abc->acb", False),
    ("model/dense/BiasAdd", "", False),
])
def test_op_eligibility_follows_xprof(op: str, equation: str, eligible: bool) -> None:
    assert tc.op_tensor_core_eligible(op, equation) is eligible
