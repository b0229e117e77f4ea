"""Long fuzz run of the reducer: N structure-aware mutated captures (default 200,000).

Usage: python benchmarks/fuzz_long.py [--cases N] [--seed S]
Prints the outcome counts and the slowest case; exits 1 on any exception other than
CaptureError (the case's seed and index are printed to reproduce it).
"""

from __future__ import annotations

import argparse
import pathlib
import random
import sys
import time
import traceback

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    from tests.conftest import capture_paths
    from tests.support.fuzz import mutate, trimmed_base
    from tfobs import CaptureError, analyze

    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    bases = [trimmed_base(p, per_line=60) for p in capture_paths()]
    rng = random.Random(args.seed)
    counts = {"summary": 0, "capture_error": 0}
    worst = 0.0
    start_all = time.perf_counter()
    for k in range(args.cases):
        data = mutate(bases[k % len(bases)], rng)
        start = time.perf_counter()
        try:
            analyze(data)
            counts["summary"] += 1
        except CaptureError:
            counts["capture_error"] += 1
        except Exception:
            traceback.print_exc()
            print(f"FAILED seed={args.seed} case={k}")
            return 1
        worst = max(worst, time.perf_counter() - start)
    print(f"cases={args.cases} seed={args.seed} {counts} worst_case_s={worst:.3f} "
          f"total_s={time.perf_counter() - start_all:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
