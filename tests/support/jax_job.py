"""A JAX training loop with `tfobs.enable()` as its first line, as a JAX user writes one.

    python -m tests.support.jax_job OUT_JSON

A jitted MLP regression step (`jax.grad`, plain SGD) over batches made on the host, STEPS
steps. `MARK=annotation` (default) marks steps with `jax.profiler.StepTraceAnnotation`,
`MARK=tfobs` with `tfobs.step`, `MARK=both` with the annotation inside `tfobs.step`;
`MARK=keras` trains a Keras 3 model of the same shape with `fit` instead (the job sets
KERAS_BACKEND=jax), marked by nothing of its own.
`THREADS=2` (with `MARK=annotation`) trains two copies side by side, one per thread, each
marking its own steps from 0 and pausing `STEP_GAP_S` between them; each drain and stop then
also records which other thread's step body was running.
`NO_TF=1` makes TensorFlow unimportable (as in a venv without it). `STOP_AT=N` stops the
loop at step N and waits there (a loop that stops stepping mid-window). tfobs options come
from TFOBS_* variables.

Each call of the JAX backend's `drain` and `stop` is recorded (thread, whether a step was
open on it, order). After training the job writes what tfobs saw to OUT_JSON and keeps
serving until `OUT_JSON.stop` appears (or LINGER_S), so a Prometheus can scrape it.
"""

import os
import sys

if os.environ.get("NO_TF") == "1":
    sys.modules["tensorflow"] = None  # type: ignore[assignment]  # import fails as if absent

import tfobs

handle = tfobs.enable()  # the first line, before JAX is imported

import json  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from tfobs.capture import markers  # noqa: E402
from tfobs.capture.jax_profiler import JaxBackend  # noqa: E402

STEPS = int(os.environ.get("STEPS", "80"))
MARK = os.environ.get("MARK", "annotation")
STOP_AT = int(os.environ.get("STOP_AT", "-1"))
LINGER_S = float(os.environ.get("LINGER_S", "60"))
# Host work per step (making the batch): steps long enough that each window's reduction is
# done before the next window is due.
STEP_SLEEP_S = float(os.environ.get("STEP_SLEEP_S", "0.04"))
THREADS = int(os.environ.get("THREADS", "1"))
STEP_GAP_S = float(os.environ.get("STEP_GAP_S", "0"))
calls: list[dict] = []
bodies: set[str] = set()  # the threads whose step body runs now (THREADS > 1)


def _recorded(name, fn):
    def wrapper(self, *args):
        me = threading.current_thread().name
        calls.append({"call": name, "thread": me, "in_step": markers._step_depth() > 0,
                      "at": time.monotonic(), "others_running": sorted(bodies - {me})})
        return fn(self, *args)
    return wrapper


JaxBackend.drain = _recorded("drain", JaxBackend.drain)
JaxBackend.stop = _recorded("stop", JaxBackend.stop)
JaxBackend.prepare = _recorded("prepare", JaxBackend.prepare)


def init(key):
    k1, k2 = jax.random.split(key)
    return {"w1": jax.random.normal(k1, (64, 256)) * 0.05,
            "w2": jax.random.normal(k2, (256, 1)) * 0.05}


@jax.jit
def train_step(params, x, y):
    def loss(p):
        h = jnp.tanh(x @ p["w1"])
        return jnp.mean((h @ p["w2"] - y) ** 2)

    value, grads = jax.value_and_grad(loss)(params)
    return jax.tree_util.tree_map(lambda p, g: p - 0.05 * g, params, grads), value


def batches():
    rng = np.random.default_rng(0)
    while True:
        time.sleep(STEP_SLEEP_S)
        x = rng.standard_normal((128, 64), dtype=np.float32)
        yield x, np.sin(x[:, :1])


def keras_fit(data) -> None:
    import keras  # KERAS_BACKEND=jax: Keras 3 on JAX, imported after enable() as jobs do

    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="tanh"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    model.fit(data, steps_per_epoch=STEPS, epochs=1, verbose=0)


def side_by_side(params):
    """THREADS copies of the loop, one per thread, each with its own batches."""
    losses = []

    def train() -> None:
        p, data, me = params, batches(), threading.current_thread().name
        for i in range(STEPS):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                bodies.add(me)
                p, value = train_step(p, *next(data))
                value.block_until_ready()
                bodies.discard(me)
            time.sleep(STEP_GAP_S)
        losses.append(value)

    threads = [threading.Thread(target=train, name=f"trainer{k}") for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return losses[-1]


def main() -> None:
    out = sys.argv[1]
    seen: list = []  # (record, summary): read at the end, once keeping has written its path
    if handle is not None:
        handle.add_listener(lambda rec, summary: seen.append((rec, summary)))
    params = init(jax.random.PRNGKey(0))
    data = batches()
    loss = None
    if MARK == "keras":
        keras_fit(data)
    if THREADS > 1:
        loss = side_by_side(params)
    for i in range(STEPS if MARK != "keras" and THREADS == 1 else 0):
        if i == STOP_AT:
            time.sleep(float(os.environ.get("STOP_S", "6")))
            break
        if MARK == "tfobs":
            with tfobs.step(i):
                params, loss = train_step(params, *next(data))
        elif MARK == "both":
            with tfobs.step(i), jax.profiler.StepTraceAnnotation("train", step_num=i):
                params, loss = train_step(params, *next(data))
        else:
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                params, loss = train_step(params, *next(data))
    if loss is not None:
        loss.block_until_ready()
    idle = handle.wait_idle(60.0) if handle is not None else True
    windows = [{"index": rec.index, "outcome": rec.outcome, "reason": rec.reason,
                "first": rec.first_step, "last": rec.last_step, "end_at": rec.end_at,
                "end_thread": rec.end_thread, "end_drain_s": rec.end_drain_s,
                "end_stop_s": rec.end_stop_s, "kept_path": rec.kept_path,
                "summary": summary.to_dict() if summary is not None else None}
               for rec, summary in seen]
    result = {
        "idle": idle,
        "framework": handle.framework if handle is not None else None,
        "tensorflow_loaded": sys.modules.get("tensorflow") is not None,
        "steps": handle.health.steps if handle is not None else 0,
        "outcomes": dict(handle.health.windows) if handle is not None else {},
        "errors": dict(handle.health.errors) if handle is not None else {},
        "port": handle.metrics_port if handle is not None else -1,
        "windows": windows,
        "calls": calls,
        "main_thread": threading.main_thread().name,
    }
    with open(out + ".tmp", "w") as fh:
        json.dump(result, fh)
    os.replace(out + ".tmp", out)
    deadline = time.monotonic() + LINGER_S
    while time.monotonic() < deadline and not os.path.exists(out + ".stop"):
        time.sleep(0.2)
    tfobs.disable()


if __name__ == "__main__":
    main()
