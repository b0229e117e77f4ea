"""A small Keras 3 training job for the fault tests, run as a subprocess.

    python tests/support/fault_job.py --steps 120 [--tfobs JSON] [--plan JSON] ...

It trains a dense model with `Model.fit` (one epoch of `--steps` steps, deterministic ops
and seeds), so a run with tfobs must end with exactly the weights of a run without it. Faults
are injected through real seams while it trains:

* `--plan`: actions at step boundaries (`{"step": 25, "do": "user_start", ...}`) or when
  tfobs's window reaches a state (`{"after_step": 40, "when": "exporting", "do": ...}`, seen
  by a watcher thread; a plan's actions keep their order): the user's own profiling,
  remounting or filling the capture folder, a profiler server and its client, printing a
  line the test waits for.
* `--corrupt empty,truncated,...`: rewrites the capture file on disk after TensorFlow
  exported it and before tfobs reads it (one entry per window, `none` leaves it alone).
* `--raise reduce:2,publish_prometheus:3,publish_otel:4`: the reducer or an exporter's
  `publish` raises on that (1-based) call.
* `--shm SHM:TMP`: SHM stands in for /dev/shm, the capture folder tfobs picks itself, and
  TMP for the temporary folder it falls back to.
* `--synthetic-nvml N`: a stand-in `pynvml` module (there is no GPU here) whose queries
  succeed N times, then fail.

The last stdout line is JSON: trained steps (the optimizer's own count), a weights digest,
tfobs's health counters and its `/metrics` counters scraped over HTTP, the window records,
what each action did, and `end_time` (just before the script returns; the test measures how
long the process then takes to exit).
"""

from __future__ import annotations

import argparse
import atexit
import glob
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
import types
import urllib.request
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

log: list[dict[str, Any]] = []
_log_lock = threading.Lock()

# Printed to stderr by the job's exit hook that runs right after tfobs's own.
EXIT_STAMP = "fault-job: tfobs exit hook done at"


def note(entry: dict[str, Any]) -> None:
    with _log_lock:
        log.append(entry)


# -- the user's side: actions ------------------------------------------------------------


# `tf.profiler.experimental.start` and `stop` as the job imported them before enable().
EARLY: dict[str, Any] = {}


def do_action(action: dict[str, Any], rt: Any, state: str = "") -> None:
    import tensorflow as tf

    name = action["do"]
    entry: dict[str, Any] = {"do": name, "step": action.get("step", action.get("after_step")),
                             "state": state, "ok": True, "error": ""}
    try:
        if name == "user_start":
            tf.profiler.experimental.start(action["logdir"])
        elif name == "user_stop":
            tf.profiler.experimental.stop()
        elif name == "user_start_early":  # the function the job imported before enable()
            EARLY["start"](action["logdir"])
        elif name == "user_stop_early":
            EARLY["stop"]()
        elif name == "print":
            print(action["text"], flush=True)
        elif name == "remount":  # e.g. options "ro" or "rw" of a tmpfs the test mounted
            subprocess.run(["mount", "-o", f"remount,{action['options']}", action["path"]],
                           check=True, capture_output=True)
        elif name == "fill":  # write until the folder's file system is full
            with open(os.path.join(action["path"], "filler"), "wb") as fh:
                try:
                    while True:
                        fh.write(b"\0" * 65536)
                        fh.flush()
                except OSError as exc:
                    entry["filled"] = str(exc)
        elif name == "unfill":
            os.remove(os.path.join(action["path"], "filler"))
        elif name == "rmtree":
            import shutil

            shutil.rmtree(action["path"])
        elif name == "mkdir":
            os.makedirs(action["path"], exist_ok=True)
        elif name == "server_start":
            tf.profiler.experimental.server.start(action["port"])
        elif name == "client_trace":  # blocks for the trace: run it beside training
            thread = threading.Thread(target=_client_trace, args=(action, entry), daemon=True)
            thread.start()
            _client_threads.append(thread)
        else:
            raise ValueError(f"unknown action {name!r}")
    except Exception as exc:  # the user's call failed: that is what tests look at
        entry["ok"], entry["error"] = False, f"{type(exc).__name__}: {exc}"
    entry["slot"] = rt.slot.state if rt is not None else ""
    note(entry)


