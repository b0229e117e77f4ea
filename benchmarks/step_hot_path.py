"""tfobs's per-step cost with no profiler window, A/B between two source trees in one run.

    .venv/bin/python benchmarks/step_hot_path.py OTHER_TREE [--pairs 4] [--steps 100000]

OTHER_TREE is a folder holding another version's `tfobs/` package (e.g. made with
`git archive <commit> tfobs | tar -x -C /tmp/old`). Each pair runs the other tree, then this
one, in fresh processes (`with tfobs.step(i): pass` with tfobs enabled, best of 5 rounds),
and prints microseconds per step and the ratio this/other: a ratio holds on a loaded
machine where absolute times do not.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CHILD = """
import sys, time
import tensorflow  # noqa: F401  (the markers bind TF's TraceMe)
import tfobs
tfobs.enable(metrics_port=0, metrics_bind="127.0.0.1", first_window_step=10**9,
             interval_steps=10**9, window_steps=1, nvml=False)
n = int(sys.argv[1])
best = float("inf")
for _ in range(5):
    t0 = time.perf_counter()
    for i in range(n):
        with tfobs.step(i):
            pass
    best = min(best, (time.perf_counter() - t0) / n * 1e6)
tfobs.disable()
print(best)
"""


def per_step_us(tree: str, steps: int) -> float:
    env = {**os.environ, "PYTHONPATH": tree, "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = subprocess.run([sys.executable, "-c", _CHILD, str(steps)], env=env, check=True,
                         capture_output=True, text=True, cwd=tree).stdout
    return float(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("other_tree")
    p.add_argument("--pairs", type=int, default=4)
    p.add_argument("--steps", type=int, default=100_000)
    args = p.parse_args(argv)
    ratios = []
    for i in range(args.pairs):
        other = per_step_us(os.path.abspath(args.other_tree), args.steps)
        this = per_step_us(HERE, args.steps)
        ratios.append(this / other)
        print(f"pair {i}: other {other:.2f} us, this {this:.2f} us, this/other {ratios[-1]:.2f}",
              flush=True)
    print(f"median this/other {statistics.median(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
