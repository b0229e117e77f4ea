"""A window's summary on its way from the reduce helper to the training process, two source
trees side by side, interleaved in one run:

    python benchmarks/window_trip.py --before 0052086            # a git revision
    python benchmarks/window_trip.py --before 0052086 --runs 5 --repeat 5

By default the long window of 4,000 tiny steps and the largest test capture. Per capture and
side, fresh processes (`--runs`, alternating sides) each time the helper's part, the
reduction (`reduce_xspace`), `to_dict()` and `json.dumps` (what `python -m tfobs.reduce`
does per window), and the training process's part, `json.loads` and
`WindowSummary.from_dict` (what `ReduceHelper.reduce` and the reduce thread do: GIL time in
the job), medians of `--repeat` each. Also the answer's size and the top events it holds.
Prints both sides and the ratios after/before. `--before`/`--after` take a folder holding
a `tfobs` package or a git revision (as `job_imports.py`); `--after` defaults to this tree.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
from typing import Any

from job_imports import source_tree

ROOT = pathlib.Path(__file__).resolve().parents[1]
CAPTURES = ROOT / "tests" / "data" / "captures"
DEFAULT = ("generated__tf2.21cpu__tiny_steps_long.xplane.pb",
           "recorded__h100_jax0.11.2__launch_bound_tiny_ops.xplane.pb")
PHASES = ("reduce", "to_dict", "dumps", "loads", "from_dict")

_CHILD = """
import json, pathlib, statistics, sys, time
sys.path.insert(0, sys.argv[1])
from tfobs.analysis.pipeline import reduce_xspace
from tfobs.summary import WindowSummary
data = pathlib.Path(sys.argv[2]).read_bytes()
times = {k: [] for k in ("reduce", "to_dict", "dumps", "loads", "from_dict")}
for _ in range(int(sys.argv[3]) + 1):  # the first round warms up, untimed
    t0 = time.perf_counter(); summary = reduce_xspace(data)
    t1 = time.perf_counter(); plain = summary.to_dict()
    t2 = time.perf_counter(); text = json.dumps({"ok": True, "summary": plain})
    t3 = time.perf_counter(); back = json.loads(text)
    t4 = time.perf_counter(); WindowSummary.from_dict(back["summary"])
    t5 = time.perf_counter()
    for k, a, b in zip(times, (t0, t1, t2, t3, t4), (t1, t2, t3, t4, t5)):
        times[k].append(b - a)
out = {k: statistics.median(v[1:]) for k, v in times.items()}
out["bytes"] = len(text)
out["steps"] = summary.steps.count
out["top_events"] = sum(len(s.top_events) for s in summary.steps.items)
print(json.dumps(out))
"""


def _child(tree: pathlib.Path, capture: pathlib.Path, repeat: int) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", _CHILD, str(tree), str(capture), str(repeat)],
                          check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", required=True)
    p.add_argument("--after", default=str(ROOT))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("captures", nargs="*", type=pathlib.Path,
                   default=[CAPTURES / name for name in DEFAULT])
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        trees = {label: source_tree(spec, pathlib.Path(tmp), label)
                 for label, spec in (("before", args.before), ("after", args.after))}
        for capture in args.captures:
            got: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
            for _ in range(args.runs):
                for label, tree in trees.items():
                    got[label].append(_child(tree, capture, args.repeat))
            print(f"{capture.name} ({capture.stat().st_size / 1e6:.2f} MB)")
            med = {label: {k: statistics.median(r[k] for r in rows) for k in rows[0]}
                   for label, rows in got.items()}
            for label in ("before", "after"):
                m = med[label]
                print(f"  {label:6s} " + " ".join(f"{k} {1e3 * m[k]:7.1f} ms" for k in PHASES)
                      + f" | answer {m['bytes'] / 1e6:.2f} MB, {m['steps']:.0f} steps, "
                      f"{m['top_events']:.0f} top events")
            b, a = med["before"], med["after"]
            job_b, job_a = b["loads"] + b["from_dict"], a["loads"] + a["from_dict"]
            helper_b = b["reduce"] + b["to_dict"] + b["dumps"]
            helper_a = a["reduce"] + a["to_dict"] + a["dumps"]
            print("  after/before: " + " ".join(f"{k} {a[k] / b[k]:.2f}" for k in PHASES)
                  + f"; the helper's part {1e3 * helper_b:.0f} -> {1e3 * helper_a:.0f} ms "
                  f"({helper_a / helper_b:.2f}), the training process's part (GIL) "
                  f"{1e3 * job_b:.0f} -> {1e3 * job_a:.0f} ms ({job_a / job_b:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
