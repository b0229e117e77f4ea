"""What `import tfobs` and `tfobs.enable()` import into a TensorFlow job: two source trees
side by side, interleaved in one run, each side's bytecode compiled once beforehand
(`--no-bytecode`: compiled in every run, as a source tree under PYTHONDONTWRITEBYTECODE=1).

    python benchmarks/job_imports.py --before /work/main            # a checkout
    python benchmarks/job_imports.py --before HEAD~2 --runs 9       # a git revision

`--before`/`--after` name a folder holding a `tfobs` package or a git revision of this
repository (exported with `git archive`, this tree's built `tfobs/xspace/*.so` copied in, so
both sides have the compiled wire walk); `--after` defaults to this tree. Each run is a
fresh process, as a job starts: it imports TensorFlow (untimed: the job's own), then under
`-X importtime` imports tfobs and calls `tfobs.enable()` with the default options (metrics
server on a free port, reduction in the helper process). Per side, medians over the runs:
the wall-clock and CPU time of `import tfobs` + `enable()`, the import time Python reports
for everything imported by them (sum of self times), and of it the reduction's modules
(`tfobs.analysis*`, `tfobs.xspace*`) and how many of those were loaded; the full garbage
collections that fell in that time (after TensorFlow's import one takes 100-200 ms; the
more a side allocates, the likelier it pays one there rather than later in training) and
the job's resident memory after `enable()`. Prints the ratios after/before.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
REDUCTION = ("tfobs.analysis", "tfobs.xspace")
MARK = "--- tfobs imports from here ---"

_CHILD = f"""
import json, os, sys, time
import tensorflow  # the job's own import, not timed
sys.stderr.write({MARK!r} + "\\n")
sys.stderr.flush()
import gc
full0 = gc.get_stats()[2]["collections"]
t0, c0 = time.perf_counter(), time.process_time()
import tfobs
rt = tfobs.enable(metrics_port=0, metrics_bind="127.0.0.1")
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
sys.stderr.write("--- enable returned ---\\n")
sys.stderr.flush()
loaded = [m for m in sys.modules if m.split(".")[:2] in (["tfobs", "analysis"],
                                                          ["tfobs", "xspace"])]
with open("/proc/self/statm") as fh:
    rss = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
print(json.dumps({{"wall_s": wall, "cpu_s": cpu, "reduction_modules": len(loaded),
                  "tfobs": tfobs.__file__, "rss_mb": rss / 2**20,
                  "gc_full": gc.get_stats()[2]["collections"] - full0}}))
tfobs.disable()
"""


def _is_reduction(name: str) -> bool:
    return any(name == r or name.startswith(r + ".") for r in REDUCTION)


def _parse_importtime(stderr: str) -> tuple[float, float]:
    """(seconds of self import time after the mark until enable() returned, of it the
    reduction's modules)."""
    total = reduction = 0.0
    on = False
    for line in stderr.splitlines():
        if line.startswith(MARK):
            on = True
            continue
        if line.startswith("--- enable returned"):
            break
        if not on or not line.startswith("import time:"):
            continue
        parts = line[len("import time:"):].split("|")
        try:
            self_us = int(parts[0])
        except ValueError:  # the header line
            continue
        name = parts[2].strip()
        total += self_us / 1e6
        if _is_reduction(name):
            reduction += self_us / 1e6
    return total, reduction


def source_tree(spec: str, tmp: pathlib.Path, label: str) -> pathlib.Path:
    """A folder holding the `tfobs` package for `spec` (a folder, or a git revision)."""
    folder = pathlib.Path(spec)
    if (folder / "tfobs" / "__init__.py").is_file():
        return folder.resolve()
    out = tmp / label
    out.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", spec, "tfobs"],
                             check=True, capture_output=True).stdout
    archive_path = tmp / f"{label}.tar"
    archive_path.write_bytes(archive)
    with tarfile.open(archive_path) as tar:
        tar.extractall(out, filter="data")
    for built in (ROOT / "tfobs" / "xspace").glob("*.so"):
        shutil.copy2(built, out / "tfobs" / "xspace" / built.name)
    return out


def _run(tree: pathlib.Path, pycache: pathlib.Path | None) -> dict[str, Any]:
    # Bytecode in a folder of the run's own: a read-only checkout would otherwise compile
    # its modules in every run (hundreds of ms), which no installed package does. With
    # `--no-bytecode` every run compiles them, as a source tree under
    # PYTHONDONTWRITEBYTECODE=1 does.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(tree), TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="-1",
               TFOBS_QUIET="1")
    if pycache is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", _CHILD], cwd=tree,
                          env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise SystemExit(f"run in {tree} failed:\n{proc.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    if not out["tfobs"].startswith(str(tree)):
        raise SystemExit(f"{tree}: imported tfobs from {out['tfobs']}")
    out["import_s"], out["reduction_import_s"] = _parse_importtime(proc.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--before", required=True, help="folder or git revision")
    p.add_argument("--after", default=str(ROOT), help="folder or git revision")
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--no-bytecode", action="store_true",
                   help="compile tfobs's modules in every run (no .pyc written or read)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = pathlib.Path(tmp_name)
        trees = {"before": source_tree(args.before, tmp, "before"),
                 "after": source_tree(args.after, tmp, "after")}
        runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
        caches: dict[str, pathlib.Path | None] = {
            side: None if args.no_bytecode else tmp / f"pycache-{side}" for side in trees}
        for side in trees:  # warm the page cache and write the bytecode
            _run(trees[side], caches[side])
        for _ in range(args.runs):
            for side in ("before", "after"):  # interleaved: load hits both alike
                runs[side].append(_run(trees[side], caches[side]))
    keys = ("wall_s", "cpu_s", "import_s", "reduction_import_s", "reduction_modules",
            "gc_full", "rss_mb")
    med = {side: {k: statistics.median(r[k] for r in runs[side]) for k in keys}
           for side in runs}
    print(f"before: {args.before} ({trees['before']}); after: {args.after}; "
          f"{args.runs} runs each, medians, "
          f"{'no bytecode' if args.no_bytecode else 'bytecode compiled beforehand'}")
    print(f"{'':32}{'before':>10}{'after':>10}{'after/before':>14}")
    labels = {"wall_s": "import tfobs + enable(), wall s", "cpu_s": "  the same, CPU s",
              "import_s": "  Python's import time, s",
              "reduction_import_s": "  of it analysis+xspace, s",
              "reduction_modules": "analysis+xspace modules loaded",
              "gc_full": "full collections meanwhile",
              "rss_mb": "job's RSS after enable(), MiB"}
    for k in keys:
        b, a = med["before"][k], med["after"][k]
        ratio = f"{a / b:.2f}x" if b else "-"
        print(f"{labels[k]:32}{b:10.3f}{a:10.3f}{ratio:>14}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
