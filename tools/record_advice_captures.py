"""Record the small CPU captures the advice rules are tested on, and XProf's answers for them.

Each case is a real TensorFlow training run with one known performance problem (or none),
profiled for a few steady-state steps with `tf.profiler`; steps are marked by tfobs's own
markers (`tfobs.KerasCallback` for `Model.fit`, `tfobs.step` for custom loops), exactly as a
job running tfobs marks them. Run from the project root::

    python tools/record_advice_captures.py                      # every case
    python tools/record_advice_captures.py --cases tfdata_py_function,healthy

Writes `tests/data/captures/advice__<case>.xplane.pb`, XProf 2.24.2's answers as
`tests/data/xprof-2.24.2/advice__<case>.<tool>.json` (the same call as
tests/support/xprof_reference.py, on a copy in a temporary folder) and one provenance line per
case in `tests/data/captures/PROVENANCE-advice.json`.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import pathlib
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
CAPTURES = ROOT / "tests" / "data" / "captures"
ANSWERS = ROOT / "tests" / "data" / "xprof-2.24.2"
TOOLS = ("overview_page", "input_pipeline_analyzer", "kernel_stats", "memory_profile",
         "framework_op_stats", "hlo_stats", "tool_names")
WARMUP_STEPS = 5
PROFILED_STEPS = 8
BATCH = 32

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(ROOT))


def _tf() -> Any:
    import tensorflow as tf

    return tf


def _images(n: int = 512) -> Any:
    tf = _tf()
    x = tf.random.uniform((n, 32, 32, 3), seed=1)
    y = tf.random.uniform((n,), maxval=10, dtype=tf.int32, seed=2)
    return tf.data.Dataset.from_tensor_slices((x, y))


def _model(width: int = 8) -> Any:
    keras = _tf().keras
    model = keras.Sequential([
        keras.Input((32, 32, 3)),
        keras.layers.Conv2D(width, 3, strides=2, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(10),
    ])
    model.compile(optimizer="adam",
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _heavy(x: Any) -> Any:
    """Plain TF ops that cost a few milliseconds per batch on one CPU thread."""
    tf = _tf()
    for _ in range(6):
        x = tf.sort(x, axis=-1) * 1.0001
    return x


def _sleep_py(seconds: float) -> Callable[[Any], Any]:
    def fn(t: Any) -> Any:
        time.sleep(seconds)
        return t
    return fn


# --- the cases: each returns (dataset, model, extra callbacks) or a custom loop ----------


def case_healthy() -> tuple[Any, Any, list[Any]]:
    """`tfobs demo`'s default run: its own dataset and model (batch 64, prefetched)."""
    from tfobs.commands import demo

    tf = _tf()
    return demo.build_dataset(tf, 64, False, 0.0), demo.build_model(tf.keras), []


def case_demo_input_bound() -> tuple[Any, Any, list[Any]]:
    """`tfobs demo --input-bound --sleep-ms 30`: its slow Python map, no prefetch."""
    from tfobs.commands import demo

    tf = _tf()
    return demo.build_dataset(tf, 64, True, 30.0), demo.build_model(tf.keras), []


def case_tfdata_py_function() -> tuple[Any, Any, list[Any]]:
    """A parallel map whose function is a `tf.py_function` sleeping 20 ms; prefetched."""
    tf = _tf()
    slow = _sleep_py(0.02)

    def fn(x: Any, y: Any) -> Any:
        x = tf.py_function(slow, [x], tf.float32)
        x.set_shape((None, 32, 32, 3))
        return x, y

    ds = _images().repeat().batch(BATCH).map(fn, num_parallel_calls=2)
    return ds.prefetch(tf.data.AUTOTUNE), _model(), []


def case_tfdata_map_serial() -> tuple[Any, Any, list[Any]]:
    """A `map` without `num_parallel_calls` whose function draws random noise (stateful, so
    tf.data's map_parallelization leaves it sequential: stage `::Map`); prefetched."""
    tf = _tf()

    def augment(x: Any, y: Any) -> Any:
        return _heavy(x + tf.random.uniform(tf.shape(x), maxval=0.01)), y

    ds = _images().repeat().batch(BATCH).map(augment)
    return ds.prefetch(tf.data.AUTOTUNE), _model(), []


