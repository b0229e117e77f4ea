"""A custom TensorFlow training loop marked with `tfobs.step`, run as a subprocess by tests.

    python tests/support/custom_loop.py --seconds 20 --port 9464 [--input-bound] [--linger 5]
        [--windows N] [--batch-size 256]

Trains a dense model with a `tf.function` step on a synthetic tf.data pipeline; each
step, `next(iterator)` included, runs inside `with tfobs.step(i):`. `--input-bound` makes
the pipeline sleep per batch without prefetch, so the step waits for input. Prints
`custom loop: metrics at URL` at start and `custom loop done: steps=N windows=...` at the end,
then keeps serving `--linger` seconds so a scraper sees the final counts. `--windows N` ends
training once N windows were captured (or at `--seconds`, whichever comes first), so a test
that needs N windows gets them on a machine too busy to fit them in a fixed time.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--input-bound", action="store_true")
    p.add_argument("--sleep-ms", type=float, default=120.0)
    p.add_argument("--linger", type=float, default=0.0)
    p.add_argument("--interval-steps", type=int, default=40)
    p.add_argument("--window-steps", type=int, default=10)
    p.add_argument("--overhead-budget", type=float, default=0.3)
    p.add_argument("--windows", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=256)
    args = p.parse_args(argv)

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    import tfobs

    runtime = tfobs.enable(
        metrics_port=args.port, metrics_bind="127.0.0.1", interval_steps=args.interval_steps,
        window_steps=args.window_steps, first_window_step=10,
        overhead_budget=args.overhead_budget,
    )
    print(f"custom loop: metrics at {runtime.metrics_url}", flush=True)
    runtime.add_listener(_print_window)

    # Steps of tens of milliseconds: long enough that the eager `next()` call itself (about
    # 0.1 ms, which XProf counts as input) stays far below 5 % of a step.
    n = args.batch_size * 8
    x = tf.random.uniform((n, 512), seed=1)
    y = tf.random.uniform((n, 1), seed=2)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(args.batch_size)
    if args.input_bound:
        micros = int(args.sleep_ms * 1000)
        from tensorflow.python.data.experimental.ops import testing

        ds = ds.apply(testing.sleep(micros))  # no prefetch: every step waits for its batch
    else:
        ds = ds.prefetch(tf.data.AUTOTUNE)
    it = iter(ds)

    model = tf.keras.Sequential([tf.keras.Input((512,)), tf.keras.layers.Dense(1024, "relu"),
                                 tf.keras.layers.Dense(1024, "relu"), tf.keras.layers.Dense(1)])
    opt = tf.keras.optimizers.SGD(0.01)

    @tf.function
    def train_step(xb: tf.Tensor, yb: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                model.trainable_variables, strict=True))
        return loss

    steps = 0
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline and not (
            args.windows and runtime.health.windows.get("captured", 0) >= args.windows):
        with tfobs.step(steps):
            xb, yb = next(it)
            train_step(xb, yb)
        steps += 1
    runtime.train_end()
    runtime.wait_idle(30.0)
    windows = dict(runtime.health.windows)
    print(f"custom loop done: steps={steps} windows={sum(windows.values())} "
          + " ".join(f"{k}={v}" for k, v in sorted(windows.items())), flush=True)
    if args.linger > 0:
        time.sleep(args.linger)
    tfobs.disable()
    return 0


def _print_window(record: object, summary: object) -> None:
    ratio = getattr(getattr(summary, "input_bound", None), "ratio", None)
    steps = getattr(getattr(summary, "steps", None), "count", None)
    print(f"window {record.index} [{record.outcome}] steps={steps} input_ratio={ratio}",
          flush=True)


if __name__ == "__main__":
    sys.exit(main())