_client_threads: list[threading.Thread] = []


def _client_trace(action: dict[str, Any], entry: dict[str, Any]) -> None:
    import tensorflow as tf

    try:
        tf.profiler.experimental.client.trace(
            f"grpc://127.0.0.1:{action['port']}", action["logdir"], action["duration_ms"])
        entry["trace_ok"] = True
    except Exception as exc:
        entry["trace_ok"] = False
        entry["trace_error"] = f"{type(exc).__name__}: {exc}"


def _window_state(rt: Any) -> str:
    slot = rt.slot.state
    if slot != "idle":
        return slot  # active | exporting
    return "idle" if rt.idle else "reducing"


class ExportGate:
    """Holds tfobs's export open until a watcher waiting for "exporting" has fired into it.

    Writing a small window's capture takes a few milliseconds, less than Python's 5 ms
    thread switch interval, so a polling watcher can miss the whole export. The gate wraps
    the slot's two export steps (`_hand_over`, `_read`): while a watcher waits, an export
    signals it and waits for the watcher's action to begin (then 50 ms more, so a user's
    `start` is inside its wait before the export ends)."""

    def __init__(self) -> None:
        self.waiting = 0
        self.lock = threading.Lock()
        self.exporting = threading.Event()
        self.fired = threading.Event()

    def install(self, rt: Any) -> None:
        for name in ("_hand_over", "_read"):
            inner = getattr(rt.slot, name)

            def held(*args: Any, _inner: Any = inner, **kwargs: Any) -> Any:
                with self.lock:
                    wanted = self.waiting > 0
                if wanted:
                    self.exporting.set()
                    if self.fired.wait(5.0):
                        time.sleep(0.05)
                return _inner(*args, **kwargs)

            setattr(rt.slot, name, held)

    def wait_export(self, timeout_s: float) -> bool:
        with self.lock:
            if not self.waiting:
                self.fired.clear()  # a later window's export waits for its own watcher
            self.waiting += 1
        return self.exporting.wait(timeout_s)

    def release(self) -> None:
        with self.lock:
            self.waiting -= 1
            if not self.waiting:
                self.exporting.clear()
        self.fired.set()


export_gate = ExportGate()


def watch(action: dict[str, Any], rt: Any) -> None:
    """Fire `action` as soon as tfobs's window is in state `when` (polled every 0.2 ms;
    "exporting" through `export_gate`, which holds the export until the action began)."""
    if action["when"] == "exporting":
        seen = export_gate.wait_export(action.get("timeout_s", 20.0))
        state = _window_state(rt) if seen else "missed"
        export_gate.release()  # the export goes on 50 ms later: the action lands inside it
        if seen:
            do_action(action, rt, state)
        else:
            note({"do": action["do"], "step": action.get("after_step"), "state": "missed",
                  "ok": False, "error": "never saw exporting"})
        return
    deadline = time.monotonic() + action.get("timeout_s", 20.0)
    while time.monotonic() < deadline:
        state = _window_state(rt)
        if state == action["when"]:
            do_action(action, rt, state)
            return
        time.sleep(0.0002)
    note({"do": action["do"], "step": action.get("after_step"), "state": "missed",
          "ok": False, "error": f"never saw {action['when']}"})


def user_profile_steps(logdir: str) -> list[int]:
    """Step counts of every capture the user's own profiling wrote (read by tfobs.analyze)."""
    import tfobs

    out = []
    for path in sorted(glob.glob(os.path.join(logdir, "plugins", "profile", "*",
                                              "*.xplane.pb"))):
        out.append(tfobs.analyze(path).steps.count)
    return out


# -- faults inside tfobs's own pipeline ----------------------------------------------------


