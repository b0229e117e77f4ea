"""What a window's export does to the steps that overlap it, and why (issue 17).

TensorFlow's profiler export (`export_to_tb`, GIL released) runs in a thread while the main
thread keeps ticking one kind of work; per tick kind, the worst tick during the export
against the median tick just before it, for several windows in one run:

* `sleep`: `time.sleep(1 ms)`; slowed only if something holds the GIL;
* `python`: a pure-Python loop (needs the GIL and one core);
* `numpy`: a 300 x 300 matmul (BLAS over every core);
* `tf_step`: a training step of the demo model (TensorFlow's intra-op pool over every core).

Each window traces TF_STEPS_S of training first, so the export has a real capture to write.
`--tf-threads 1` gives TensorFlow one intra- and one inter-op thread (a core left free, as
the host of a GPU job usually has); `--export-nice 19` lowers the exporting thread's priority.

    .venv/bin/python benchmarks/export_contention.py
    .venv/bin/python benchmarks/export_contention.py --tf-threads 1 --ticks tf_step
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

TF_STEPS_S = 0.25  # traced training before each export
WINDOWS = 6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", default="sleep,python,numpy,tf_step")
    ap.add_argument("--tf-threads", type=int, default=0)
    ap.add_argument("--export-nice", type=int, default=0)
    ap.add_argument("--windows", type=int, default=WINDOWS)
    ap.add_argument("--trace-s", type=float, default=TF_STEPS_S,
                    help="seconds of training traced before each export")
    args = ap.parse_args()

    import numpy as np
    import tensorflow as tf
    from tensorflow.python.profiler.internal import _pywrap_profiler

    from tfobs.capture.tf_profiler import profiler_options
    from tfobs.commands.demo import build_dataset, build_model, build_train_step

    if args.tf_threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.tf_threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.tf_threads)
    step = build_train_step(tf, build_model(tf.keras))
    it = iter(build_dataset(tf, 64, input_bound=False, sleep_ms=0))
    for _ in range(30):
        step(it)
    a = np.random.default_rng(0).random((300, 300))
    kinds: dict[str, Callable[[], Any]] = {
        "sleep": lambda: time.sleep(0.001),
        "python": lambda: sum(range(20000)),
        "numpy": lambda: a @ a,
        "tf_step": lambda: step(it),
    }
    print(f"# machine: {os.cpu_count()} cpus, tensorflow {tf.__version__}, tf_threads="
          f"{args.tf_threads or 'default'}, export_nice={args.export_nice}, "
          f"trace_s={args.trace_s}, load_avg_1m="
          f"{os.getloadavg()[0]:.2f}", flush=True)

    def one_window(tick: Callable[[], Any]) -> tuple[float, float, float, float]:
        folder = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        session = _pywrap_profiler.ProfilerSession()
        session.start(folder, profiler_options(2, 1, 0))
        end = time.perf_counter() + args.trace_s
        while time.perf_counter() < end:
            step(it)
        before = []
        for _ in range(15):
            t0 = time.perf_counter()
            tick()
            before.append(time.perf_counter() - t0)
        export: list[float] = []

        def run_export() -> None:
            if args.export_nice:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), args.export_nice)
            t0, c0 = time.perf_counter(), time.thread_time()
            session.export_to_tb()
            export.extend((time.perf_counter() - t0, time.thread_time() - c0))

        exporter = threading.Thread(target=run_export)
        exporter.start()
        during = []
        while exporter.is_alive():
            t0 = time.perf_counter()
            tick()
            during.append(time.perf_counter() - t0)
        exporter.join()
        shutil.rmtree(folder, ignore_errors=True)
        return statistics.median(before), max(during), export[0], export[1]

    for name in args.ticks.split(","):
        rows = [one_window(kinds[name]) for _ in range(args.windows)]
        worst = [d / b for b, d, _, _ in rows]
        print(f"{name}: median tick {1e3 * statistics.median(b for b, *_ in rows):.2f} ms; worst "
              f"tick during the export / median tick: {' '.join(f'{w:.2f}x' for w in worst)} "
              f"(median {statistics.median(worst):.2f}x); export wall "
              f"{1e3 * statistics.median(r[2] for r in rows):.0f} ms, its thread's CPU "
              f"{1e3 * statistics.median(r[3] for r in rows):.0f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
