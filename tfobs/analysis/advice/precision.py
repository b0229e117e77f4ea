"""Tensor Cores and precision: XProf's 16-bit statement, eligible ops off Tensor Cores, and
layout conversion kernels (NCHW <-> NHWC transposes)."""

from __future__ import annotations

import re

from tfobs.analysis.advice.rule import (
    GPU,
    JAX_DOCS,
    PROFILER,
    Rule,
    on_gpu,
    one_digit,
    steps_run,
)
from tfobs.summary import Advice, WindowSummary

LOW_16BIT = Rule(
    "low_16bit_compute", "tensor cores and precision",
    "device compute is < 10 % 16-bit (XProf's precision statement, on tfobs's 16-bit "
    "share: kernel types from names and HLO), unless Tensor Core kernels hold >= 50 % of "
    "kernel time",
    "use mixed precision: keras.mixed_precision.set_global_policy('mixed_float16') "
    "(or 'mixed_bfloat16')",
    f"{GPU}: 3. Enable mixed precision and XLA; {PROFILER}: Overview page",
    jax_fix=(
        "use mixed precision: keep params in float32 and compute in bfloat16 "
        "(.astype(jnp.bfloat16) in the step; Flax: dtype=jnp.bfloat16; Keras 3 on JAX: "
        "keras.mixed_precision.set_global_policy('mixed_bfloat16'))"))
TC_UNUSED = Rule(
    "tensor_core_unused", "tensor cores and precision",
    "GPU job and ops eligible for Tensor Cores run >= 10 % of kernel time on kernels "
    "that do not use them",
    "enable mixed precision and make matrix dimensions (batch, units, channels) multiples "
    "of 8",
    f"{GPU}: 3. Enable mixed precision (Tensor Cores; dimensions divisible by 8); "
    f"{PROFILER}: GPU kernel stats",
    jax_fix=(
        "compute in bfloat16 (cast params and inputs with .astype(jnp.bfloat16) in the step; "
        "Flax: dtype=jnp.bfloat16; Keras 3: "
        "keras.mixed_precision.set_global_policy('mixed_bfloat16')), or let float32 matmuls "
        "use TF32 (jax.default_matmul_precision('tensorfloat32')), and make matrix dimensions "
        "multiples of 8"))
LAYOUT = Rule(
    "layout_transposes", "tensor cores and precision",
    "GPU job and layout conversion kernels (NCHW/NHWC transposes) >= 5 % of kernel time; "
    "or a host-only job whose op time holds >= 1 % of the transposes Keras runs around a "
    "channels_first model's pooling layers (`<pooling layer>/transpose*`)",
    "keep one layout end to end: channels_last (NHWC) with mixed precision on Tensor "
    "Cores, no manual transposes between layers",
    f"{GPU}: 2. Debug the performance of one GPU (NHWC layout)")
# On the host: a model built channels_first (NCHW), the GPU layout.
LAYOUT_HOST_FIX = (
    "build the model channels_last (NHWC, Keras's default: drop data_format="
    "'channels_first' from the layers, or keras.config.set_image_data_format("
    "'channels_last')) and feed NHWC batches (transpose once in the input pipeline, or "
    "store the images NHWC): on the CPU Keras transposes around every channels_first "
    "pooling layer, forward and backward, and channels_first is the layout for GPUs "
    "(cuDNN); time a few steps of both layouts, the convolutions' own time included")
FLOAT64 = Rule(
    "float64_compute", "tensor cores and precision",
    "float64 (double) tensors hold >= 50 % of the bytes allocated in the window (10 "
    "allocations or more), or, on GPUs, kernels whose names say float64 (dgemm, double, "
    "f64) hold >= 50 % of kernel time",
    "keep float32: drop dtype='float64' (tf.float64) from layers, variables and "
    "constants, set keras.config.set_floatx('float32') (tf.keras.backend.set_floatx), and "
    "cast the inputs at the pipeline's end (dataset.map(lambda x, y: (tf.cast(x, "
    "tf.float32), y)), or np.float32 arrays: numpy makes float64 by default); keep "
    "float64 only where the numerics need it. float64 runs at a fraction of float32's "
    "rate: on CPUs without oneDNN's kernels and at half the SIMD width, on GPUs at 1/2 to "
    "1/64 of float32's rate and off the TF32 and 16-bit Tensor Core paths",
    f"{PROFILER}: Memory profile tool (memory breakdown table: data type); {GPU}: 3. "
    "Enable mixed precision and XLA",
    jax_fix=(
        "keep float32: leave jax_enable_x64 off (jax.config.update('jax_enable_x64', "
        "False); JAX_ENABLE_X64 unset), and cast params and inputs with "
        ".astype(jnp.float32) (numpy arrays are float64 by default); keep float64 only "
        "where the numerics need it. float64 runs at a fraction of float32's rate: on "
        "CPUs at half the SIMD width, on GPUs at 1/2 to 1/64 of float32's rate and off the "
        "TF32 and 16-bit Tensor Core paths"),
    jax_guide=f"{JAX_DOCS}: Sharp bits (Double (64bit) precision)")
