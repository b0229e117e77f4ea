"""`tfobs demo --framework jax`: a real small JAX training loop with tfobs enabled.

A jitted MLP regression step (`jax.value_and_grad`, plain SGD) over batches made on the host
with numpy, each step marked as JAX users mark them (`jax.profiler.StepTraceAnnotation`).
With `--input-bound` the host sleeps per batch inside the step, as a slow loader would.
Needs JAX only (`pip install 'tfobs[jax]'`); TensorFlow is never imported.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

WIDTH, HIDDEN, BATCH = 256, 1024, 256


def _step_fn(jax: Any) -> Any:
    jnp = jax.numpy

    @jax.jit
    def train_step(params: Any, x: Any, y: Any) -> Any:
        def loss(p: Any) -> Any:
            h = jnp.tanh(x @ p["w1"])
            return jnp.mean((h @ p["w2"] - y) ** 2)

        value, grads = jax.value_and_grad(loss)(params)
        return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads), value

    return train_step


def run(args: argparse.Namespace, options: dict[str, Any]) -> int:
    import tfobs
    from tfobs.commands.demo import finish, print_windows, run_length

    try:
        # The demo prints its own, longer line per window instead of tfobs's log lines.
        runtime = tfobs.enable(framework="jax", quiet=True, **options)
    except tfobs.ConfigError as exc:
        print(f"tfobs demo: {exc}", file=sys.stderr, flush=True)
        return 2
    try:
        import jax
        import numpy as np
    except ImportError as exc:
        print(f"tfobs demo: JAX is not installed ({exc}); fix: pip install 'tfobs[jax]'",
              file=sys.stderr, flush=True)
        return 2
    if runtime is not None:
        cfg = runtime.config
        url = runtime.metrics_url
        where = (f"page {url.removesuffix('metrics')} , metrics {url}" if url
                 else "no metrics server")
        print(f"tfobs demo: training a small JAX model (JAX {jax.__version__}, "
              f"{jax.devices()[0].platform}) {run_length(args)}, "
              f"input-bound={args.input_bound}; {where}; first "
              f"window at step {cfg.first_window_step}, then every {cfg.interval_steps} steps "
              f"({cfg.window_steps} steps each) while the {cfg.overhead_budget:.0%} budget "
              "allows", flush=True)

    enough = print_windows(runtime, args.windows)
    key1, key2 = jax.random.split(jax.random.PRNGKey(0))
    params = {"w1": jax.random.normal(key1, (WIDTH, HIDDEN)) * 0.03,
              "w2": jax.random.normal(key2, (HIDDEN, 1)) * 0.03}
    train_step = _step_fn(jax)
    rng = np.random.default_rng(0)
    sleep_s = args.sleep_ms / 1000.0 if args.input_bound else 0.0
    t0 = time.monotonic()
    steps, loss = 0, None
    try:
        while ((args.seconds <= 0 or time.monotonic() - t0 < args.seconds)
               and not enough.is_set()):
            with jax.profiler.StepTraceAnnotation("train", step_num=steps):
                if sleep_s:
                    time.sleep(sleep_s)  # a slow loader, inside the step
                x = rng.standard_normal((BATCH, WIDTH), dtype=np.float32)
                params, loss = train_step(params, x, np.sin(x[:, :1]))
                # Inside the marker: on a CPU the marker alone times the step, and a step
                # that returns at dispatch would time only that (markers_time_dispatch).
                loss.block_until_ready()
            steps += 1
    except KeyboardInterrupt:
        pass
    elapsed = time.monotonic() - t0
    if loss is not None:
        loss.block_until_ready()
    return finish(runtime, steps, elapsed, args.linger)
