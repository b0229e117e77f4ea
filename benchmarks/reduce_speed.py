"""Reduction speed: tfobs against XProf's five main tools and a bare parse, same capture.

Usage: python benchmarks/reduce_speed.py [CAPTURE] [--repeat N]
Default capture: the largest in tests/data/captures. Prints medians; the last line is
`ratio_vs_xprof=<tfobs time / XProf's five tools>` (target <= 0.10).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TOOLS = ("overview_page", "input_pipeline_analyzer", "kernel_stats", "memory_profile",
         "framework_op_stats")


def _xprof_once(capture: pathlib.Path) -> float:
    from xprof.convert import raw_to_tool_data

    total = 0.0
    for tool in TOOLS:
        with tempfile.TemporaryDirectory() as tmp:  # fresh copy: XProf caches next to it
            copy = pathlib.Path(tmp) / capture.name
            shutil.copyfile(capture, copy)
            start = time.perf_counter()
            raw_to_tool_data.xspace_to_tool_data([str(copy)], tool, {"use_saved_result": False})
            total += time.perf_counter() - start
    return total


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("capture", nargs="?")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    captures = sorted((ROOT / "tests" / "data" / "captures").glob("*.xplane.pb"),
                      key=lambda p: p.stat().st_size)
    capture = pathlib.Path(args.capture) if args.capture else captures[-1]
    data = capture.read_bytes()
    mb = len(data) / 1e6

    from tfobs.analysis import reduce_xspace
    from tfobs.xspace import schema

    parse_t, tfobs_t, xprof_t = [], [], []
    for _ in range(args.repeat):
        start = time.perf_counter()
        schema.XSpace().ParseFromString(data)
        parse_t.append(time.perf_counter() - start)
        start = time.perf_counter()
        reduce_xspace(data)
        tfobs_t.append(time.perf_counter() - start)
        xprof_t.append(_xprof_once(capture))
    p, t, x = (statistics.median(v) for v in (parse_t, tfobs_t, xprof_t))
    print(f"capture={capture.name} size_mb={mb:.2f} repeat={args.repeat} "
          f"load_avg_1m={os.getloadavg()[0]:.2f} cpus={os.cpu_count()}")
    print(f"bare_parse_ms={p * 1e3:.1f} ({p * 1e3 / mb:.1f} ms/MB)")
    print(f"tfobs_reduce_ms={t * 1e3:.1f} ({t * 1e3 / mb:.1f} ms/MB)")
    print(f"xprof_five_tools_ms={x * 1e3:.1f} ({x * 1e3 / mb:.1f} ms/MB)")
    print(f"ratio_vs_parse={t / p:.2f}")
    print(f"ratio_vs_xprof={t / x:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