RULES = (LOW_16BIT, TC_UNUSED, LAYOUT, FLOAT64)

LOW_16BIT_PCT = 10.0  # XProf's kLowPrecisionPercentThreshold
TC_SHARE = 0.10
TC_HELD = 0.50  # Tensor Core share of kernel time above which low_16bit_compute is silent
LAYOUT_SHARE = 0.05
# Keras's channels_first transposes on the host, as a share of op time: the layout, not
# their own cost, is the finding (the convolutions run slower in NCHW too), so a small
# share names it.
LAYOUT_HOST_SHARE = 0.01
# float64's share of the window's allocated bytes (or of GPU kernel time) from which it
# is the model's own arithmetic: float64_dense_loop 97 %; every other test capture with
# typed allocations 0 % (summaries_fit's one 4 MiB OneHot allocation is the only
# float64 one: too few allocations to say, hence the floor).
FLOAT64_SHARE = 0.5
FLOAT64_MIN_ALLOCATIONS = 10
_LAYOUT = re.compile(r"(?i)nchwtonhwc|nhwctonchw|transpose|swapdim|shuffle_?tensor")


def check(s: WindowSummary) -> list[Advice]:
    out: list[Advice] = []
    f64 = _float64(s)
    if f64 is not None:
        out.append(f64)
    if s.breakdown_s.get("device_compute", 0.0) > 0:
        pct = 100.0 * s.device_compute_16bit_ratio
        # tfobs's 16-bit share (kernel types from names and HLO); XProf's, which counts only
        # kernels named "half"/"fp16", reads 0 % for bf16 jobs (H100 captures). Where Tensor
        # Cores already hold most kernel time, the advice is not the remedy.
        k = s.kernels
        tensor_core_share = k.tensor_core_s / k.total_s if k.total_s > 0 else 0.0
        if pct < LOW_16BIT_PCT and tensor_core_share < TC_HELD:
            out.append(LOW_16BIT.advice(
                "info",
                f"Only {one_digit(pct)}% of device computation is 16 bit. So you might want "
                "to replace more 32-bit Ops by 16-bit Ops to improve performance (if the "
                "reduced accuracy is acceptable).",
                {"compute_16bit_pct": pct},
                f"16-bit share < {LOW_16BIT_PCT:g} % of device compute (XProf)"))
    k = s.kernels
    if not on_gpu(s) or k.total_s <= 0:
        return out + _channels_first(s)
    # Kernels whose Tensor Core use no name rule can judge are not counted as off them.
    unknown = sum(i.total_s for i in k.items
                  if i.op_tensor_core_eligible and i.tensor_core_unknown)
    off = max(0.0, k.eligible_op_s - k.eligible_op_tensor_core_s - unknown)
    if off / k.total_s >= TC_SHARE:
        top = sorted((i for i in k.items if i.op_tensor_core_eligible
                      and not i.uses_tensor_cores and not i.tensor_core_unknown),
                     key=lambda i: -i.total_s)[:3]
        names = ", ".join(i.op_name or i.name for i in top) or "(not among the top kernels)"
        out.append(TC_UNUSED.advice(
            "warning", f"Ops eligible for Tensor Cores ran {1e3 * off:.2f} ms "
                       f"({100 * off / k.total_s:.0f} % of kernel time) without them "
                       f"(top: {names}).",
            {"eligible_off_tc_s": off, "eligible_op_s": k.eligible_op_s,
             "kernel_s": k.total_s, "share": off / k.total_s,
             "tensor_core_unknown_s": unknown},
            f"eligible op time off Tensor Cores >= {100 * TC_SHARE:g} % of kernel time "
            "(tfobs; eligibility and use are XProf's rules)"))
    layout = [i for i in k.items if _LAYOUT.search(i.name)]
    layout_s = sum(i.total_s for i in layout)
    if layout_s / k.total_s >= LAYOUT_SHARE:
        names = ", ".join(i.name[:60] for i in sorted(layout, key=lambda i: -i.total_s)[:2])
        out.append(LAYOUT.advice(
            "warning", f"Layout conversion kernels take {100 * layout_s / k.total_s:.0f} % "
                       f"of kernel time ({names}).",
            {"layout_s": layout_s, "kernel_s": k.total_s, "share": layout_s / k.total_s},
            f"transpose kernels >= {100 * LAYOUT_SHARE:g} % of kernel time (tfobs)"))
    return out


