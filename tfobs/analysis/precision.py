"""Each GPU kernel's arithmetic width and whether its Tensor Core use can be judged.

XProf's 16-bit figure (`ClassifyGpuCompute`) counts a kernel as 16-bit only when its name
says "half" or "fp16" (or its `tensor_shapes` stat says "half"): cuDNN's `..._f16f16_...`,
cuBLAS's `..._bf16bf16_...`, cuBLASLt's `nvjet_..._tst_...` and every XLA kernel of a bf16
program read as 32-bit. tfobs reads, in order: the type a library kernel's name states (the
first type in its template arguments, else in its name: `bf16`, `f16`, `half`, `e4m3`,
`e5m2`, `f32`, `tf32`, ...; cuBLASLt's `nvjet_<a><c><d>_` letters), then the types of the
kernel's HLO instruction (`hlo_ops.programs`), then XProf's rule.

Tensor Core use is judged from names (`tensor_cores.py`); a kernel no name rule can judge
(a Pallas or Triton kernel named `kernel`, a custom call, an unknown library kernel of a
matrix op) is "unknown", not "no": its time is reported apart.
"""

from __future__ import annotations

import re

# A word of the name (split at anything not a letter or digit) that is one type or a run of
# them ("bf16", "f16f16", "bf16bf16", "f32f32"); the first type of the run counts.
_TYPE_RUN = re.compile(r"(?:bf16|fp16|f16|e4m3|e5m2|fp8|f8|fp4|tf32|fp32|f32|fp64|f64)+",
                       re.IGNORECASE)
_TYPE_FIRST = re.compile(r"bf16|fp16|f16|e4m3|e5m2|fp8|f8|fp4|tf32|fp32|f32|fp64|f64",
                         re.IGNORECASE)
_TYPE_WORDS = {"bfloat16": "bf16", "half": "f16", "float": "f32", "double": "f64"}
_WORD = re.compile(r"[A-Za-z0-9]+")
# Volta/Turing/Ampere MMA shapes that name a half-precision kernel (volta_h884gemm_...,
# turing_h1688gemm_..., ampere_h16816gemm_...).
_HALF_MMA = re.compile(r"^h(884|1688|16816)")
_LOW = {"bfloat16", "bf16", "fp16", "f16", "half", "e4m3", "e5m2", "fp8", "f8", "fp4"}
# cuBLASLt's JIT kernels: nvjet_[smXX_]<A/B type><compute><D type>_..., h: fp16, t: bf16,
# s: fp32, d: fp64, q/e: fp8 (the letters seen in cuBLASLt 12/13 names).
_NVJET = re.compile(r"nvjet_(?:sm\d+a?_)?([a-z])([a-z])([a-z])_")
_NVJET_LOW = frozenset("hteq")
_NVJET_WIDE = frozenset("sd")


def name_width(name: str) -> int:
    """16 or 32 where the kernel's name states its input type, else 0."""
    m = _NVJET.search(name)
    if m:
        a = m.group(1)
        return 16 if a in _NVJET_LOW else 32 if a in _NVJET_WIDE else 0
    lt = name.find("<")
    for text in ((name[lt:], name[:lt]) if lt >= 0 else (name,)):
        for word in _WORD.findall(text):
            low = word.lower()
            token = _TYPE_WORDS.get(low)
            if token is None and _HALF_MMA.match(low):
                token = "f16"
            if token is None and _TYPE_RUN.fullmatch(word):
                first = _TYPE_FIRST.match(word)
                token = first.group(0).lower() if first else None
            if token is not None:
                return 16 if token in _LOW else 32
    return 0


# Library kernels of double precision by their BLAS letter: cuBLAS's dgemm/zgemm (and
# gemv, trsm, ...), cuBLAS/CUTLASS's tensor-op `d884gemm`; hipBLAS's the same.
_F64_BLAS = re.compile(r"^(?:[dz](?:gemm|gemv|trsm|syrk|symm|trmm|dot|axpy|scal)|d\d+gemm)",
                       re.IGNORECASE)


def name_f64(name: str) -> bool:
    """Whether a kernel's name says it computes in float64: "double" among its words
    (Eigen's `Tensor<double, ...>`), a type run starting with f64/fp64, a double BLAS
    kernel (`dgemm`, `d884gemm`) or cuBLASLt's `nvjet_d.._`."""
    m = _NVJET.search(name)
    if m:
        return m.group(1) == "d"
    for word in _WORD.findall(name):
        low = word.lower()
        if low == "double" or _F64_BLAS.match(low):
            return True
        if _TYPE_RUN.fullmatch(word):
            first = _TYPE_FIRST.match(word)
            if first and first.group(0).lower() in ("f64", "fp64"):
                return True
    return False


def xprof_width(name: str) -> int:
    """XProf's rule without shapes: 16 where the name says "half" or "fp16", else 32."""
    return 16 if "half" in name or "fp16" in name else 32


def kernel_width(name: str, hlo_bits: int = 0) -> int:
    """16 or 32: the name's type, else the HLO instruction's, else XProf's rule."""
    return name_width(name) or hlo_bits or xprof_width(name)


# Kernels whose names say they run no matrix instructions although they serve a matrix op
# (split-K reductions, padding and layout helpers, cuDNN's direct convolution engines).
_CUDA_CORE_HELPERS = re.compile(
    r"ReduceSplitK|splitKreduce|reduction::kernel|AddPadding|nchwToNhwc|nhwcToNchw|"
    r"convolve_common_engine|init_device_workspace|_ffma_|_simt_|OGradDotO|ConvertQGrad|"
    r"dot_do_o|convert_dq|splitkv_combine|SplitKVCombine|redzone|memset|transpose",
    re.IGNORECASE)
# Names that say nothing of the kernel's instructions: a Pallas or Triton kernel's default
# name, custom calls, Mosaic GPU kernels.
_OPAQUE = re.compile(r"^(kernel|main|triton_|pallas|mosaic|custom[-_]call|__triton)",
                     re.IGNORECASE)


def tensor_core_unknown(name: str, uses_tc: bool, op_eligible: bool) -> bool:
    """Whether no name rule can say if the kernel used Tensor Cores: no rule matched, and
    its name is opaque or its op is a matrix op while the name is no known helper."""
    if uses_tc:
        return False
    if _OPAQUE.search(name):
        return True
    return op_eligible and not _CUDA_CORE_HELPERS.search(name)
