"""Several devices: XProf's 'Device Collective Communication' statement, uneven replicas."""

from __future__ import annotations

from tfobs.analysis.advice.rule import (
    GPU,
    HIGH_PCT,
    MODERATE_PCT,
    PROFILER,
    Rule,
    category_advice,
)
from tfobs.summary import Advice, WindowSummary

COLLECTIVES = Rule(
    "device_collectives_bound", "multi-device",
    "'Device Collective Communication' >= 3 % of step time (XProf: moderate >= 3 %, "
    "high >= 15 %)",
    "overlap and shrink gradient all-reduce: larger batches per replica, fewer and larger "
    "all-reduce packs, NCCL collectives, mixed precision gradients",
    f"{GPU}: 4. Optimize performance on multi-GPU single host (gradient AllReduce)")
UNEVEN = Rule(
    "uneven_replicas", "multi-device",
    ">= 2 devices and the busiest one busy >= 20 % longer than the least busy",
    "balance the work: an equal global batch split per replica, no device-specific ops, "
    "the same input rate on every replica",
    f"{GPU}: 4. Optimize performance on multi-GPU single host; {PROFILER}: Trace viewer")
HOST_COLLECTIVES = Rule(
    "host_collectives_bound", "multi-device",
    "a collective op runs on the host (CollectiveReduceV2 and kin: tf.distribute's "
    "all-reduce across replicas, devices or workers) during >= 3 % of step time (tfobs: "
    "XProf counts it as host compute); warning from 15 %",
    "the step waits in the all-reduce for its slowest replica (and, across workers, the "
    "network): compare the workers' step times (tfobs_step_duration_seconds by tf_task) "
    "for a straggler and give every replica the same work; send fewer, larger all-reduces "
    "(a larger batch per replica; "
    "tf.distribute.experimental.CommunicationOptions(bytes_per_pack=...))",
    f"{GPU}: 4. Optimize performance on multi-GPU single host (gradient AllReduce); "
    "Multi-worker training with Keras "
    "(tensorflow.org/tutorials/distribute/multi_worker_with_keras)")
RULES = (COLLECTIVES, HOST_COLLECTIVES, UNEVEN)

UNEVEN_SPREAD = 0.20

# XProf's sentence (DeviceCollectivesAnalysis), after the percentage.
COLLECTIVES_TEXT = (" % of the total step time sampled is spent on 'Device Collective "
                    "Communication'.")


def check(s: WindowSummary) -> list[Advice]:
    found = category_advice(COLLECTIVES, s, "device_collectives", "collectives",
                            COLLECTIVES_TEXT)
    out: list[Advice] = [found] if found else []
    st = s.steps
    if st.count and st.mean_s > 0 and s.ops.host_collectives_s > 0:
        per_step = s.ops.host_collectives_s / st.count
        pct = 100.0 * per_step / st.mean_s
        if pct >= MODERATE_PCT:
            out.append(HOST_COLLECTIVES.advice(
                "warning" if pct >= HIGH_PCT else "info",
                f"{pct:.1f} % of step time ({1e3 * per_step:.2f} ms per step) waits in "
                "collective ops on the host: the all-reduce across replicas, which XProf "
                "counts as host compute.",
                {"host_collectives_pct": pct, "host_collectives_s_per_step": per_step},
                f"host collective ops >= {MODERATE_PCT:g} % of step time (tfobs); warning "
                f"from {HIGH_PCT:g} %"))
    busy = [(d.busy_s, d.device) for d in s.devices if d.span_s > 0]
    if len(busy) >= 2:
        (lo, lo_dev), (hi, hi_dev) = min(busy), max(busy)
        spread = (hi - lo) / lo if lo > 0 else (1.0 if hi > 0 else 0.0)
        if spread >= UNEVEN_SPREAD:
            out.append(UNEVEN.advice(
                "warning", f"{hi_dev} is busy {1e3 * hi:.2f} ms, {lo_dev} {1e3 * lo:.2f} ms "
                           f"({100 * spread:.0f} % apart) across {len(busy)} devices.",
                {"busy_max_s": hi, "busy_min_s": lo, "spread": spread,
                 "devices": float(len(busy))},
                f"busy time spread >= {100 * UNEVEN_SPREAD:g} % (tfobs)"))
    return out