def corrupt_file(path: str, how: str, big_bytes: int, max_events: int = 0) -> None:
    """Rewrite an exported capture on disk, as a broken disk or tool would leave it."""
    if how == "empty":
        open(path, "wb").close()
    elif how == "truncated":
        os.truncate(path, os.path.getsize(path) // 2)
    elif how == "huge_bytes":  # a sparse tail: over max_capture_bytes without using memory
        os.truncate(path, big_bytes)
    elif how == "huge_events":  # a protobuf repeated k times is one XSpace with k x planes
        from tfobs.xspace.reader import parse

        with open(path, "rb") as fh:
            data = fh.read()
        # At least 40 copies, and enough to pass max_capture_events even where the window
        # was short (a loaded machine's windows hold a few hundred events).
        copies = max(40, max_events // max(1, parse(data).event_count()) + 1)
        with open(path, "wb") as fh:
            fh.write(data * copies)
    elif how == "not_xspace":
        with open(path, "wb") as fh:
            fh.write(b"\x89PNG\r\n\x1a\n" + os.urandom(2048))
    elif how != "none":
        raise ValueError(how)


def install_corruption(rt: Any, plan: list[str], big_bytes: int) -> None:
    """Between TensorFlow's export and tfobs's read of each window (the slot's `_read`)."""
    slot = rt.slot
    original = slot._read
    calls = [0]

    def read(logdir: str, *args: Any) -> Any:
        how = plan[calls[0]] if calls[0] < len(plan) else "none"
        calls[0] += 1
        for path in glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb")):
            corrupt_file(path, how, big_bytes, rt.config.max_capture_events or 0)
        note({"do": "corrupt", "how": how, "window_read": calls[0]})
        return original(logdir, *args)

    slot._read = read


def install_raises(rt: Any, spec: dict[str, list[int]]) -> None:
    def failing(fn: Any, key: str) -> Any:
        calls = [0]

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[0] += 1
            if calls[0] in spec[key]:
                raise RuntimeError(f"{key} broke on purpose (call {calls[0]})")
            return fn(*args, **kwargs)

        return wrapper

    if "reduce" in spec:  # the runtime looks the reducer up in the pipeline per window
        import tfobs.analysis.pipeline as pipeline

        pipeline.reduce_xspace = failing(pipeline.reduce_xspace, "reduce")
    sinks = {sink.stage: sink for sink in rt.sinks}
    for key, stage in (("publish_prometheus", "export_prometheus"),
                       ("publish_otel", "export_otel")):
        sink = sinks.get(stage)
        if key in spec and sink is not None:
            sink.publish = failing(sink.publish, key)  # type: ignore[method-assign]


def synthetic_nvml(ok_queries: int) -> types.ModuleType:
    """A stand-in for pynvml with one GPU: its utilization query works `ok_queries` times,
    then raises as a driver that fell over mid-run would."""
    mod = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    left = [ok_queries]

    def util(handle: Any) -> Any:
        if left[0] <= 0:
            raise NVMLError("Unknown Error")
        left[0] -= 1
        return types.SimpleNamespace(gpu=50, memory=10)

    mod.NVMLError = NVMLError
    mod.nvmlInit = lambda: None
    mod.nvmlShutdown = lambda: None
    mod.nvmlDeviceGetCount = lambda: 1
    mod.nvmlDeviceGetHandleByIndex = lambda i: ("gpu", i)
    mod.nvmlDeviceGetIndex = lambda h: h[1]
    mod.nvmlDeviceGetUtilizationRates = util
    mod.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=1 << 30, total=16 << 30)
    mod.nvmlDeviceGetPowerUsage = lambda h: 100_000
    mod.nvmlDeviceGetTemperature = lambda h, k: 50
    mod.nvmlDeviceGetClockInfo = lambda h, k: 1000
    mod.nvmlDeviceGetUUID = lambda h: "GPU-synthetic-0"
    mod.nvmlDeviceGetName = lambda h: "synthetic"
    sys.modules["pynvml"] = mod
    return mod


# -- reporting -----------------------------------------------------------------------------


def fetch(url: str, basic_auth: str = "") -> str:
    import base64

    headers = {}
    if basic_auth:
        headers["Authorization"] = "Basic " + base64.b64encode(basic_auth.encode()).decode()
    req = urllib.request.Request(url, headers=headers)
    return urllib.request.urlopen(req, timeout=10).read().decode()


def scrape_counters(body: str) -> dict[str, dict[str, float]]:
    """tfobs's own counters from its /metrics exposition, by label value."""
    from prometheus_client.parser import text_string_to_metric_families

    wanted = {"tfobs_windows_total": "outcome", "tfobs_errors_total": "stage",
              "tfobs_dropped_total": "what"}
    out: dict[str, dict[str, float]] = {k: {} for k in wanted}
    out["other"] = {}
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            if s.name in wanted:
                out[s.name][s.labels[wanted[s.name]]] = s.value
            elif s.name in ("tfobs_step_duration_seconds_count", "tfobs_nvml_available"):
                out["other"][s.name] = s.value
    return out


def weights_digest(model: Any) -> str:
    h = hashlib.sha256()
    for w in model.get_weights():
        h.update(w.tobytes())
    return h.hexdigest()[:16]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--tfobs", default="", help="JSON options for tfobs.enable; '' = no tfobs")
    p.add_argument("--plan", default="[]")
    p.add_argument("--corrupt", default="")
    p.add_argument("--big-bytes", type=int, default=64 << 20)
    p.add_argument("--raise", dest="raises", default="")
    p.add_argument("--synthetic-nvml", type=int, default=-1)
    p.add_argument("--tensorboard", default="", help="LOGDIR:FIRST:LAST (profile_batch)")
    p.add_argument("--step-sleep-s", type=float, default=0.0)
    p.add_argument("--sigterm-handler", choices=("", "graceful", "exit"), default="")
    p.add_argument("--input-fill", type=float, default=None, help="every input value")
    p.add_argument("--dump-http", default="", help="write /metrics and / bodies to PATH.*")
    p.add_argument("--shm", default="", help="SHM:TMP: the folder tfobs picks itself (in place "
                   "of /dev/shm) and the temporary folder it falls back to")
    args = p.parse_args(argv)

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf

    keras.utils.set_random_seed(7)
    tf.config.experimental.enable_op_determinism()
    # As a script that imports them at its top: references tfobs's hooks never replace.
    from tensorflow.profiler.experimental import start, stop

    EARLY.update(start=start, stop=stop)

    stop_requested = threading.Event()
    model_ref: list[Any] = []
    if args.sigterm_handler:
        import signal

        def on_sigterm(signum: int, frame: Any) -> None:
            print("job handler: SIGTERM received", flush=True)
            if args.sigterm_handler == "exit":
                sys.exit(143)
            stop_requested.set()
            if model_ref:
                model_ref[0].stop_training = True

        signal.signal(signal.SIGTERM, on_sigterm)

    if args.synthetic_nvml >= 0:
        synthetic_nvml(args.synthetic_nvml)

    rt = None
    if args.shm:  # stands in for /dev/shm (a test cannot resize the real one)
        import tempfile

        import tfobs.scratch

        tfobs.scratch.SHM_DIR, tempfile.tempdir = args.shm.split(":", 1)
    if args.tfobs:
        import tfobs

        options = json.loads(args.tfobs)
        # Registered before tfobs's own exit hook, so it runs after it (atexit is last in,
        # first out): the stamp marks where tfobs's part of the exit ends.
        atexit.register(lambda: print(f"{EXIT_STAMP} {time.time()!r}", file=sys.stderr,
                                      flush=True))
        if "reduce:" in args.raises:  # the failing reducer is patched into this process
            options.setdefault("reduce_in", "thread")
        rt = tfobs.enable(**options)
        records: list[dict[str, Any]] = []
        rt.add_listener(lambda rec, summary: records.append(
            {"index": rec.index, "first_step": rec.first_step, "last_step": rec.last_step,
             "outcome": rec.outcome, "reason": rec.reason,
             "capture_s": round(rec.capture_s, 3), "reduce_s": round(rec.reduce_s, 3),
             "steps": summary.steps.count if summary is not None else None}))
        if args.corrupt:
            install_corruption(rt, args.corrupt.split(","), args.big_bytes)
        if args.raises:
            spec: dict[str, list[int]] = {}
            for item in args.raises.split(","):
                key, n = item.split(":")
                spec.setdefault(key, []).append(int(n))
            install_raises(rt, spec)
        if any(a.get("when") == "exporting" for a in json.loads(args.plan)):
            export_gate.install(rt)
        print(f"fault job: metrics at {rt.metrics_url}", flush=True)

    plan = json.loads(args.plan)

    # A plan runs in its own order: a step action waits for every watched action before it
    # (a user_start fired while tfobs exports blocks until the export ends, and on a busy
    # host that can outlast the steps until the plan's user_stop).
    watched: list[threading.Thread] = []

    class Actions(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            if args.step_sleep_s:
                time.sleep(args.step_sleep_s)
            for action in plan:
                if action.get("step") == batch:
                    for thread in watched:
                        thread.join(timeout=60.0)
                    do_action(action, rt)
                elif action.get("after_step") == batch:
                    thread = threading.Thread(target=watch, args=(action, rt), daemon=True)
                    thread.start()
                    watched.append(thread)

    rng = np.random.default_rng(3)
    x = rng.standard_normal((args.steps * 32, 64)).astype("float32")
    if args.input_fill is not None:
        x[:] = args.input_fill
    y = rng.integers(0, 10, args.steps * 32)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="relu"),
                              keras.layers.Dense(256, activation="relu"),
                              keras.layers.Dense(10)])
    model.compile(optimizer=keras.optimizers.SGD(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model_ref.append(model)
    callbacks: list[Any] = [Actions()]
    if args.tensorboard:
        logdir, first, last = args.tensorboard.rsplit(":", 2)
        callbacks.append(keras.callbacks.TensorBoard(logdir, profile_batch=(int(first),
                                                                            int(last))))
    model.fit(x, y, batch_size=32, epochs=1, shuffle=False, verbose=0, callbacks=callbacks)
    for thread in _client_threads:
        thread.join(30)

    result: dict[str, Any] = {
        "steps": int(model.optimizer.iterations.numpy()),
        "weights": weights_digest(model),
        "actions": log,
        "stopped_by_signal": stop_requested.is_set(),
    }
    if rt is not None:
        rt.wait_idle(30.0)
        result["health"] = {"steps": rt.health.steps, "windows": rt.health.windows,
                            "errors": rt.health.errors, "dropped": rt.health.dropped}
        result["records"] = records
        result["metrics"] = {}
        if rt.metrics_url:
            auth = rt.config.metrics_basic_auth
            body = fetch(rt.metrics_url, auth)
            result["metrics"] = scrape_counters(body)
            if args.dump_http:
                with open(args.dump_http + ".metrics", "w") as fh:
                    fh.write(body)
                with open(args.dump_http + ".page", "w") as fh:
                    fh.write(fetch(rt.metrics_url[: -len("metrics")], auth))
        result["tfobs_threads"] = sorted(t.name for t in threading.enumerate()
                                         if t.name.startswith("tfobs-"))
    result["end_time"] = time.time()
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())


# -- the test side: run the job and read its report ----------------------------------------

STEPS = 180
# tfobs's exit hook waits at most 2 s for its threads (runtime/lifecycle.py), e.g. for the
# last window's reduction still running on a starved machine; the margin is for the rest of
# the hook there (the busy lane runs at idle priority). TensorFlow's teardown after it is
# the job's own: 1 s here idle, 3.5 s beside four busy processes, 5.1 s once in CI.
TFOBS_EXIT_S = 4.0
STEP_SLEEP_S = 0.02  # ~25 ms steps: windows every 30 steps stay inside the duty-cycle budget
# Windows open at steps 10, 30, 60, 90, 120, 150 (8 steps each).
WINDOWS = (10, 30, 60, 90, 120, 150)
OPTIONS: dict[str, Any] = {
    "metrics_port": 0,
    "metrics_bind": "127.0.0.1",
    "interval_steps": 30,
    "window_steps": 8,
    "first_window_step": 10,
    "overhead_budget": 0.5,
    "nvml": False,
}


class JobResult:
    """A finished job: its JSON report, exit code, output and how long exit took."""

    def __init__(self, proc: subprocess.CompletedProcess, exit_time: float) -> None:
        self.returncode = proc.returncode
        self.stdout, self.stderr = proc.stdout, proc.stderr
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        self.report: dict[str, Any] = json.loads(lines[-1]) if lines else {}
        end = self.report.get("end_time")
        self.exit_after_end_s = exit_time - end if end else float("inf")
        stamps = [float(ln.rsplit(" ", 1)[1]) for ln in proc.stderr.splitlines()
                  if ln.startswith(EXIT_STAMP)]
        # From the report's end to the end of tfobs's exit hook: tfobs's share of the exit.
        self.tfobs_exit_s = stamps[-1] - end if stamps and end else float("inf")

    @property
    def windows(self) -> dict[str, float]:
        return {k: v for k, v in self.report["metrics"]["tfobs_windows_total"].items() if v}

    @property
    def errors(self) -> dict[str, float]:
        return {k: v for k, v in self.report["metrics"]["tfobs_errors_total"].items() if v}

    @property
    def dropped(self) -> dict[str, float]:
        return {k: v for k, v in self.report["metrics"]["tfobs_dropped_total"].items() if v}

    def actions(self, name: str) -> list[dict[str, Any]]:
        return [a for a in self.report["actions"] if a["do"] == name]

    def outcome_at(self, first_step: int) -> str:
        for rec in self.report["records"]:
            if rec["first_step"] == first_step:
                return rec["outcome"]
        return ""


def job_command(options: dict[str, Any] | None = None, *, steps: int = STEPS,
                extra: tuple[str, ...] = ()) -> list[str]:
    cmd = [sys.executable, os.path.abspath(__file__), "--steps", str(steps),
           "--step-sleep-s", str(STEP_SLEEP_S), *extra]
    if options is not None:
        merged = {k: v for k, v in {**OPTIONS, **options}.items() if v is not None}
        cmd += ["--tfobs", json.dumps(merged)]  # None removes a default option
    return cmd


def run_job(options: dict[str, Any] | None = None, *, steps: int = STEPS,
            plan: list[dict[str, Any]] | None = None, extra: tuple[str, ...] = (),
            env: dict[str, str] | None = None, timeout_s: float = 120.0) -> JobResult:
    cmd = job_command(options, steps=steps, extra=extra)
    if plan:
        cmd += ["--plan", json.dumps(plan)]
    full_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s,
                          env=full_env)
    return JobResult(proc, time.time())


