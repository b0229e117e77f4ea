"""`tfobs demo`: a real small Keras 3 training run with tfobs enabled.

Trains a small convolutional model on synthetic images through a tf.data pipeline, serves the
metrics, and prints one line per profile window (step time, breakdown, verdict). With
`--input-bound` a Python function in a sequential `map` sleeps per batch, so the verdict
turns input-bound and the advice names that stage and its fix. Stops after
`--seconds` or `--windows` (exit 0, a final summary line) or at Ctrl-C.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import sys
import threading
import time
from typing import Any

IMAGE = (32, 32, 3)
CLASSES = 10


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="train a small Keras model with tfobs enabled",
                       description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=0.0,
                   help="stop after this many seconds of training, counted from the first "
                        "step (which builds the model); default: run until Ctrl-C")
    p.add_argument("--windows", type=int, default=0,
                   help="stop once this many windows have been reduced and printed (with "
                        "--seconds: whichever comes first); default: no limit")
    p.add_argument("--input-bound", action="store_true",
                   help="make the input pipeline slow on purpose (verdict: input-bound)")
    p.add_argument("--port", type=int, default=None,
                   help="metrics port (default: TFOBS_METRICS_PORT or 9464; -1: no server)")
    p.add_argument("--bind", default=None, help="metrics bind address (default 0.0.0.0)")
    p.add_argument("--steps-per-window", type=int, default=None,
                   help="steps captured per window (default: TFOBS_WINDOW_STEPS or 20)")
    p.add_argument("--interval-steps", type=int, default=None,
                   help="a window every this many steps (default: TFOBS_INTERVAL_STEPS or 500)")
    p.add_argument("--overhead-budget", type=float, default=None,
                   help="profiler cost target, share of training time (default: "
                        "TFOBS_OVERHEAD_BUDGET or 0.05 in the demo, 0.01 in a job)")
    p.add_argument("--batch-size", type=int, default=128, help="rows per batch (1-4096)")
    p.add_argument("--sleep-ms", type=float, default=100.0,
                   help="per-batch delay of the --input-bound pipeline's Python map "
                        "(default 100)")
    p.add_argument("--linger", type=float, default=0.0,
                   help="keep serving metrics this many seconds after training ends")
    p.add_argument("--framework", choices=("tensorflow", "jax"), default="tensorflow",
                   help="train with Keras on TensorFlow (default) or a JAX loop "
                        "(needs only JAX: pip install 'tfobs[jax]')")


# A job's 1 % budget lets one window through in the demo's first 90 s; 5 % shows several,
# each line saying when the next comes.
DEMO_BUDGET = 0.05


def _options(args: argparse.Namespace) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    if "TFOBS_OVERHEAD_BUDGET" not in os.environ:
        opts["overhead_budget"] = DEMO_BUDGET
    for name, key in (("port", "metrics_port"), ("bind", "metrics_bind"),
                      ("steps_per_window", "window_steps"), ("interval_steps", "interval_steps"),
                      ("overhead_budget", "overhead_budget")):
        value = getattr(args, name)
        if value is not None:
            opts[key] = value
    return opts


_FLAGS = {"port": "metrics_port", "bind": "metrics_bind", "steps-per-window": "window_steps",
          "interval-steps": "interval_steps", "overhead-budget": "overhead_budget"}


def flag_names(message: str) -> str:
    """An enable() error in the demo's words: `metrics_port / TFOBS_METRICS_PORT` -> `--port`."""
    for flag, option in _FLAGS.items():
        env = "TFOBS_" + option.upper()
        message = message.replace(f"{option} / {env}", f"--{flag}").replace(env, f"--{flag}")
        message = re.sub(rf"\b{option}\b", f"--{flag}", message)
    return " ".join(message.split())


def build_dataset(tf: Any, batch_size: int, input_bound: bool, sleep_ms: float) -> Any:
    """Synthetic images; the slow variant runs a Python function per batch in a plain `map`
    (a `tf.py_function`, so tf.data keeps the map sequential: stage `Iterator::Root::Map`)
    and has no prefetch, so the step waits for every batch."""
    n = batch_size * 16
    images = tf.random.uniform((n, *IMAGE), seed=1)
    labels = tf.random.uniform((n,), maxval=CLASSES, dtype=tf.int32, seed=2)
    ds = tf.data.Dataset.from_tensor_slices((images, labels))
    if input_bound:
        return ds.repeat().batch(batch_size).map(_slow_python(tf, sleep_ms / 1000.0))
    # Healthy: batches are made once and cached, so the pipeline never holds a step back.
    return ds.batch(batch_size).cache().repeat().prefetch(tf.data.AUTOTUNE)


