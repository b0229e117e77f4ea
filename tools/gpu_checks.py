"""Check tfobs's GPU parts on a real NVIDIA machine: NVML sampler, doctor, reduction timing.

Run it on the GPU machine after `tools/record_gpu_captures.py` (TensorFlow is not needed)::

    python tools/gpu_checks.py --captures /tmp/gpu_captures

It prints, for the record in the issue's closing note:
- NVML samples through `tfobs.sources.nvml.NvmlSampler` with the GPU idle, then under a bf16
  matmul load run by JAX in a child process (utilization, memory, power, clocks, throttles);
- `tfobs doctor`'s lines (its NVML check is the one that matters here);
- each capture's GPU figures as tfobs reduces them (steps, kernel-launch idle, Tensor Core
  share, eligible time not on Tensor Cores, copies);
- the largest capture's reduction timed: a bare protobuf parse, tfobs in process, and
  tfobs's reduce helper process (the live path), median of `--repeat` runs each.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tfobs.analysis.pipeline import analyze
from tfobs.sources.nvml import GpuSample, NvmlSampler

LOAD = """
import time, jax, jax.numpy as jnp
a = jnp.ones((8192, 8192), jnp.bfloat16)
f = jax.jit(lambda x: (x @ x) * 0.5)
end = time.monotonic() + float({seconds})
while time.monotonic() < end:
    a = f(a); a.block_until_ready()
"""


def _sample_line(label: str, s: GpuSample) -> str:
    return (f"{label:>5} {s.device} {s.name}: util {s.utilization_ratio:.2f}, "
            f"memory {s.memory_used_bytes / 2**30:.2f}/{s.memory_total_bytes / 2**30:.1f} GiB, "
            f"power {s.power_watts:.0f} W, {s.temperature_celsius:.0f} C, "
            f"SM {s.sm_clock_hertz / 1e6:.0f} MHz, memory clock {s.memory_clock_hertz / 1e6:.0f}"
            f" MHz, throttle {','.join(s.throttle_reasons) or '-'}")


def check_nvml(load_s: float) -> None:
    print("== NVML sampler (tfobs.sources.nvml.NvmlSampler, 0.5 s interval)")
    sampler = NvmlSampler(interval_s=0.5)
    began = time.perf_counter()
    sampler.start()
    print(f"start took {time.perf_counter() - began:.3f} s; available={sampler.available} "
          f"{sampler.unavailable_reason}")
    if not sampler.available:
        return
    try:
        for s in sampler.latest():
            print(_sample_line("idle", s))
        load = subprocess.Popen([sys.executable, "-c", LOAD.format(seconds=load_s)])
        t0 = time.monotonic()
        while load.poll() is None:
            time.sleep(1.0)
            for s in sampler.latest():
                print(_sample_line(f"{time.monotonic() - t0:.0f}s", s))
        time.sleep(1.0)
        for s in sampler.latest():
            print(_sample_line("after", s))
    finally:
        sampler.stop()
    print(f"sampler errors: {sampler.errors}")


def check_doctor() -> None:
    print("== tfobs doctor --port -1")
    cli = "import sys; from tfobs.cli import main; sys.exit(main(sys.argv[1:]))"
    out = subprocess.run([sys.executable, "-c", cli, "doctor", "--port", "-1"],
                         capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    print((out.stdout + out.stderr).strip())
    print(f"(exit {out.returncode}; the tensorflow and profiler checks fail here: no TF)")


def figures(path: str) -> dict[str, object]:
    s = analyze(path)
    k = s.kernels
    out: dict[str, object] = {
        "steps": s.steps.count, "method": s.steps.method,
        "step_ms": round(s.steps.mean_s * 1e3, 3),
        "input_ratio": round(s.input_bound.ratio, 3), "verdict": s.input_bound.verdict,
        "kernel_s": round(k.total_s, 6),
        "tensor_core_share": round(k.tensor_core_s / k.total_s, 3) if k.total_s else 0.0,
        "eligible_not_tc_s": round(k.eligible_op_s - k.eligible_op_tensor_core_s, 6),
    }
    for d in s.devices:
        out[d.device] = {"busy_s": round(d.busy_s, 6), "span_s": round(d.span_s, 6),
                         "idle_s": {n: round(v, 6) for n, v in d.idle_s.items()},
                         "kernels": d.kernel_count,
                         "mean_kernel_us": round(d.mean_kernel_s * 1e6, 2),
                         "copy_s": {n: round(v, 6) for n, v in d.copy_s.items()}}
    return out


def time_reduction(path: str, repeat: int) -> None:
    from tfobs.reduce.helper import ReduceHelper
    from tfobs.xspace.schema import XSpace

    size = os.path.getsize(path)
    print(f"== reduction timed on the largest capture: {os.path.basename(path)} "
          f"({size / 1e6:.2f} MB), median of {repeat}")
    with open(path, "rb") as f:
        data = f.read()

    def median_s(fn) -> float:  # type: ignore[no-untyped-def]
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return statistics.median(times)

    parse = median_s(lambda: XSpace.FromString(data))
    inproc = median_s(lambda: analyze(path))
    worker = ReduceHelper(data_limit=4 * 2**30)
    try:
        worker.ensure_started()
        helper = median_s(lambda: worker.reduce(path, top_n=5, short_gap_s=1e-5,
                                                max_events=50_000_000))
    finally:
        worker.stop()
    print(f"bare protobuf parse {parse * 1e3:.1f} ms; tfobs in process {inproc * 1e3:.1f} ms "
          f"({inproc / parse:.2f}x the parse); tfobs reduce helper {helper * 1e3:.1f} ms "
          "(request to summary, JSON both ways)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--captures", required=True, help="folder of <case>.xplane.pb")
    ap.add_argument("--glob", default="*.xplane.pb", help="which captures in the folder")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--load-s", type=float, default=5.0)
    ap.add_argument("--figures-out", help="write every capture's figures here as JSON")
    args = ap.parse_args(argv)
    for name, check in (("nvml", lambda: check_nvml(args.load_s)), ("doctor", check_doctor)):
        try:
            check()
        except Exception as exc:  # one check failing must not lose the others' output
            print(f"{name} check FAILED: {type(exc).__name__}: {exc}")
    paths = sorted(glob.glob(os.path.join(args.captures, args.glob)))
    all_figures: dict[str, object] = {}
    for path in paths:
        name = os.path.basename(path).removesuffix(".xplane.pb").split("__")[-1]
        try:
            all_figures[name] = figures(path)
        except Exception as exc:
            all_figures[name] = f"FAILED: {type(exc).__name__}: {exc}"
        print(f"== {name}: {json.dumps(all_figures[name])}")
    if args.figures_out:
        with open(args.figures_out, "w") as f:
            json.dump(all_figures, f, indent=1)
    if paths:
        try:
            time_reduction(max(paths, key=os.path.getsize), args.repeat)
        except Exception as exc:
            print(f"timing FAILED: {type(exc).__name__}: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
