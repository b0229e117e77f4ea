"""Does ending a window kill a multi-worker job? Two-worker MultiWorkerMirroredStrategy
jobs on CPU (loopback; the project's own multi-worker test job, tests/support/
multiworker_job.py: windows at steps 10, 20, 40, ... of 5 steps), run again and again with
the window end tfobs uses ("new": tracing stopped on the training thread between steps,
after the device drained) and the one it replaced ("old": the capture thread stops tracing
while the job's collective steps run; TFOBS_UNSAFE_WINDOW_END=capture_thread), modes
interleaved trial by trial on one machine.

A run counts as a native abort when a worker dies by a signal or its log shows glibc's heap
checks ("double free", "munmap_chunk", "free(): invalid ...", "corrupted"). Prints each
mode's count and the one-sided Fisher exact p-value of new <= old.

    python benchmarks/window_end_safety.py --runs 50 --modes new,old --steps 400
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import re
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.cluster import launch  # noqa: E402

NATIVE = re.compile(r"double free|munmap_chunk|free\(\): invalid|corrupted|Segmentation fault"
                    r"|Fatal Python error|Aborted")
LOG_DIR = os.environ.get("SAFETY_LOG_DIR", "")
MODES = {"new": {}, "old": {"TFOBS_UNSAFE_WINDOW_END": "capture_thread"},
         # the new end with the host tracer at level 1 (TraceMe of level 1 only: no TF op
         # or collective RPC events), to tell whether those events are what the abort needs
         "new_host1": {"TFOBS_HOST_TRACER_LEVEL": "1"}}


def one_run(mode: str, steps: int, timeout_s: float) -> tuple[str, float, int]:
    """(verdict, seconds, windows captured by worker 0): ok | native_abort | failed."""
    tasks = [("worker", 0), ("worker", 1)]
    with tempfile.TemporaryDirectory(prefix="tfobs-safety-") as tmp_name:
        tmp = pathlib.Path(tmp_name)
        extra = {**MODES[mode], "STEPS": str(steps), "LINGER_S": "0",
                 **{k: v for k, v in os.environ.items() if k.startswith("TFOBS_")}}
        t0 = time.monotonic()
        procs, info = launch("mwms", tasks, tmp, {t: extra for t in tasks})
        deadline = t0 + timeout_s
        codes: list[int | None] = [None, None]
        while time.monotonic() < deadline and any(c is None for c in codes):
            codes = [p.poll() for p in procs]
            if any(c is not None and c < 0 for c in codes):
                break  # a signal: the other worker waits on its collective for minutes
            time.sleep(0.2)
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        seconds = time.monotonic() - t0
        logs = "".join(f.read_text(errors="replace") for f in sorted(tmp.glob("*.log")))
        captured = 0
        out0 = info[("worker", 0)]["out"]
        if out0.exists():
            import json

            captured = json.loads(out0.read_text()).get("outcomes", {}).get("captured", 0)
        verdict = "ok"
        if any(c is not None and c < 0 for c in codes) or NATIVE.search(logs):
            verdict = "native_abort"
        elif codes != [0, 0]:
            verdict = "failed"
        if verdict != "ok" and LOG_DIR:  # what each worker said, for the record
            pathlib.Path(LOG_DIR).mkdir(parents=True, exist_ok=True)
            (pathlib.Path(LOG_DIR) / f"{verdict}-{mode}-{time.time_ns()}.log").write_text(
                f"exit codes {codes}\n" + logs[-6000:])
        return verdict, seconds, captured
        return "ok", seconds, captured


def fisher_one_sided(a: int, n1: int, b: int, n2: int) -> float:
    """P(X <= a) for the aborts of mode 1 (a of n1) against mode 2 (b of n2), margins
    fixed (hypergeometric)."""
    k, n = a + b, n1 + n2

    def pmf(x: int) -> float:
        return math.comb(n1, x) * math.comb(n2, k - x) / math.comb(n, k)

    return sum(pmf(x) for x in range(max(0, k - n2), a + 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=50, help="runs per mode")
    ap.add_argument("--modes", default="new,old")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--timeout", type=float, default=240.0)
    args = ap.parse_args()
    modes = args.modes.split(",")
    tally = {m: {"ok": 0, "native_abort": 0, "failed": 0, "seconds": 0.0, "windows": 0}
             for m in modes}
    for i in range(args.runs):
        for mode in modes if i % 2 == 0 else modes[::-1]:  # interleaved, order alternating
            verdict, seconds, captured = one_run(mode, args.steps, args.timeout)
            t = tally[mode]
            t[verdict] += 1
            t["seconds"] += seconds
            t["windows"] += captured
            print(f"run {i + 1:3d} {mode:4s} {verdict:13s} {seconds:6.1f} s "
                  f"windows {captured}", flush=True)
    print(f"\n{os.cpu_count()} CPUs; {args.steps} steps a run, two workers on loopback")
    print("mode  runs  native aborts  other failures  windows captured (worker 0)")
    for mode, t in tally.items():
        runs = t["ok"] + t["native_abort"] + t["failed"]
        print(f"{mode:4s}  {runs:4d}  {t['native_abort']:13d}  {t['failed']:14d}  "
              f"{t['windows']:d}")
    if "new" in tally and "old" in tally:
        n, o = tally["new"], tally["old"]
        runs_n = n["ok"] + n["native_abort"] + n["failed"]
        runs_o = o["ok"] + o["native_abort"] + o["failed"]
        p = fisher_one_sided(n["native_abort"], runs_n, o["native_abort"], runs_o)
        print(f"one-sided Fisher exact p (new aborts no more often than old by chance): "
              f"{p:.4f}")


if __name__ == "__main__":
    main()
