"""Op placement and copies on a GPU job: ops left on the host, copies beyond the input copy."""

from __future__ import annotations

from tfobs.analysis.advice.rule import GPU, HIGH_PCT, PROFILER, Rule, on_gpu
from tfobs.summary import Advice, WindowSummary

HOST_OPS = Rule(
    "host_ops_on_gpu_job", "op placement",
    "GPU job and >= 20 % of TF op time (tf.data excluded) runs on the host",
    "keep ops on the GPU: find why the top host ops are placed there "
    "(tf.debugging.set_log_device_placement(True)) and give them GPU kernels or move them "
    "into the input pipeline",
    f"{PROFILER}: TensorFlow stats (host vs device ops); {GPU}: 2. Debug the performance "
    "of one GPU (ops on the host)",
    jax_fix=(
        "keep the step's work on the GPU: numpy on device arrays, jax.device_get, float(x) or "
        "jax.debug.print inside the loop copy to the host and wait for it; check where arrays "
        "live (x.devices()) and keep preprocessing in the input pipeline"))
COPIES = Rule(
    "extra_copies", "op placement",
    "GPU job and device-to-host plus device-to-device copies >= 5 % of step time",
    "avoid round trips to the host inside the step (.numpy(), Python reads of tensors, "
    "host-only ops); keep tensors on the GPU until the step ends",
    f"{GPU}: 2. Debug the performance of one GPU (host-device copies)",
    jax_fix=(
        "avoid round trips to the host inside the step (np.asarray, float(), jax.device_get "
        "of device arrays, host callbacks); keep arrays on the GPU until the step ends"))
H2D = Rule(
    "host_to_device_copies", "op placement",
    "host-only capture and copies of host arrays into device buffers (PjRt's H2D Dispatch: "
    "jax.device_put of a numpy batch) >= 10 % of step time",
    "copy the next batch while the step runs: a prefetch-to-device iterator (a thread or "
    "iterator calling jax.device_put a batch or two ahead, e.g. flax.jax_utils."
    "prefetch_to_device), keep data that fits on the device there once and index it inside "
    "jax.jit, and send less per step (a smaller dtype, augmentation on the device)",
    f"{GPU}: 1. Optimize the input pipeline (host-to-device copies)")
RULES = (HOST_OPS, COPIES, H2D)
H2D_SHARE = 0.10

HOST_SHARE = 0.20
COPY_SHARE = 0.05


def check(s: WindowSummary) -> list[Advice]:
    if not on_gpu(s):
        return _h2d(s)
    out: list[Advice] = []
    host_ops = [o for o in s.ops.top if not o.on_device and o.op_type != "Iterator"]
    tfdata_s = sum(st.self_s for st in s.input_pipeline.stages)
    host_s = max(0.0, s.ops.host_s - tfdata_s)
    total = host_s + s.ops.device_s
    share = host_s / total if total > 0 else 0.0
    if share >= HOST_SHARE:
        names = ", ".join(o.name for o in host_ops[:3]) or "(not among the top ops)"
        out.append(HOST_OPS.advice(
            "warning", f"{100 * share:.0f} % of TF op time runs on the host on this GPU job "
                       f"(top host ops: {names}).",
            {"host_op_share": share, "host_op_s": host_s, "device_op_s": s.ops.device_s},
            f"host op share >= {100 * HOST_SHARE:g} % (tfobs)"))
    step = s.steps.mean_s
    for d in s.devices:
        extra = d.copy_s.get("d2h", 0.0) + d.copy_s.get("d2d", 0.0)
        share = extra / step if step > 0 else 0.0
        if share >= COPY_SHARE:
            out.append(COPIES.advice(
                "warning",
                f"{d.device}: {1e3 * extra:.2f} ms per step of device-to-host and "
                f"device-to-device copies ({100 * share:.0f} % of the step), beyond the "
                f"input copy ({1e3 * d.copy_s.get('h2d', 0.0):.2f} ms host-to-device).",
                {"extra_copy_s": extra, "extra_copy_share": share,
                 "h2d_s": d.copy_s.get("h2d", 0.0), "d2h_s": d.copy_s.get("d2h", 0.0),
                 "d2d_s": d.copy_s.get("d2d", 0.0)},
                f"d2h + d2d copies >= {100 * COPY_SHARE:g} % of step time (tfobs)"))
    return out


def _h2d(s: WindowSummary) -> list[Advice]:
    """host_to_device_copies on a host-only capture: the copies into device buffers that
    XProf counts as host compute (on a GPU the copies are device activity, read apart)."""
    st = s.steps
    share = st.host_to_device_s / st.mean_s if st.count and st.mean_s > 0 else 0.0
    if share < H2D_SHARE:
        return []
    return [H2D.advice(
        "warning" if 100 * share >= HIGH_PCT else "info",
        f"{100 * share:.0f} % of step time copies host arrays into device buffers "
        f"({1e3 * st.host_to_device_s:.2f} ms per step of H2D Dispatch: jax.device_put of a "
        "numpy batch, or a numpy array passed to a jitted function), which XProf counts as "
        "host compute; the step waits for each copy.",
        {"host_to_device_s": st.host_to_device_s, "host_to_device_share": share},
        f"host-to-device copies >= {100 * H2D_SHARE:g} % of step time on a host-only "
        f"capture (tfobs); warning from {HIGH_PCT:g} %")]