def case_tfdata_heavy_map() -> tuple[Any, Any, list[Any]]:
    """A stateless `map` of plain TF ops (tf.data parallelizes it), prefetched: nothing a
    specific rule names, only the slowest stage itself."""
    tf = _tf()
    ds = _images().repeat().batch(BATCH).map(lambda x, y: (_heavy(_heavy(x)), y))
    return ds.prefetch(tf.data.AUTOTUNE), _model(), []


def case_tfdata_no_prefetch() -> tuple[Any, Any, list[Any]]:
    """A parallel map of plain TF ops and no `prefetch` at the end (prefetch injection off)."""
    tf = _tf()
    ds = _images().repeat().batch(BATCH).map(lambda x, y: (_heavy(x), y),
                                             num_parallel_calls=tf.data.AUTOTUNE)
    opts = tf.data.Options()
    opts.experimental_optimization.inject_prefetch = False
    return ds.with_options(opts), _model(), []


def case_tfdata_file_read(tmp: pathlib.Path) -> tuple[Any, Any, list[Any]]:
    """Records read from a TFRecord file on demand (no interleave, no cache), little else."""
    tf = _tf()
    path = str(tmp / "records.tfrecord")
    import numpy as np

    rng = np.random.default_rng(0)
    with tf.io.TFRecordWriter(path) as w:
        for _ in range(256):
            w.write(rng.bytes(256 * 1024))
    ds = tf.data.TFRecordDataset(path, buffer_size=1024).repeat().batch(4)
    ds = ds.map(lambda s: (tf.zeros((4, 32, 32, 3)) + tf.cast(tf.strings.length(s)[0] % 2,
                                                               tf.float32),
                           tf.zeros((4,), tf.int32)))
    return ds, _model(), []


def case_tfdata_from_generator() -> tuple[Any, Any, list[Any]]:
    """`Dataset.from_generator` over a Python generator that builds each batch in NumPy."""
    tf = _tf()
    import numpy as np

    def gen() -> Any:
        rng = np.random.default_rng(0)
        while True:
            x = np.zeros((BATCH, 32, 32, 3), np.float32)
            for i in range(BATCH):  # per-example Python work
                x[i] = rng.random((32, 32, 3), dtype=np.float32)
            yield x, rng.integers(0, 10, BATCH).astype(np.int32)

    sig = (tf.TensorSpec((BATCH, 32, 32, 3), tf.float32), tf.TensorSpec((BATCH,), tf.int32))
    ds = tf.data.Dataset.from_generator(gen, output_signature=sig)
    return ds, _model(), []


def case_callback_between_steps() -> tuple[Any, Any, list[Any]]:
    """A Keras callback doing 15 ms of Python work after every batch (between steps)."""
    tf = _tf()
    keras = tf.keras

    class Heavy(keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            end = time.perf_counter() + 0.015
            while time.perf_counter() < end:
                pass

    return _images().repeat().batch(BATCH).prefetch(tf.data.AUTOTUNE), _model(32), [Heavy()]


def loop_eager_ops(profile: Callable[[int], Any]) -> None:
    """A custom loop whose step runs ~300 small ops eagerly beside its `tf.function` part."""
    tf = _tf()
    import tfobs

    model = _model(32)
    opt = tf.keras.optimizers.Adam()
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    it = iter(_images().repeat().batch(BATCH).prefetch(tf.data.AUTOTUNE))

    @tf.function
    def train(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                model.trainable_variables, strict=True))
        return loss

    total = WARMUP_STEPS + PROFILED_STEPS
    for i in range(total + 1):
        profile(i)
        with tfobs.step(i):
            x, y = next(it)
            loss = train(x, y)
            stat = tf.zeros(())  # metrics computed op by op, outside tf.function
            for w in model.trainable_variables:
                for _ in range(8):
                    stat = stat + tf.reduce_mean(tf.square(w)) + tf.reduce_max(tf.abs(w))
            float(loss + stat)


