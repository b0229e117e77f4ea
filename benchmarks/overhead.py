"""Training throughput with and without tfobs (default settings), interleaved A/B pairs.

One process, one model per workload, trials alternating A (no tfobs) and B (tfobs enabled),
in ABBA order so slow drift cancels. Workloads: Keras `fit` (the callback injected by
`enable()`) and a custom `tf.function` loop with `tfobs.step`. tfobs stays enabled for the
whole run; during A trials its hooks are detached and its duty-cycle clock is paused, so the
B trials together behave like one continuous tfobs run at its default budget.

Reports per pair B/A throughput, the median ratio per workload with a bootstrap 90 % interval,
the pooled ratio (all B steps over all B time against the same for A: windows are rare, and
a median of pairs would hide the few trials that hold one), the worst single step that
overlapped a window's export or reduction against the median step, and as the last line
`overhead_pct=<x>`: the largest of the workloads' median and pooled overheads.

    .venv/bin/python benchmarks/overhead.py            # 7 pairs x 20 s per workload
    .venv/bin/python benchmarks/overhead.py --pairs 7 --trial-s 4   # a quick run
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

BATCH = 64


class StepLog:
    """Per-step (start, duration) of B trials, to find steps that overlapped an export."""

    def __init__(self) -> None:
        self.steps: list[tuple[float, float]] = []  # time.time() start, seconds


def make_workloads(tf: Any) -> dict[str, Any]:
    from tfobs.commands.demo import build_dataset, build_model

    keras = tf.keras
    ds = build_dataset(tf, BATCH, input_bound=False, sleep_ms=0)

    model = build_model(keras)
    model.fit(ds, steps_per_epoch=20, epochs=1, verbose=0)  # build, trace, warm up

    loop_model = build_model(keras)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer = keras.optimizers.Adam()
    iterator = iter(ds)

    @tf.function
    def train_step(it: Any) -> Any:
        x, y = next(it)
        with tf.GradientTape() as tape:
            loss = loss_fn(y, loop_model(x, training=True))
        grads = tape.gradient(loss, loop_model.trainable_variables)
        optimizer.apply_gradients(zip(grads, loop_model.trainable_variables, strict=True))
        return loss

    for _ in range(20):
        train_step(iterator)
    return {"keras_fit": (model, ds), "custom_loop": (train_step, iterator)}


class Timing:
    """A Keras callback timing first batch begin to last batch end (fit's own exit excluded)."""

    def __init__(self, keras: Any, log: StepLog | None) -> None:
        outer = self
        self.first = self.last = 0.0
        self.cpu_first = self.cpu_last = 0.0

        class Callback(keras.callbacks.Callback):
            def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
                outer.begin = time.perf_counter()
                outer.begin_wall = time.time()
                if not outer.first:
                    outer.first = outer.begin
                    outer.cpu_first = time.process_time()

            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                outer.last = time.perf_counter()
                outer.cpu_last = time.process_time()
                if outer.log is not None:
                    outer.log.steps.append((outer.begin_wall, outer.last - outer.begin))

        self.log = log
        self.callback = Callback()


def run_keras(tf: Any, work: Any, steps: int, log: StepLog | None) -> tuple[float, float]:
    """(steps per wall second, process CPU seconds per step)."""
    model, ds = work
    timing = Timing(tf.keras, log)
    model.fit(ds, steps_per_epoch=steps, epochs=1, verbose=0, shuffle=False,
              callbacks=[timing.callback])
    return ((steps - 1) / (timing.last - timing.first),
            (timing.cpu_last - timing.cpu_first) / (steps - 1))


def run_loop(tfobs: Any, work: Any, steps: int, log: StepLog | None,
             start: int) -> tuple[float, float]:
    train_step, iterator = work
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    if log is None:  # A: the loop as it would be without tfobs
        for _ in range(steps):
            train_step(iterator)
    else:
        for i in range(start, start + steps):
            wall, s0 = time.time(), time.perf_counter()
            with tfobs.step(i):
                train_step(iterator)
            log.steps.append((wall, time.perf_counter() - s0))
    return steps / (time.perf_counter() - t0), (time.process_time() - cpu0) / steps


class Detach:
    """Takes tfobs out of the training path for an A trial and pauses its budget clock."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime

    def __enter__(self) -> None:
        from tfobs.capture import markers

        self.runtime.wait_idle(60)  # no window straddles the switch
        markers.set_hooks(None)
        markers.uninstall_fit_hooks()
        self.t0 = time.monotonic()

    def __exit__(self, *exc: object) -> None:
        from tfobs.capture import markers

        paused = time.monotonic() - self.t0
        budget = self.runtime.budget
        budget.t0 += paused
        budget.not_before += paused
        markers.set_hooks(self.runtime)
        markers.install_fit_hooks()


def bootstrap_interval(ratios: list[float], n: int = 2000, seed: int = 0) -> tuple[float, float]:
    """90 % interval of the median of `ratios`, by resampling the pairs."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(n))
    return medians[int(0.05 * n)], medians[int(0.95 * n) - 1]


def calibrate(fn: Any, trial_s: float) -> int:
    rate, _ = fn(50)
    return max(100, int(rate * trial_s))


def worst_export_step(log: StepLog, records: list[Any]) -> tuple[float, float]:
    """(worst step overlapping an export or reduction, median step), seconds."""
    busy = []
    for r in records:
        if r.outcome in ("captured", "empty", "failed") and r.end_ns:
            start = r.end_ns / 1e9
            busy.append((start, start + r.capture_s + r.reduce_s))
    median = statistics.median(d for _, d in log.steps) if log.steps else 0.0
    worst = 0.0
    for s, d in log.steps:
        if any(s < b1 and s + d > b0 for b0, b1 in busy):
            worst = max(worst, d)
    return worst, median


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--trial-s", type=float, default=20.0)
    args = parser.parse_args(argv)

    import tensorflow as tf

    import tfobs

    works = make_workloads(tf)
    runtime = tfobs.enable(metrics_port=0)  # defaults otherwise; 0: no clash with others
    records: list[Any] = []
    runtime.add_listener(lambda rec, summ: records.append(rec))
    logs = {name: StepLog() for name in works}
    loop_step = [0]

    def trial(name: str, with_tfobs: bool, steps: int) -> tuple[float, float]:
        log = logs[name] if with_tfobs else None
        if name == "keras_fit":
            return run_keras(tf, works[name], steps, log)
        result = run_loop(tfobs, works[name], steps, log, loop_step[0])
        if with_tfobs:
            loop_step[0] += steps
        return result

    print(f"# machine: {platform.node()} {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cpus, python {platform.python_version()}, tensorflow "
          f"{tf.__version__}; pairs={args.pairs} trial_s={args.trial_s}", flush=True)
    overheads = {}
    for name in works:
        with Detach(runtime):
            steps = calibrate(lambda n, name=name: trial(name, False, n), args.trial_s)
        ratios, cpu_ratios = [], []
        pooled = {False: [0, 0.0], True: [0, 0.0]}  # steps, seconds
        for pair in range(args.pairs):
            order = (False, True) if pair % 2 == 0 else (True, False)
            rates, cpus = {}, {}
            for with_tfobs in order:
                if with_tfobs:
                    rates[True], cpus[True] = trial(name, True, steps)
                else:
                    with Detach(runtime):
                        rates[False], cpus[False] = trial(name, False, steps)
            for k in (False, True):
                pooled[k][0] += steps
                pooled[k][1] += steps / rates[k]
            ratio = rates[True] / rates[False]
            ratios.append(ratio)
            cpu_ratios.append(cpus[True] / cpus[False])
            print(f"{name} pair {pair}: without {rates[False]:.1f} steps/s, with "
                  f"{rates[True]:.1f} steps/s, ratio {ratio:.4f}; CPU per step ratio "
                  f"{cpu_ratios[-1]:.4f}", flush=True)
        median = statistics.median(ratios)
        low, high = bootstrap_interval(ratios)
        pooled_ratio = (pooled[True][0] / pooled[True][1]) / (pooled[False][0] / pooled[False][1])
        overheads[name] = (1.0 - min(median, pooled_ratio)) * 100.0
        # CPU seconds per step (all threads of this process, tfobs's included) is far less
        # sensitive to other processes on a shared machine than wall-clock throughput.
        cpu_pct = (statistics.median(cpu_ratios) - 1.0) * 100.0
        print(f"{name}: median ratio {median:.4f} (90% interval {low:.4f}-{high:.4f}), pooled "
              f"ratio {pooled_ratio:.4f} -> overhead {overheads[name]:.2f}% (CPU per step "
              f"{cpu_pct:+.2f}%; {steps} steps per trial)", flush=True)
    runtime.wait_idle(60)
    health = runtime.health
    for name, log in logs.items():
        worst, median = worst_export_step(log, records)
        factor = worst / median if median else 0.0
        print(f"{name}: median step {median * 1000:.2f} ms, worst step during an export "
              f"{worst * 1000:.2f} ms ({factor:.1f}x)", flush=True)
    print(f"tfobs windows: {dict(health.windows)}, errors {dict(health.errors)}, "
          f"duty cycle {runtime.budget.duty_cycle():.4f}, estimated overhead "
          f"{runtime.budget.overhead():.4f}", flush=True)
    tfobs.disable()
    print(f"overhead_pct={max(overheads.values()):.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
