"""Which kernels use Tensor Cores (NVIDIA) or matrix cores (AMD), and which ops could.

XProf decides from the kernel's name alone, with one list of name rules per GPU vendor
(`xprof/utils/kernel_stats_utils.cc`; the AMD list and the JAX op names were read off
xprof 2.24.2's behaviour). `extended=False` gives exactly XProf's answer. The extended
answer (tfobs's figures) differs in two ways, each rule with an id so a report can say *why*
a kernel counts: `tfobs.*` rules add library names XProf does not know yet (cuBLASLt
`nvjet`, CUTLASS 3 and mangled CUTLASS names, Hopper/Blackwell MMA kernels, cuDNN's
runtime-compiled and fused-attention kernels, flash attention, CK-tile attention), and a
short list of CUDA-core kernels XProf's fragments catch by their library prefix (cuBLAS's
FFMA SGEMM, workspace initialisers) counts as no Tensor Core use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NVIDIA = "nvidia"
AMD = "amd"


@dataclass(frozen=True)
class Rule:
    id: str  # "xprof.nvidia.hmma", "tfobs.nvidia.nvjet", ...
    vendor: str  # NVIDIA | AMD
    pattern: re.Pattern[str]
    about: str  # what the rule recognises, for the README and reports
    # Names the pattern also matches that run no matrix instructions (tfobs rules only).
    unless: re.Pattern[str] | None = None

    def matches(self, name: str) -> bool:
        return bool(self.pattern.search(name)) and not (
            self.unless is not None and self.unless.search(name))

    @property
    def from_xprof(self) -> bool:
        return self.id.startswith("xprof.")


def _substrings(vendor: str, words: tuple[str, ...], about: str) -> list[Rule]:
    return [
        Rule(f"xprof.{vendor}.{w}", vendor, re.compile(re.escape(w)), about) for w in words
    ]


# XProf's NVIDIA list: case-sensitive substrings (volta_h884gemm, turing_fp16_s1688cudnn...).
_XPROF_NVIDIA = _substrings(
    NVIDIA,
    (
        "16816", "c1688", "conv1x1", "conv2d_c1_k1", "dgrad_1x1_stride_2x2", "direct_group",
        "first_layer_wgrad_kernel", "h1688", "h884", "hmma", "i16832", "i8816", "s884",
        "s1688", "xmma_gemm", "xmma_implicit_gemm", "xmma_sparse_conv", "xmma_sparse_gemm",
        "xmma_warp_specialized_implicit_gemm",
    ),
    "XProf's cuBLAS/cuDNN/CUTLASS 2 name fragments",
)

# XProf's AMD list: substrings plus the Tensile matrix-instruction tag `_MI<m>x<n>x<k>`.
_XPROF_AMD = _substrings(
    AMD,
    (
        "mfma", "wmma", "gemm_fusion", "attn_fwd", "FMHA_FWD", "bwd_kernel_",
        "miopenSp3AsmConvRage", "moe_mxgemm", "Custom_Cijk_", "_xdl",
    ),
    "XProf's ROCm library name fragments",
) + _substrings(
    AMD,
    # In xprof 2.24.2's wheel, not in its published source (found by probing the wheel).
    ("TileFmhaShape<", "TileFmhaBwdShape<", "TileGemmShape<", "TileFlatmmShape<",
     "TileSageAttnShape<"),
    "XProf's CK-tile tile-shape template names (attention, GEMM, flat-MM, SageAttention)",
) + [
    Rule(
        "xprof.amd.tensile_mi",
        AMD,
        re.compile(r"_MI\d+x\d+x\d+"),
        "hipBLASLt/rocBLAS Tensile kernels with a matrix instruction tag (Cijk_..._MI16x16x16x1)",
    )
]

# Attention library helpers that do no matrix math: the backward pass's dO.O row sums
# (FMHA `OGradDotO`, flash-attention `dot_do_o`), dQ conversion (`ConvertQGrad`,
# `convert_dq`) and split-KV combination (`splitkv_combine`, `SplitKVCombine`).
_ATTENTION_HELPERS = re.compile(
    r"OGradDotO|ConvertQGrad|dot_do_o|convert_dq|splitkv_combine|SplitKVCombine",
    re.IGNORECASE)

# Kernels XProf's fragments (or tfobs's own) catch by a library prefix although they run on
# CUDA cores, seen on H100 (tests/data/captures/recorded__h100_*): cuBLAS's FFMA SGEMM
# `sm80_xmma_gemm_f32f32_f32f32_f32_..._ffma_...` (true FP32, TF32 off), SIMT variants, and
# cuDNN's `init_device_workspace_kernel<xmma...>`, which only clears a workspace. With the
# extended rules these count as no Tensor Core use even where XProf says otherwise.
_NOT_MATRIX = {
    NVIDIA: re.compile(r"_ffma_|_simt_|init_device_workspace"),
}

# tfobs's additions, checked only when XProf's rules found nothing.
_TFOBS_NVIDIA = [
    Rule("tfobs.nvidia.nvjet", NVIDIA, re.compile(r"nvjet_"),
         "cuBLASLt JIT GEMM kernels on Hopper and Blackwell (nvjet_tst_..., nvjet_sm100_...)"),
    Rule("tfobs.nvidia.cutlass_tensorop", NVIDIA, re.compile(r"tensorop"),
         "CUTLASS 2 and 3 Tensor Core kernels (cutlass3x_sm90_tensorop_..., cutlass_tensorop_...)"),
    Rule("tfobs.nvidia.cutlass_mma_tensor_op", NVIDIA, re.compile(r"MmaTensorOp"),
         "CUTLASS kernels recorded by their mangled C++ name (cuDNN's ImplicitGemmConvolution "
         "with a warp-level MmaTensorOp)"),
    Rule("tfobs.nvidia.xmma", NVIDIA, re.compile(r"xmma_"),
         "cuBLAS/cuDNN XMMA kernels XProf's fragments miss (sm80_xmma_fprop_implicit_gemm_...)"),
    Rule("tfobs.nvidia.warpgroup_mma", NVIDIA, re.compile(r"wgmma|gmma_|tcgen05|umma_"),
         "Hopper warpgroup MMA and Blackwell tcgen05 kernels"),
    Rule("tfobs.nvidia.sm90_gemm", NVIDIA,
         re.compile(r"sm(90|100|120)a?_\w*(gemm|fprop|dgrad|wgrad|fmha|sdpa|flash)"),
         "Hopper/Blackwell GEMM, convolution and attention kernels named sm90_/sm100_"),
    Rule("tfobs.nvidia.cudnn_runtime", NVIDIA, re.compile(r"cudnn_generated_"),
         "cuDNN v9 runtime-compiled engines (cudnn_generated_fort_native_sdpa_...)"),
    Rule("tfobs.nvidia.flash_attention", NVIDIA,
         re.compile(r"flash_fwd|flash_bwd|fmha|FlashAttention|Fmha"),
         "flash / memory-efficient attention kernels (flash_fwd_kernel, fmha_cutlassF_...)",
         _ATTENTION_HELPERS),
    Rule("tfobs.nvidia.xla_gemm_fusion", NVIDIA, re.compile(r"gemm_fusion|triton_gemm"),
         "XLA's Triton GEMM fusions (XProf counts these on AMD only)"),
]

_TFOBS_AMD = [
    Rule("tfobs.amd.fmha", AMD, re.compile(r"[Ff]mha|FMHA|flash_attn|mha_fwd|mha_bwd"),
         "CK-tile / aiter flash attention kernels (ck_tile::FmhaFwdKernel, fmha_fwd_...)",
         _ATTENTION_HELPERS),
]

XPROF_RULES: dict[str, tuple[Rule, ...]] = {
    NVIDIA: tuple(_XPROF_NVIDIA),
    AMD: tuple(_XPROF_AMD),
}
TFOBS_RULES: dict[str, tuple[Rule, ...]] = {
    NVIDIA: tuple(_TFOBS_NVIDIA),
    AMD: tuple(_TFOBS_AMD),
}
ALL_RULES: tuple[Rule, ...] = (
    *_XPROF_NVIDIA, *_XPROF_AMD, *_TFOBS_NVIDIA, *_TFOBS_AMD
)


def vendor_of(device_vendor: object) -> str:
    """Normalise a plane's `device_vendor` stat ("Nvidia", "AMD") to NVIDIA | AMD | ""."""
    text = str(device_vendor or "").strip().lower()
    if text.startswith("nvidia"):
        return NVIDIA
    if text.startswith(("amd", "advanced micro")):
        return AMD
    return ""


