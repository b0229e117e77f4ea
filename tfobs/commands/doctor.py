"""`tfobs doctor`: can tfobs run here? One verdict per check, exit 1 if any check fails.

Checks the configuration from the environment, TensorFlow, a real profiler window (capture,
read back, reduce), the capture folder (tmpfs, free space), NVML, and the metrics port.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

OK, WARN, FAIL = "ok", "warn", "FAIL"


def register(sub: Any) -> None:
    p = sub.add_parser("doctor", help="check that tfobs can profile and serve metrics here",
                       description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=None, help="metrics port to check "
                   "(default: TFOBS_METRICS_PORT or 9464, plus the local rank)")


def check_config(ctx: dict[str, Any]) -> tuple[str, str]:
    from tfobs.config import Config

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ctx["config"] = Config.load(**ctx["overrides"])
    ident = ctx["config"].identity()
    where = f"tf_job={ident['tf_job']} tf_task={ident['tf_task']}"
    if caught:
        return WARN, f"{where}; " + "; ".join(str(w.message) for w in caught)
    return OK, f"{where}; TFOBS_* settings valid"


def check_tensorflow(ctx: dict[str, Any]) -> tuple[str, str]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    t0 = time.perf_counter()
    try:
        import tensorflow as tf
    except Exception as exc:
        return FAIL, f"cannot import tensorflow ({exc}); install tensorflow>=2.16"
    ctx["tf"] = tf
    version = tf.__version__
    major, minor = (int(x) for x in version.split(".")[:2])
    gpus = tf.config.list_physical_devices("GPU")
    detail = (f"tensorflow {version}, {len(gpus)} GPU(s) visible, "
              f"import {time.perf_counter() - t0:.1f}s")
    if (major, minor) < (2, 16) or (major, minor) > (2, 21):
        return WARN, detail + "; tfobs is tested with TensorFlow 2.16 to 2.21 (docs/install.md)"
    return OK, detail


def check_capture_dir(ctx: dict[str, Any]) -> tuple[str, str]:
    import tempfile  # here, not at the top: every tfobs command builds doctor's parser
    config = ctx["config"]
    path = config.resolved_capture_dir()
    if not os.path.isdir(path) or not os.access(path, os.W_OK):
        return FAIL, f"{path} is not a writable folder; set capture_dir / TFOBS_CAPTURE_DIR"
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize
    on_tmpfs = _is_tmpfs(path)
    detail = f"{path} ({'tmpfs' if on_tmpfs else 'disk'}, {free / 2**20:.0f} MiB free)"
    if free < config.max_capture_bytes:
        detail += f"; less than max_capture_bytes ({config.max_capture_bytes >> 20} MiB)"
        from tfobs.capture.session import DIR_FIX, SHM_FIX

        if not config.capture_dir:  # tfobs's own choice: it moves on when the folder fills
            return WARN, (f"{detail}: windows move to {tempfile.gettempdir()} once it fills; "
                          f"to keep captures in memory, {SHM_FIX}")
        return WARN, f"{detail}: {DIR_FIX}, or lower max_capture_bytes"
    if not on_tmpfs:
        return WARN, detail + "; captures go through the disk (no /dev/shm here)"
    return OK, detail


def _is_tmpfs(path: str) -> bool:
    try:
        best, fstype = "", ""
        with open("/proc/mounts") as fh:
            for line in fh:
                parts = line.split()
                mount = parts[1]
                if path.startswith(mount) and len(mount) > len(best):
                    best, fstype = mount, parts[2]
        return fstype == "tmpfs"
    except OSError:
        return False


def check_profiler(ctx: dict[str, Any]) -> tuple[str, str]:
    if "tf" not in ctx:
        return FAIL, "skipped: TensorFlow is not importable"
    tf = ctx["tf"]
    from tfobs.capture.markers import step
    from tfobs.capture.session import ProfilerSlot

    config = ctx["config"]
    slot = ProfilerSlot.from_config(config)

    @tf.function
    def train(x: Any) -> Any:
        return tf.reduce_sum(tf.matmul(x, x))

    x = tf.ones((64, 64))
    train(x)
    refused = slot.start()
    if refused is not None:
        return FAIL, f"profiler {refused.outcome}: {refused.reason}"
    for i in range(5):
        with step(i):
            train(x)
    slot.end_tracing()  # as a window ends: on this thread, between steps
    result = slot.finish()
    if not result.ok:
        return FAIL, f"capture {result.outcome}: {result.reason}"
    detail = f"captured {result.nbytes} bytes, export {result.export_s * 1000:.0f} ms"
    try:
        from tfobs.analysis.pipeline import reduce_xspace

        summary = reduce_xspace(result.data)
    except Exception as exc:
        return FAIL, detail + f"; reduction failed: {exc}"
    if summary.steps.count == 0:
        return WARN, detail + "; no steps found in the test capture"
    return OK, detail + f"; {summary.steps.count} steps found ({summary.steps.method})"


def check_nvml(ctx: dict[str, Any]) -> tuple[str, str]:
    if not ctx["config"].nvml:
        return OK, "disabled (nvml=False)"
    try:
        from tfobs.sources.nvml import NvmlSampler

        sampler = NvmlSampler(interval_s=60.0)
        sampler.start()
        try:
            time.sleep(0.2)
            available, reason, gpus = sampler.available, sampler.unavailable_reason, \
                sampler.latest()
        finally:
            sampler.stop(1.0)
    except Exception as exc:
        return WARN, f"NVML sampler failed: {exc}"
    if not available:
        return WARN, f"not available ({reason}); GPU counters will be missing"
    return OK, f"{len(gpus)} GPU(s): " + ", ".join(g.name for g in gpus)


def check_port(ctx: dict[str, Any]) -> tuple[str, str]:
    import socket  # here, not at the top: every tfobs command builds doctor's parser
    config = ctx["config"]
    try:
        port = config.resolved_metrics_port()
    except Exception as exc:
        return FAIL, str(exc)
    if port == -1:
        return OK, "metrics server disabled (metrics_port=-1)"
    if port == 0:
        return OK, "a free port is picked at enable()"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((config.metrics_bind, port))
        except OSError as exc:
            return FAIL, (f"port {port} on {config.metrics_bind} is unavailable ({exc.strerror}); "
                          "set metrics_port / TFOBS_METRICS_PORT to a free port or -1")
    return OK, f"{config.metrics_bind}:{port} is free"


CHECKS: tuple[tuple[str, Callable[[dict[str, Any]], tuple[str, str]]], ...] = (
    ("config", check_config),
    ("tensorflow", check_tensorflow),
    ("capture dir", check_capture_dir),
    ("profiler", check_profiler),
    ("nvml", check_nvml),
    ("metrics port", check_port),
)


def run(args: argparse.Namespace) -> int:
    ctx: dict[str, Any] = {"overrides": {}}
    if getattr(args, "port", None) is not None:
        if not -1 <= args.port <= 65535:  # bad input: one line naming the flag, exit 2
            print(f"tfobs doctor: --port must be -1 (no server), 0 (any free port) or "
                  f"1-65535, got {args.port}", file=sys.stderr)
            return 2
        ctx["overrides"]["metrics_port"] = args.port
    failed = 0
    for name, check in CHECKS:
        try:
            verdict, detail = check(ctx)
        except Exception as exc:  # a broken check is a failed check, not a crash
            verdict, detail = FAIL, f"{type(exc).__name__}: {exc}"
        if "config" not in ctx:  # nothing else can run without a config
            print(f"[{verdict:>4}] {name}: {detail}", flush=True)
            return 1
        failed += verdict == FAIL
        print(f"[{verdict:>4}] {name}: {detail}", flush=True)
    print("tfobs doctor: " + ("all checks passed" if not failed else f"{failed} check(s) failed"),
          flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    from tfobs.cli import main

    sys.exit(main(["doctor", *sys.argv[1:]]))