_baselines: dict[int, JobResult] = {}


def baseline(steps: int = STEPS) -> JobResult:
    """The same job without tfobs (run once per test session and step count)."""
    if steps not in _baselines:
        _baselines[steps] = run_job(None, steps=steps)
    return _baselines[steps]


def assert_unharmed(run: JobResult, base: JobResult, *, exit_within_s: float = 15.0) -> None:
    """The job trained exactly as without tfobs and exited by itself: tfobs's exit hook
    within its bound, the whole process (TensorFlow's teardown too) within seconds."""
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.report["steps"] == base.report["steps"]
    assert run.report["weights"] == base.report["weights"]  # bit for bit the same model
    assert run.report["health"]["steps"] == base.report["steps"]
    assert run.report["metrics"]["other"]["tfobs_step_duration_seconds_count"] == (
        base.report["steps"])
    assert run.tfobs_exit_s < TFOBS_EXIT_S, run.tfobs_exit_s
    assert run.exit_after_end_s < exit_within_s, run.exit_after_end_s
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    # Every window that was due is counted under exactly one outcome.
    assert sum(run.windows.values()) == len(run.report["records"]) + run.windows.get(
        "skipped_budget", 0)


def start_job(options: dict[str, Any] | None = None, *, steps: int = STEPS,
              plan: list[dict[str, Any]] | None = None, extra: tuple[str, ...] = (),
              env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start the job without waiting (stdout is a pipe of text lines)."""
    cmd = job_command(options, steps=steps, extra=extra)
    if plan:
        cmd += ["--plan", json.dumps(plan)]
    full_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=full_env)


def wait_line(proc: subprocess.Popen, prefix: str, timeout_s: float = 90.0) -> tuple[str, list]:
    """Read stdout until a line starts with `prefix`; returns it and the lines before it."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith(prefix):
            return line.rstrip("\n"), seen
        seen.append(line)
    raise AssertionError(f"no line {prefix!r}; got {seen[-5:]}; stderr: {proc.stderr.read()}")


def finish_job(proc: subprocess.Popen, earlier: str = "", timeout_s: float = 120.0) -> JobResult:
    out, err = proc.communicate(timeout=timeout_s)
    exit_time = time.time()
    done = subprocess.CompletedProcess(proc.args, proc.returncode, earlier + out, err)
    return JobResult(done, exit_time)
