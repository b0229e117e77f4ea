"""One worker of a small multi-worker job, as a cluster launcher runs it: TF_CONFIG in the
environment, `tfobs.enable()` as the first line, then the strategy and a custom loop.

    python -m tests.support.multiworker_job mwms|ps OUT_JSON

`mwms`: MultiWorkerMirroredStrategy, every worker runs STEPS synchronous steps (all-reduce of
a small gradient). `SLOW_INPUT_MS` on a worker sleeps that long in its input pipeline per
element: the straggler. `ps`: ParameterServerStrategy; the chief runs the loop through a
ClusterCoordinator, workers and parameter servers run a `tf.distribute.Server`.

tfobs options come from TFOBS_* variables (port, windows, budget). After training, the
worker writes what tfobs saw (windows by outcome, each window's steps, identity, port) to
OUT_JSON and keeps serving metrics until the file `OUT_JSON + ".stop"` appears (or LINGER_S
seconds pass), so a Prometheus can scrape the last windows.
"""

import tfobs

handle = tfobs.enable()  # the first line, before TensorFlow is configured

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import tensorflow as tf  # noqa: E402

STEPS = int(os.environ.get("STEPS", "60"))
SLOW_INPUT_MS = float(os.environ.get("SLOW_INPUT_MS", "0"))
LINGER_S = float(os.environ.get("LINGER_S", "120"))
WIDTH = 64


def _dataset(batch: int) -> tf.data.Dataset:
    ds = tf.data.Dataset.from_tensors(tf.ones((WIDTH,))).repeat()
    if SLOW_INPUT_MS > 0:
        def slow(x):
            time.sleep(SLOW_INPUT_MS / 1000.0)
            return x

        ds = ds.map(lambda x: tf.numpy_function(slow, [x], tf.float32, stateful=True))
        ds = ds.map(lambda x: tf.ensure_shape(x, (WIDTH,)))
    return ds.batch(batch)


def run_mwms(windows: list) -> None:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        w = tf.Variable(tf.zeros((WIDTH, 1)), aggregation=tf.VariableAggregation.MEAN)
    it = iter(strategy.experimental_distribute_dataset(_dataset(8)))

    @tf.function
    def train_step(x):
        def replica(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - 1.0))
            w.assign_sub(0.01 * tape.gradient(loss, w))  # MEAN: an all-reduce across workers
            return loss

        return strategy.run(replica, args=(x,))

    for i in range(STEPS):
        with tfobs.step(i):
            train_step(next(it))


def run_ps(windows: list) -> None:
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    task = resolver.task_type
    if task in ("worker", "ps"):
        server = tf.distribute.Server(resolver.cluster_spec(), job_name=task,
                                      task_index=resolver.task_id, protocol="grpc",
                                      start=True)
        _linger()  # serve until the chief is done (the test stops us)
        del server
        return
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        w = tf.Variable(tf.zeros((WIDTH, 1)))

    @tf.function
    def worker_fn():
        x = tf.ones((8, WIDTH))
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - 1.0))
        w.assign_sub(0.01 * tape.gradient(loss, w))
        return loss

    for i in range(STEPS):
        with tfobs.step(i):
            loss = coordinator.schedule(worker_fn)
            coordinator.join()
            # The chief's own share of the step (a local op): what its profile shows.
            tf.reduce_mean(tf.constant(loss.fetch()) * 2.0)


def _linger() -> None:
    stop = sys.argv[2] + ".stop"
    deadline = time.monotonic() + LINGER_S
    while time.monotonic() < deadline and not os.path.exists(stop):
        time.sleep(0.2)


def main() -> None:
    mode, out = sys.argv[1], sys.argv[2]
    windows: list = []
    if handle is not None:
        handle.add_listener(lambda rec, summary: windows.append(
            {"outcome": rec.outcome, "first": rec.first_step, "last": rec.last_step,
             "verdict": summary.input_bound.verdict if summary is not None else ""}))
    t0 = time.monotonic()
    (run_mwms if mode == "mwms" else run_ps)(windows)
    train_s = time.monotonic() - t0
    idle = handle.wait_idle(60.0) if handle is not None else True
    result = {
        "identity": handle.identity if handle is not None else {},
        "port": handle.metrics_port if handle is not None else -1,
        "steps": handle.health.steps if handle is not None else 0,
        "outcomes": dict(handle.health.windows) if handle is not None else {},
        "windows": windows,
        "idle": idle,
        "train_s": train_s,
    }
    with open(out + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(out + ".tmp", out)
    _linger()
    # TensorFlow's collective runtime can crash while the interpreter tears down after a
    # multi-worker run (SIGSEGV, seen once in ~5 runs); the test judges training and tfobs,
    # so stop tfobs the normal way and leave without TF's teardown.
    tfobs.disable()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
