"""Memory: peak near the allocator's capacity, fragmentation at the peak (XProf's figures)."""

from __future__ import annotations

from tfobs.analysis.advice.rule import GPU, PROFILER, Rule
from tfobs.analysis.memory import device_allocator
from tfobs.summary import Advice, WindowSummary

NEAR_CAPACITY = Rule(
    "memory_near_capacity", "memory",
    "an allocator's peak use >= 90 % of its capacity",
    "lower peak memory: smaller batch, mixed precision, fewer live activations "
    "(rematerialization), or let memory grow (tf.config.experimental.set_memory_growth)",
    f"{PROFILER}: Memory profile tool; {GPU}: 3. Enable mixed precision")
FRAGMENTATION = Rule(
    "memory_fragmentation", "memory",
    "an allocator >= 50 % fragmented at its peak, a peak of 1 GiB or 10 % of its capacity "
    "or more",
    "allocate large, long-lived buffers first and keep shapes static so the allocator can "
    "reuse blocks; TF_GPU_ALLOCATOR=cuda_malloc_async on GPUs",
    f"{PROFILER}: Memory profile tool (fragmentation)")
# A host allocator's fix: the GPU allocator setting does not apply.
_HOST_FIX = FRAGMENTATION.fix.partition("; TF_GPU_ALLOCATOR")[0]
RULES = (NEAR_CAPACITY, FRAGMENTATION)

CAPACITY_SHARE = 0.90
FRAG = 0.5
# Fragmentation of a small heap costs nothing: a CPU job's few megabytes of a host's
# gigabytes read 56 % fragmented (tf.keras fit, jit_compile) and can never run short.
FRAG_MIN_PEAK = 1 << 30
FRAG_MIN_SHARE = 0.10


def check(s: WindowSummary) -> list[Advice]:
    out: list[Advice] = []
    for m in s.memory:
        use = m.peak_bytes / m.capacity_bytes if m.capacity_bytes > 0 else 0.0
        if use >= CAPACITY_SHARE:
            out.append(NEAR_CAPACITY.advice(
                "warning", f"Allocator {m.allocator} peaked at {100 * use:.0f} % of its "
                           f"capacity ({m.peak_bytes} of {m.capacity_bytes} bytes).",
                {"peak_bytes": float(m.peak_bytes), "capacity_bytes": float(m.capacity_bytes),
                 "peak_share": use}, f"peak >= {100 * CAPACITY_SHARE:g} % of capacity (tfobs)"))
        if m.fragmentation_ratio >= FRAG and (m.peak_bytes >= FRAG_MIN_PEAK
                                              or use >= FRAG_MIN_SHARE):
            out.append(FRAGMENTATION.advice(
                "warning", f"Allocator {m.allocator} was {100 * m.fragmentation_ratio:.0f}% "
                           "fragmented at its peak.",
                {"fragmentation": m.fragmentation_ratio, "peak_bytes": float(m.peak_bytes)},
                f"fragmentation at peak >= {100 * FRAG:g} %, peak >= 1 GiB or "
                f"{100 * FRAG_MIN_SHARE:g} % of capacity (tfobs)",
                "" if device_allocator(m.allocator) else _HOST_FIX))
    return out
