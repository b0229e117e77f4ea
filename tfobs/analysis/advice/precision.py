"""Tensor Cores and precision: XProf's 16-bit statement, eligible ops off Tensor Cores, and
layout conversion kernels (NCHW <-> NHWC transposes)."""

from __future__ import annotations

import re

from tfobs.analysis.advice.rule import GPU, PROFILER, Rule, on_gpu, one_digit
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
    "GPU job and layout conversion kernels (NCHW/NHWC transposes) >= 5 % of kernel time",
    "keep one layout end to end: channels_last (NHWC) with mixed precision on Tensor "
    "Cores, no manual transposes between layers",
    f"{GPU}: 2. Debug the performance of one GPU (NHWC layout)")
RULES = (LOW_16BIT, TC_UNUSED, LAYOUT)

LOW_16BIT_PCT = 10.0  # XProf's kLowPrecisionPercentThreshold
TC_SHARE = 0.10
TC_HELD = 0.50  # Tensor Core share of kernel time above which low_16bit_compute is silent
LAYOUT_SHARE = 0.05
_LAYOUT = re.compile(r"(?i)nchwtonhwc|nhwctonchw|transpose|swapdim|shuffle_?tensor")


def check(s: WindowSummary) -> list[Advice]:
    out: list[Advice] = []
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
        return out
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