def _slow_python(tf: Any, seconds: float) -> Any:
    def augment(x: Any) -> Any:  # stands in for per-batch Python preprocessing
        time.sleep(seconds)
        return x * 2.0 - 1.0

    def fn(x: Any, y: Any) -> Any:
        out = tf.py_function(augment, [x], tf.float32)
        out.set_shape(x.shape)
        return out, y

    return fn


def build_model(keras: Any, healthy: bool = True) -> Any:
    """Small, but in the healthy run a step (20-50 ms on a 2-core CPU) outweighs the Python
    work between steps, so it reads `not` input-bound; the input-bound run keeps one conv
    layer, so its slowed pipeline clearly dominates the step."""
    model = keras.Sequential([
        keras.Input(IMAGE),
        keras.layers.Conv2D(32, 3, activation="relu"),
        *([keras.layers.Conv2D(32, 3, activation="relu")] if healthy else []),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(CLASSES),
    ])
    model.compile(optimizer="adam",
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def build_train_step(tf: Any, model: Any, loss_fn: Any = None, optimizer: Any = None,
                     **function_kw: Any) -> Any:
    """`model`'s training step as a custom loop writes it, a `tf.function` called with an
    iterator (the next batch taken inside the function) or with `(x, y)`: the benchmarks'
    second workload beside `fit`, and the capture recorder's steps."""
    loss_fn = loss_fn or tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer = optimizer or tf.keras.optimizers.Adam()

    @tf.function(**function_kw)
    def train_step(*batch: Any) -> Any:
        x, y = next(batch[0]) if len(batch) == 1 else batch
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    return train_step


def format_window(record: Any, summary: Any) -> str:
    head = f"window {record.index} [{record.outcome}]"
    if summary is None or record.outcome != "captured":
        return f"{head} {record.reason}".rstrip()
    ratio = summary.breakdown_ratio
    parts = " ".join(f"{k}={v * 100:.0f}%" for k, v in sorted(ratio.items(), key=lambda kv: -kv[1])
                     if v >= 0.01)
    verdict = summary.input_bound.verdict
    return (f"{head} steps {record.first_step}-{record.last_step}: step "
            f"{summary.steps.mean_s * 1000:.1f} ms | {parts} | input-bound: {verdict} "
            f"({summary.input_bound.ratio * 100:.0f}%) | capture {record.capture_s:.2f}s "
            f"reduce {record.reduce_s:.2f}s{format_advice(summary)}"
            + (f" | {record.cut}" if record.cut else ""))


def format_advice(summary: Any) -> str:
    """The warning and critical rule ids, then the first specific fix with its evidence."""
    shown = [a for a in summary.advice if a.severity in ("warning", "critical")]
    if not shown:
        return ""
    ids = ", ".join(a.code for a in shown)
    first = next((a for a in shown if a.code != "input_bound"), shown[0])
    return f" | advice: {ids} | {first.code}: {first.message} Fix: {first.fix}"


class _StopAfter:
    """Ends fit `seconds` after its first step (checked at each batch end): the first step
    builds the model, which on a busy machine can take most of a short run."""

    def __init__(self, keras: Any, seconds: float, stop: threading.Event) -> None:
        outer = self

        class Callback(keras.callbacks.Callback):
            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                outer.steps += 1
                now = time.monotonic()
                if outer.deadline is None:
                    outer.deadline = now + seconds
                if stop.is_set() or (seconds > 0 and now >= outer.deadline):
                    self.model.stop_training = True

        self.steps = 0
        self.deadline: float | None = None
        self.callback = Callback()


# Upper bounds where a typo would crash the demo instead: 16 batches of images are made up
# front (10**6 rows asked for 196 GB), and time.sleep() takes no infinite or NaN seconds.
MAX_BATCH = 4096
MAX_SLEEP_MS = 60_000.0
MAX_LINGER_S = 86_400.0


def _bad_input(args: argparse.Namespace) -> str:
    for flag, value, low, high in (
            ("--seconds", args.seconds, 0, None), ("--windows", args.windows, 0, None),
            ("--batch-size", args.batch_size, 1, MAX_BATCH),
            ("--sleep-ms", args.sleep_ms, 0, MAX_SLEEP_MS),
            ("--linger", args.linger, 0, MAX_LINGER_S)):
        if value != value:  # NaN
            return f"{flag} must be a number, got {value}"
        if value < low:
            return f"{flag} must be >= {low}, got {value}"
        if high is not None and value > high:
            return f"{flag} must be <= {high:g}, got {value}"
    return ""


def run(args: argparse.Namespace) -> int:
    problem = _bad_input(args)
    if problem:  # before TensorFlow loads: one line, exit 2
        print(f"tfobs demo: {problem}", file=sys.stderr)
        return 2
    if args.framework == "jax":
        from tfobs.commands import demo_jax

        return demo_jax.run(args, _options(args))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # quiet TF's per-session INFO lines
    from tfobs.runtime.lifecycle import framework_missing

    missing = framework_missing("tensorflow")
    if missing:  # one line naming the fix, not an import traceback
        print("tfobs demo: TensorFlow is not installed for this Python "
              f"({sys.executable}); install it in the same environment: pip install "
              "'tensorflow>=2.16' (or, in a clone of tfobs: pip install -e '.[all,tensorflow]'"
              "), or run the JAX demo: tfobs demo --framework jax", file=sys.stderr, flush=True)
        return 2
    import tensorflow as tf

    import tfobs

    keras = tf.keras
    try:
        # The demo prints its own, longer line per window instead of tfobs's log lines.
        runtime = tfobs.enable(quiet=True, **_options(args))
    except tfobs.ConfigError as exc:  # a taken --port, a bad --bind: one line naming the flag
        print(f"tfobs demo: {flag_names(str(exc))}", file=sys.stderr, flush=True)
        return 2
    if runtime is None:
        print("tfobs is disabled (TFOBS_ENABLED=false); training without it", flush=True)
    else:
        cfg = runtime.config
        each = (f"up to {cfg.window_steps} steps each, fewer while exports slow steps over "
                f"{cfg.export_step_stretch:g}x" if cfg.export_step_stretch
                else f"{cfg.window_steps} steps each")
        url = runtime.metrics_url
        where = (f"page {url.removesuffix('metrics')} , metrics {url}" if url
                 else "no metrics server")
        length = run_length(args)
        print(f"tfobs demo: training a small Keras model {length}, input-bound="
              f"{args.input_bound}; {where}; first window at step {cfg.first_window_step}, "
              f"then every {cfg.interval_steps} steps ({each}) while the "
              f"{cfg.overhead_budget:.0%} budget allows"
              + (" (the demo's; a job's default is 1%)" if cfg.overhead_budget == DEMO_BUDGET
                 else ""), flush=True)

    stop = print_windows(runtime, args.windows)
    model = build_model(keras, healthy=not args.input_bound)
    ds = build_dataset(tf, args.batch_size, args.input_bound, args.sleep_ms)
    stopper = _StopAfter(keras, args.seconds, stop)
    t0 = time.monotonic()
    try:
        model.fit(ds, epochs=10**6, steps_per_epoch=100, verbose=0, shuffle=False,
                  callbacks=[stopper.callback])
    except KeyboardInterrupt:
        stop.set()
    elapsed = time.monotonic() - t0
    # Free fit's iterator now, while its tf.data threads can still take the GIL: found by
    # garbage collection at interpreter exit, the --input-bound map's py_function hangs.
    del ds
    gc.collect()
    return finish(runtime, stopper.steps, elapsed, args.linger)


def run_length(args: argparse.Namespace) -> str:
    """How long the demo trains, for its first line."""
    parts = ([f"for {args.seconds:g} s"] if args.seconds else []) + (
        [f"until {args.windows} window{' is' if args.windows == 1 else 's are'} reduced"]
        if args.windows else [])
    return " or ".join(parts) or "until Ctrl-C"


def print_windows(runtime: Any, windows: int = 0) -> threading.Event:
    """After each window: its line and when the next one comes (the demo's own log). The
    event returned is set once `windows` windows (0: never) have been reduced, so a run on
    a slow or busy machine still shows them all instead of stopping on a clock."""
    enough = threading.Event()
    if runtime is None:
        return enough
    from tfobs.runtime import progress

    reduced = 0

    def show(rec: Any, summ: Any) -> None:
        nonlocal reduced
        step_s = summ.steps.mean_s if summ is not None and summ.steps.count else 0.0
        print(f"{format_window(rec, summ)} | "
              f"{progress.next_window(runtime, rec.last_step, step_s)}", flush=True)
        reduced += summ is not None
        if windows and reduced >= windows:
            enough.set()

    runtime.add_listener(show)
    return enough


def finish(runtime: Any, steps: int, elapsed: float, linger: float) -> int:
    """Training is over: end the open window, wait for its figures (served before exit),
    print the closing line, serve `linger` seconds more, stop tfobs."""
    import tfobs

    if runtime is not None:
        runtime.train_end()
        runtime.wait_idle(30.0)  # the last window's figures get served before exit
    health = runtime.health if runtime is not None else None
    windows = dict(health.windows) if health else {}
    errors = sum(health.errors.values()) if health else 0
    print(f"tfobs demo done: steps={steps} seconds={elapsed:.1f} "
          f"windows={sum(windows.values())} "
          + " ".join(f"{k}={v}" for k, v in sorted(windows.items()))
          + f" errors={errors}", flush=True)
    if linger > 0 and runtime is not None:
        time.sleep(linger)
    tfobs.disable()
    return 0


if __name__ == "__main__":
    from tfobs.cli import main

    sys.exit(main(["demo", *sys.argv[1:]]))