def _vendors(vendor: str) -> tuple[str, ...]:
    """The vendors whose rules apply: the plane's, or every one where it is unknown."""
    return (vendor,) if vendor in XPROF_RULES else (NVIDIA, AMD)


def _rules_for(vendor: str, extended: bool) -> tuple[Rule, ...]:
    vendors = _vendors(vendor)
    rules: list[Rule] = []
    for v in vendors:
        rules.extend(XPROF_RULES[v])
    if extended:
        for v in vendors:
            rules.extend(TFOBS_RULES[v])
    return tuple(rules)


_CACHE: dict[tuple[str, str, bool], str] = {}
_CACHE_MAX = 20_000


def tensor_core_rule(kernel_name: str, vendor: str, *, extended: bool = True) -> str:
    """The id of the first rule that says `kernel_name` uses Tensor/matrix cores, else "".

    `vendor` is NVIDIA, AMD or "" (unknown: every vendor's rules apply; XProf itself
    counts nothing there). `extended=False` gives XProf's answer for a known vendor.
    """
    key = (kernel_name, vendor, extended)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    found = ""
    if (vendor or extended) and not (extended and _vetoed(kernel_name, vendor)):
        for rule in _rules_for(vendor, extended):
            if rule.matches(kernel_name):
                found = rule.id
                break
    if len(_CACHE) < _CACHE_MAX:
        _CACHE[key] = found
    return found


def _vetoed(kernel_name: str, vendor: str) -> bool:
    return any(v in _NOT_MATRIX and _NOT_MATRIX[v].search(kernel_name)
               for v in _vendors(vendor))


def uses_tensor_cores(kernel_name: str, vendor: str, *, extended: bool = True) -> bool:
    return bool(tensor_core_rule(kernel_name, vendor, extended=extended))


# XProf's op eligibility (IsOpTensorCoreEligible), plus the JAX names xprof 2.24.2 adds.
_OP_ENDS = (
    "Conv2D", "Conv2DBackpropFilter", "Conv2DBackpropInput", "Conv3D",
    "DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropFilter",
    "DepthwiseConv2dNativeBackpropInput", "/MatMul", "FusedMatMul", "/CudnnRNN",
    "XlaDot", "XlaDotV2",
)
_OP_CONTAINS = (
    "BatchMatMul", "CudnnRNNV", "CudnnRNNForward", "CudnnRNNBackprop",
    "dot_general", "conv_general_dilated",
)


def op_tensor_core_eligible(op_name: str, equation: str = "") -> bool:
    """Whether the framework op could run on Tensor Cores (XProf's rule, by op name)."""
    if equation and _einsum_two_operands(equation):
        return True
    return op_name.endswith(_OP_ENDS) or any(w in op_name for w in _OP_CONTAINS)


def _einsum_two_operands(equation: str) -> bool:
    parts = equation.split("->")
    return len(parts) == 2 and len(parts[0].split(",")) == 2
