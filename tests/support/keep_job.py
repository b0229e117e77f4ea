"""A Keras 3 training job with tfobs keeping windows, run as a subprocess by
tests/runtime/test_keep*.

    python tests/support/keep_job.py --steps 140 --tfobs JSON [--turn-step 70] [--keep-at 30]

Each step's batch comes from a tf.data pipeline (no prefetch). A steady step waits 2 ms on
it, against 80-100 ms of compute: well under XProf's 5 % "moderately" threshold (with half
the compute the share sat at 5-7 %, and a window that crossed the threshold was kept as
"input_bound"). From `--turn-step` on, the pipeline sleeps `--input-sleep-s` per batch in a
`tf.py_function`: the job turns input-bound halfway, as a job whose data moved to a slow
store would. `--keep-at STEP` calls
`tfobs.capture_now(keep=True)` from that step on until it is granted. Model, data and seeds
are deterministic, so a run with tfobs ends with exactly the weights of a run without it.

The last stdout line is JSON: trained steps, a weights digest, each window's record (index,
steps, outcome, kept path) with the live summary published for it (`to_dict()`), tfobs's
health, the `/metrics` body and the overview page body.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import urllib.request
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

BATCH = 256


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=140)
    p.add_argument("--tfobs", default="", help="JSON options for tfobs.enable; '' = no tfobs")
    p.add_argument("--turn-step", type=int, default=-1, help="input turns slow here (-1 never)")
    p.add_argument("--input-sleep-s", type=float, default=0.1)
    p.add_argument("--keep-at", type=int, default=-1)
    p.add_argument("--remount-ro", default="",
                   help="mount point made read-only once tfobs runs, before the first step")
    args = p.parse_args(argv)

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(7)
    tf.config.experimental.enable_op_determinism()

    rt = None
    records: list[dict[str, Any]] = []
    if args.tfobs:
        import tfobs

        rt = tfobs.enable(**json.loads(args.tfobs))

        def listen(rec: Any, summary: Any) -> None:
            records.append({
                "index": rec.index, "first_step": rec.first_step, "last_step": rec.last_step,
                "outcome": rec.outcome, "reason": rec.reason, "on_demand": rec.on_demand,
                "kept_path": rec.kept_path,
                "summary": summary.to_dict() if summary is not None else None})

        rt.add_listener(listen)
    if args.remount_ro:  # after enable(), which refuses a keep_dir it cannot write
        import subprocess

        subprocess.run(["mount", "-o", "remount,ro", args.remount_ro], check=True)

    turn, sleep_s = args.turn_step, args.input_sleep_s

    def slow_input(i: Any) -> Any:
        if int(i) >= turn >= 0:
            time.sleep(sleep_s)
        return i

    def make_batch(i: Any) -> tuple[Any, Any]:
        i = tf.py_function(slow_input, [i], tf.int64)
        i.set_shape(())
        seed = tf.stack([tf.cast(i, tf.int32), 0])
        x = tf.random.stateless_normal((BATCH, 256), seed=seed)
        y = tf.random.stateless_uniform((BATCH,), seed=seed, maxval=10, dtype=tf.int32)
        return x, y

    data = tf.data.Dataset.range(args.steps).map(make_batch)
    model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(2048, activation="relu"),
                              keras.layers.Dense(2048, activation="relu"),
                              keras.layers.Dense(10)])
    model.compile(optimizer=keras.optimizers.SGD(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    class KeepAt(keras.callbacks.Callback):
        """From step --keep-at on, ask until tfobs grants it (a window being reduced or the
        budget says no for a while)."""

        granted = False

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            if 0 <= args.keep_at <= batch and not self.granted:
                import tfobs

                self.granted = tfobs.capture_now(keep=True)
                if self.granted:
                    print(f"keep job: capture_now(keep=True) granted at step {batch}",
                          flush=True)

    model.fit(data, epochs=1, verbose=0, callbacks=[KeepAt()])

    h = hashlib.sha256()
    for w in model.get_weights():
        h.update(w.tobytes())
    result: dict[str, Any] = {"steps": int(model.optimizer.iterations.numpy()),
                              "weights": h.hexdigest()[:16]}
    if rt is not None:
        rt.wait_idle(60.0)
        result["records"] = records
        result["health"] = {"steps": rt.health.steps, "windows": rt.health.windows,
                            "errors": rt.health.errors, "dropped": rt.health.dropped}
        if rt.metrics_url:
            result["metrics"] = _get(rt.metrics_url)
            result["page"] = _get(rt.metrics_url[: -len("metrics")])
    print(json.dumps(result), flush=True)
    return 0


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


if __name__ == "__main__":
    sys.exit(main())
