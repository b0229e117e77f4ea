"""What tfobs's event around tf.data's next() costs a JAX job, per batch.

    python benchmarks/tfdata_wait_cost.py [--rounds 7] [--batches 20000]

A JAX job that imports TensorFlow gets `tfobs.capture.tfdata_wait` installed: every
`next()` of a tf.data iterator runs inside `jax.profiler.TraceAnnotation`. This times
`next()` on the cheapest pipeline there is (`Dataset.range(...).batch(64)`, about 50 us a
batch: a real pipeline's batch costs more, so the share only falls) with and without the
wrapper, interleaved in short rounds (the median of the paired differences: this 2-core
machine's noise is larger than the cost), with no trace running (a job between windows) and
inside a window as tfobs opens one (`JaxBackend`, no Python tracer). Prints the medians, the
difference per batch and its share of the bare next(). Target: under 1 % of the bare next()
between windows, where a job spends nearly all its time; inside a window, under 1 % of a
1 ms step per batch (10 us).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

TARGET = 0.01
WINDOW_TARGET_S = 10e-6


def _per_batch(it, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        next(it)
    return (time.perf_counter() - start) / n


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--batches", type=int, default=1000)
    args = p.parse_args()
    import tensorflow as tf

    from tfobs.capture import tfdata_wait
    from tfobs.capture.jax_profiler import JaxBackend

    it = iter(tf.data.Dataset.range(10**12).batch(64))
    _per_batch(it, 2000)
    backend = JaxBackend()
    held = True
    for tracing in (False, True):
        bare, wrapped, diffs = [], [], []
        with tempfile.TemporaryDirectory() as logdir:
            session = backend.open(logdir, (2, 1, 0)) if tracing else None
            for k in range(args.rounds):
                if k % 2:  # every other round wrapped first: drift cancels
                    tfdata_wait.install()
                    w = _per_batch(it, args.batches)
                    tfdata_wait.uninstall()
                    b = _per_batch(it, args.batches)
                else:
                    b = _per_batch(it, args.batches)
                    tfdata_wait.install()
                    w = _per_batch(it, args.batches)
                    tfdata_wait.uninstall()
                bare.append(b)
                wrapped.append(w)
                diffs.append(w - b)
            if session is not None:
                backend.discard(session)
        b, w, d = (statistics.median(x) for x in (bare, wrapped, diffs))
        ok = d < WINDOW_TARGET_S if tracing else d / b < TARGET
        held &= ok
        print(f"{'in a window' if tracing else 'no window':11s}: bare next() {b * 1e6:.2f} us, "
              f"with tfobs's event {w * 1e6:.2f} us; +{d * 1e6:.2f} us a batch (median of "
              f"paired rounds), {100 * d / b:+.2f} % of the bare next() "
              f"{'ok' if ok else 'MISSED'}")
    print(f"machine: cpus={os.cpu_count()} load_avg_1m={os.getloadavg()[0]:.2f}; "
          f"rounds={args.rounds} batches={args.batches}; {'all held' if held else 'MISSED'}")
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main())
