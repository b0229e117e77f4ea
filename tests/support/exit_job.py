"""A custom loop that ends the way a user's script does: no `train_end`, no `disable`, just
the end of the script, with a profile window open and traces going to OTLP. Run by
tests/faults/test_exit_deadline.py, which times from the `last step` line to the process's exit.

    python tests/support/exit_job.py --steps 40 --otlp http://127.0.0.1:PORT [--reduce-open]

`--reduce-open`: end while the last window is being reduced instead of while it is open.
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--otlp", default="")
    p.add_argument("--reduce-open", action="store_true")
    args = p.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    import tfobs

    # Registered before enable(), so it runs after tfobs's own atexit hook (LIFO): the time
    # tfobs's part of the exit ended, TensorFlow's own teardown still to come.
    atexit.register(lambda: print(f"tfobs stopped at {time.time():.3f}", flush=True))
    runtime = tfobs.enable(metrics_port=0, metrics_bind="127.0.0.1", interval_steps=10,
                           window_steps=5, first_window_step=5, overhead_budget=0.5,
                           otlp_endpoint=args.otlp)
    x = tf.random.uniform((64, 256))
    w = tf.Variable(tf.random.uniform((256, 256)))

    @tf.function
    def train_step() -> tf.Tensor:
        return tf.reduce_sum(tf.matmul(tf.matmul(x, w), w))

    step = 0
    deadline = time.monotonic() + 120  # the budget may skip windows for a while under load
    while step < args.steps or not _ends_well(runtime, args.reduce_open):
        with tfobs.step(step):
            train_step()
        step += 1
        if time.monotonic() > deadline:
            print("never reached the wanted end state", flush=True)
            return 3
    windows = dict(runtime.health.windows)
    print(f"last step at {time.time():.3f} step={step} windows={windows}", flush=True)
    return 0  # the interpreter exits: tfobs's atexit hook has to be quick


def _ends_well(runtime: object, reduce_open: bool) -> bool:
    w = runtime._windows  # type: ignore[attr-defined]
    if reduce_open:  # the last window traced, now exporting or reducing
        return w.tracing is None and w.inflight is not None and sum(
            runtime.health.windows.values()) >= 1  # type: ignore[attr-defined]
    return w.tracing is not None  # a window is open (the profiler is recording)


if __name__ == "__main__":
    sys.exit(main())
