"""What tracing does to a CPU job's memory, step by step: RSS against malloc's live bytes.

The demo model (`tfobs demo`, Keras `fit`, batch 256) trains STEPS steps; a plain
`tf.profiler` session (host tracer level 2, as tfobs's windows) traces steps FROM..TO. After
every step the job's RSS and glibc's live bytes (`mallinfo2`: what the trace's buffers
are part of) are printed, with the median untraced step, in one run per variant, each in
its own process:

* `default`: glibc as the job gets it;
* `mmap-threshold`: `MALLOC_MMAP_THRESHOLD_=131072` in the environment, the fix tfobs names
  when a window is cut for RSS the heap kept.

Prints, per variant, the growth over the traced steps of RSS and of live bytes, and their
ratio: where RSS grows many times what is live, the growth is the allocator's, not the
trace's. Usage: python benchmarks/tracing_memory.py [--steps 45] [--from 20] [--to 30]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import textwrap

ROOT = pathlib.Path(__file__).resolve().parents[1]

WORKLOAD = textwrap.dedent("""
    import json, os, sys, tempfile, time
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    import tensorflow as tf
    from tfobs.capture.heap import live_bytes, rss_bytes
    from tfobs.commands.demo import build_dataset, build_model
    steps, first, last = (int(a) for a in sys.argv[1:4])
    logdir = tempfile.mkdtemp()
    rows = []

    class Probe(tf.keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch == first:
                tf.profiler.experimental.start(
                    logdir, tf.profiler.experimental.ProfilerOptions(host_tracer_level=2))

        def on_train_batch_end(self, batch, logs=None):
            if batch == last:
                tf.profiler.experimental.stop()
            rows.append((batch, rss_bytes(), live_bytes(), time.perf_counter()))

    model = build_model(tf.keras)
    model.fit(build_dataset(tf, 256, False, 0), epochs=1, steps_per_epoch=steps, verbose=0,
              callbacks=[Probe()])
    print(json.dumps(rows))
""")


def run(variant: str, steps: int, first: int, last: int) -> list[list[int]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFOBS_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["CUDA_VISIBLE_DEVICES"] = ""
    if variant == "mmap-threshold":
        env["MALLOC_MMAP_THRESHOLD_"] = "131072"
    out = subprocess.run([sys.executable, "-c", WORKLOAD, str(steps), str(first), str(last)],
                         env=env, capture_output=True, text=True, check=True, timeout=900)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=45)
    ap.add_argument("--from", dest="first", type=int, default=20)
    ap.add_argument("--to", dest="last", type=int, default=30)
    args = ap.parse_args()
    mib = 1 << 20
    for variant in ("default", "mmap-threshold"):
        rows = run(variant, args.steps, args.first, args.last)
        by_step = {b: (rss, live) for b, rss, live, _ in rows}
        # median untraced step after warm-up: what the variant costs training itself
        gaps = sorted(rows[i][3] - rows[i - 1][3] for i in range(5, len(rows))
                      if not args.first <= rows[i][0] <= args.last + 1)
        step_ms = gaps[len(gaps) // 2] * 1000
        before = by_step[args.first - 1]
        peak_rss = max(by_step[b][0] for b in range(args.first, args.last))
        peak_live = max(by_step[b][1] for b in range(args.first, args.last))
        after = by_step[max(by_step)]
        traced = args.last - args.first
        d_rss, d_live = (peak_rss - before[0]) / mib, (peak_live - before[1]) / mib
        print(f"{variant:15s} traced {traced} steps: RSS +{d_rss:.0f} MiB "
              f"({d_rss / traced:.1f}/step), live bytes +{d_live:.1f} MiB "
              f"({d_live / traced:.2f}/step), RSS/live {d_rss / max(d_live, 0.01):.0f}x; "
              f"RSS {(after[0] - before[0]) / mib:+.0f} MiB at the end; untraced step "
              f"median {step_ms:.1f} ms")
        print("  per step (RSS, live MiB): " + " ".join(
            f"{b}:{r // mib}/{lv // mib}" for b, r, lv, _ in rows))


if __name__ == "__main__":
    main()