CASES: dict[str, tuple[str, Any]] = {
    "healthy": ("tfobs demo's default dataset and model (healthy run)", case_healthy),
    "demo_input_bound": ("tfobs demo --input-bound --sleep-ms 30 (Python map sleeping 30 ms "
                         "per batch, sequential, no prefetch)", case_demo_input_bound),
    "tfdata_py_function": ("map(py_function sleeping 20 ms, num_parallel_calls=2)+prefetch",
                           case_tfdata_py_function),
    "tfdata_map_serial": ("map(random noise + 6x tf.sort) without num_parallel_calls, then "
                          "prefetch",
                          case_tfdata_map_serial),
    "tfdata_heavy_map": ("map(12x tf.sort), stateless so parallelized by tf.data, then "
                         "prefetch", case_tfdata_heavy_map),
    "tfdata_no_prefetch": ("map(6x tf.sort, AUTOTUNE), no prefetch, inject_prefetch off",
                           case_tfdata_no_prefetch),
    "tfdata_file_read": ("TFRecordDataset of 256 KiB records, read on demand",
                         case_tfdata_file_read),
    "tfdata_from_generator": ("from_generator building each batch in NumPy, per example",
                              case_tfdata_from_generator),
    "callback_between_steps": ("Keras callback busy 15 ms after each batch",
                               case_callback_between_steps),
    "eager_ops": ("custom loop: tf.function step plus ~300 eager ops per step", loop_eager_ops),
}


def _profiler(logdir: str) -> Callable[[int], None]:
    tf = _tf()
    state = {"on": False}

    def at_step(i: int) -> None:
        if i == WARMUP_STEPS and not state["on"]:
            tf.profiler.experimental.start(logdir)
            state["on"] = True
        elif i == WARMUP_STEPS + PROFILED_STEPS and state["on"]:
            tf.profiler.experimental.stop()
            state["on"] = False
    return at_step


def _fit(build: Any, logdir: str, tmp: pathlib.Path) -> None:
    tf = _tf()
    import tfobs

    made = build(tmp) if build is case_tfdata_file_read else build()
    ds, model, extra = made
    at_step = _profiler(logdir)

    class Profile(tf.keras.callbacks.Callback):
        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            at_step(batch)

    # Profile first (starts the profiler before tfobs's marker opens), extra callbacks last
    # (their work falls after the step's marker closes, between steps).
    callbacks = [Profile(), tfobs.KerasCallback(), *extra]
    model.fit(ds, epochs=1, steps_per_epoch=WARMUP_STEPS + PROFILED_STEPS + 1, verbose=0,
              callbacks=callbacks)


def record(name: str, out_dir: pathlib.Path, answers: pathlib.Path) -> dict[str, Any]:
    what, build = CASES[name]
    with tempfile.TemporaryDirectory(prefix="tfobs-advice-") as tmp:
        logdir = os.path.join(tmp, "logs")
        if build is loop_eager_ops:
            build(_profiler(logdir))
        else:
            _fit(build, logdir, pathlib.Path(tmp))
        found = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))
        if len(found) != 1:
            raise SystemExit(f"{name}: expected one capture, found {found}")
        dest = out_dir / f"advice__{name}.xplane.pb"
        shutil.copyfile(found[0], dest)
    tf = _tf()
    return {"case": name, "what": what, "bytes": dest.stat().st_size,
            "tensorflow": tf.__version__, "python": platform.python_version(),
            "machine": platform.machine(), "cpus": os.cpu_count(),
            "recorded": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "steps_profiled": PROFILED_STEPS, "warmup_steps": WARMUP_STEPS}


def write_answers(name: str, out_dir: pathlib.Path, answers: pathlib.Path) -> None:
    from tests.support.recorded import save_answers  # XProf on a fresh copy

    save_answers(out_dir / f"advice__{name}.xplane.pb", answers, TOOLS)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated case names")
    p.add_argument("--out", default=str(CAPTURES))
    p.add_argument("--answers", default=str(ANSWERS))
    p.add_argument("--answers-only", action="store_true",
                   help="only (re)write XProf's answers for the cases' existing captures")
    args = p.parse_args(argv)
    out, answers = pathlib.Path(args.out), pathlib.Path(args.answers)
    out.mkdir(parents=True, exist_ok=True)
    answers.mkdir(parents=True, exist_ok=True)
    prov_path = out / "PROVENANCE-advice.json"
    prov = json.loads(prov_path.read_text()) if prov_path.exists() else {}
    for name in args.cases.split(","):
        if args.answers_only:
            write_answers(name, out, answers)
            continue
        t0 = time.monotonic()
        prov[name] = record(name, out, answers)
        print(f"{name}: {prov[name]['bytes']} bytes in {time.monotonic() - t0:.0f}s",
              flush=True)
        prov_path.write_text(json.dumps(prov, indent=1, sort_keys=True) + "\n")
        write_answers(name, out, answers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