def _channels_first(s: WindowSummary) -> list[Advice]:
    """layout_transposes on the host: a Keras model built channels_first, which Keras
    transposes around its pooling layers on the CPU."""
    ops = s.ops
    op_s = ops.host_s - sum(st.self_s for st in s.input_pipeline.stages)
    share = ops.channels_first_transpose_s / op_s if op_s > 0 else 0.0
    if on_gpu(s) or share < LAYOUT_HOST_SHARE:
        return []
    per = (f", {1e3 * ops.channels_first_transpose_s / steps_run(s):.2f} ms per step"
           if s.steps.count else "")
    return [LAYOUT.advice(
        "warning",
        "The model computes channels_first (NCHW) on the CPU: Keras transposes each "
        "pooling layer's input to NHWC and back, forward and backward "
        f"({', '.join(ops.channels_first_transpose_ops)}: "
        f"{1e3 * ops.channels_first_transpose_s:.1f} ms in the window{per}, "
        f"{100 * share:.1f} % of op time), and the convolutions run on NCHW tensors too: "
        "the transposes are only part of what the layout costs.",
        {"channels_first_transpose_s": ops.channels_first_transpose_s, "op_s": op_s,
         "share": share},
        f"host-only, Keras's channels_first transposes >= {100 * LAYOUT_HOST_SHARE:g} % of "
        "op time, tf.data's iterators left out (tfobs)", LAYOUT_HOST_FIX)]


def _float64(s: WindowSummary) -> Advice | None:
    """float64_compute: float64 tensors hold most of the allocated bytes, or (GPU) float64
    kernels most of the kernel time."""
    allocated = sum(m.allocated_bytes for m in s.memory)
    f64_bytes = sum(m.allocated_bytes_by_type.get("double", 0) for m in s.memory)
    allocations = sum(m.allocations for m in s.memory)
    share = f64_bytes / allocated if allocated > 0 else 0.0
    k = s.kernels
    f64_kernels = []
    if k.total_s > 0:  # a GPU capture: the kernel name rules load only for one
        from tfobs.analysis.precision import name_f64

        f64_kernels = [i for i in k.items if name_f64(i.name)]
    kernel_s = sum(i.total_s for i in f64_kernels)
    kernel_share = kernel_s / k.total_s if k.total_s > 0 else 0.0
    by_bytes = share >= FLOAT64_SHARE and allocations >= FLOAT64_MIN_ALLOCATIONS
    if not by_bytes and kernel_share < FLOAT64_SHARE:
        return None
    parts = []
    if f64_bytes:
        ops: list[str] = []
        for m in sorted(s.memory, key=lambda m: -m.allocated_bytes_by_type.get("double", 0)):
            ops += [o for o in m.float64_top_ops if o not in ops]
        named = f" (most by {', '.join(ops[:3])})" if ops else ""
        parts.append(f"{100 * share:.0f} % of the bytes allocated in the window "
                     f"({f64_bytes / 2**20:.1f} of {allocated / 2**20:.1f} MiB) are float64 "
                     f"tensors{named}")
    if kernel_s > 0:
        top = sorted(f64_kernels, key=lambda i: -i.total_s)[:2]
        parts.append(f"float64 kernels take {100 * kernel_share:.0f} % of kernel time "
                     f"({', '.join(i.name[:60] for i in top)})")
    return FLOAT64.advice(
        "warning", "; ".join(parts) + ": the model computes in float64 (double precision), "
        "several times slower than float32 on CPUs and most GPUs.",
        {"float64_bytes": float(f64_bytes), "allocated_bytes": float(allocated),
         "float64_share": share, "allocations": float(allocations),
         "float64_kernel_s": kernel_s, "float64_kernel_share": kernel_share},
        f"float64 >= {100 * FLOAT64_SHARE:g} % of allocated bytes ({FLOAT64_MIN_ALLOCATIONS} "
        f"allocations or more) or of GPU kernel time (tfobs)")
