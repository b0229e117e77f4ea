"""A custom training loop for the reduce-helper tests (issue 17), run as a subprocess.

    python tests/support/reduce_job.py --phases none:8,process:20 [--fault kill] ...

Each step runs a `tf.function` whose `tf.while_loop` does `--iters` small iterations during
the steps of each phase's first window and `--small-iters` otherwise (the count is a
variable, so it changes without a retrace, and by step number, so a phase's result depends
only on its steps): at the defaults the first window captures well over 15 MB of host op
events. A ticker thread sleeps 1 ms at a time and records the longest gap between its
wake-ups in each phase, which is how long something in this process held the GIL (or
starved it).

Phases run in order, each `name:seconds` or `name:nSTEPS`: `none` trains without tfobs,
`process` and `thread` with tfobs enabled with that `reduce_in` (disabled at the phase's
end, after its windows were reduced). Each phase starts from the same state, so equal steps
give equal results (`acc`).

`--fault` (with one `process` phase) injects into the helper while it reduces the first
window: `kill` (SIGKILL), `hang` (SIGSTOP; the reduction timeout is cut to 2 s), `oom` (its
memory limit is cut so the first, big capture cannot be reduced; later windows are small),
`missing` (`sys.executable` names no file when tfobs starts; restored after the first
window). Prints `helper pid N` lines as helpers appear and, last, one JSON line: steps,
health, window records, helper starts and pids, ticker gaps per phase, and whether each
helper was gone after `disable()`.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys
import threading
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.support.processes import alive  # noqa: E402  (after ROOT is on the path)


class Ticker:
    """Sleeps 1 ms in a loop; `worst()` is the longest wake-to-wake gap since `reset()`."""

    def __init__(self) -> None:
        self._worst = 0.0
        self.worst_at = 0.0  # time.time() when the worst gap ended
        self.worst_runqueue_s = 0.0
        self.worst_blocked_s = 0.0
        self.worst_blocked_at = 0.0
        self.gaps: list[tuple[float, float, float]] = []  # (ended at, gap, of it run queue)
        self.rss: list[tuple[float, float]] = []  # (at, resident MB)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="ticker", daemon=True)

    def _run(self) -> None:
        stat = f"/proc/self/task/{threading.get_native_id()}/schedstat"
        last, waited = time.perf_counter(), _runqueue_s(stat)
        n = 0
        while not self._stop.is_set():
            time.sleep(0.001)
            n += 1
            if n % 50 == 0 and len(self.rss) < 20000:  # the job's memory, every ~50 ms
                self.rss.append((round(time.time(), 3), _rss_mb()))
            now, waited_now = time.perf_counter(), _runqueue_s(stat)
            if now - last > self._worst:
                self._worst = now - last
                self.worst_at = time.time()
                # of which waiting for a core (run queue), not for the GIL or a lock
                self.worst_runqueue_s = waited_now - waited
            # blocked: neither sleeping its 1 ms nor waiting for a core (the GIL, a lock)
            blocked = (now - last) - (waited_now - waited) - 0.001
            if now - last > 0.004 and len(self.gaps) < 20000:
                self.gaps.append((round(time.time(), 4), round(now - last, 4),
                                  round(waited_now - waited, 4)))
            if blocked > self.worst_blocked_s:
                self.worst_blocked_s = blocked
                self.worst_blocked_at = time.time()
            last, waited = now, waited_now

    def reset(self) -> None:
        self._worst = self.worst_runqueue_s = self.worst_blocked_s = 0.0
        self.gaps = []
        self.rss = []

    def worst(self) -> float:
        return self._worst

    def stop(self) -> None:
        self._stop.set()


class GcPauses:
    """Garbage collections of the job that took over 2 ms: (ended at, seconds, generation).
    A full collection holds the GIL for all of it, so it shows as a ticker gap."""

    def __init__(self) -> None:
        self.pauses: list[tuple[float, float, int]] = []
        self._began = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        took = time.perf_counter() - self._began
        if took > 0.002 and len(self.pauses) < 10000:
            self.pauses.append((round(time.time(), 4), round(took, 4), info["generation"]))


def _runqueue_s(path: str) -> float:
    """Seconds this thread has waited on a run queue (Linux schedstat; 0 where missing)."""
    try:
        with open(path) as fh:
            return int(fh.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
    except (OSError, IndexError, ValueError):
        return 0.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--phases", default="none:5,process:20")
    p.add_argument("--iters", type=int, default=4000, help="while_loop iterations per step")
    p.add_argument("--small-iters", type=int, default=200, help="outside the first window")
    p.add_argument("--interval-steps", type=int, default=40)
    p.add_argument("--window-steps", type=int, default=20)
    p.add_argument("--first-window-step", type=int, default=5)
    p.add_argument("--fault", choices=("", "kill", "hang", "oom", "missing"), default="")
    p.add_argument("--oom-limit", type=int, default=0, help="helper data limit for --fault oom")
    p.add_argument("--step-sleep-s", type=float, default=0.0, help="inside each step")
    p.add_argument("--hold", action="store_true", help="after the phases, train until killed")
    args = p.parse_args(argv)

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    import tfobs

    iters = tf.Variable(args.iters, dtype=tf.int32)
    acc = tf.Variable(tf.zeros((8,)))

    @tf.function
    def train_step() -> tf.Tensor:
        def body(i: tf.Tensor, v: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            return i + 1, tf.tanh(v * 0.5 + 0.1)

        _, v = tf.while_loop(lambda i, v: i < iters, body, (tf.constant(0), acc.read_value()))
        acc.assign(v)
        return v

    ticker = Ticker()
    ticker.thread.start()
    gc_pauses = GcPauses()
    step = 0
    for _ in range(3):  # trace and warm up before anything is timed
        train_step()

    report: dict[str, Any] = {"phases": [], "helper_pids": [], "records": []}
    pids: list[int] = report["helper_pids"]
    rt: Any = None
    real_python = sys.executable

    def on_window(rec: Any, summary: Any) -> None:
        report["records"].append({"index": rec.index, "outcome": rec.outcome,
                                  "reason": rec.reason, "capture_bytes": rec.capture_bytes,
                                  "reduce_s": round(rec.reduce_s, 3),
                                  "capture_s": round(rec.capture_s, 3),
                                  "start": rec.start_ns / 1e9, "export_at": rec.end_ns / 1e9,
                                  "done_at": time.time(),
                                  "steps": summary.steps.count if summary else None})
        if args.fault == "missing" and rt is not None:
            rt._reduce.worker.python = real_python  # the executable is back
        if args.fault == "oom" and rt is not None:
            rt._reduce.worker.data_limit = 0  # the restarted helper has room again

    def watch_helper() -> None:
        """Note each helper pid; inject the fault while the first window is reduced."""
        done = False
        while rt is not None and rt.running:
            worker = rt._reduce.worker
            pid = worker.pid if worker is not None else None
            if pid is not None and pid not in pids:
                pids.append(pid)
                print(f"helper pid {pid}", flush=True)
            reducing = worker is not None and worker.busy
            if not done and pid is not None and reducing and args.fault in ("kill", "hang"):
                # At once: the helper now reduces a 6 MB capture in well under 0.2 s
                # (issue 19's faster reduction), so a later fault would miss it.
                time.sleep(0.01)
                os.kill(pid, signal.SIGKILL if args.fault == "kill" else signal.SIGSTOP)
                report["fault_at_pid"] = pid
                done = True
            time.sleep(0.005)

    for phase in args.phases.split(","):
        name, seconds = phase.split(":")
        if name != "none":
            if args.fault == "missing":
                sys.executable = "/nonexistent/python3"
            if args.fault == "oom":  # the limit the runtime gives its helper
                import tfobs.runtime.core as core

                core.data_limit_bytes = lambda max_capture_bytes: args.oom_limit
            rt = tfobs.enable(metrics_port=-1, reduce_in=name, overhead_budget=0.5,
                              interval_steps=args.interval_steps,
                              window_steps=args.window_steps,
                              first_window_step=step + args.first_window_step,
                              window_max_s=60.0)
            sys.executable = real_python
            rt.add_listener(on_window)
            worker = rt._reduce.worker
            if worker is not None and args.fault == "hang":
                import tfobs.reduce.helper as reduce_helper

                worker.timeout_s = 2.0
                reduce_helper.TIMEOUT_PER_MB_S = 0.0
            threading.Thread(target=watch_helper, daemon=True).start()
        acc.assign(tf.zeros((8,)))
        ticker.reset()
        by_steps = seconds.startswith("n")
        limit = int(seconds[1:]) if by_steps else float(seconds)
        t_end = time.monotonic() + (0 if by_steps else limit)
        steps0 = step
        big = range(args.first_window_step, args.first_window_step + args.window_steps)
        while (step - steps0 < limit) if by_steps else (time.monotonic() < t_end):
            iters.assign(args.iters if step - steps0 in big else args.small_iters)
            with tfobs.step(step):
                train_step()
                if args.step_sleep_s:
                    time.sleep(args.step_sleep_s)
            step += 1
        if rt is not None:
            rt.train_end()
            rt.wait_idle(120.0)
        entry = {"name": name, "steps": step - steps0, "worst_gap_s": ticker.worst(),
                 "worst_at": ticker.worst_at, "worst_runqueue_s": ticker.worst_runqueue_s,
                 "worst_blocked_s": ticker.worst_blocked_s,
                 "worst_blocked_at": ticker.worst_blocked_at, "gaps": ticker.gaps,
                 "rss": ticker.rss,
                 "acc": float(tf.reduce_sum(acc).numpy())}
        if rt is not None:
            entry["windows"] = rt.health.windows
            entry["errors"] = rt.health.errors
            entry["starts"] = rt._reduce.worker.starts if rt._reduce.worker else 0
            if args.hold:
                print("holding", flush=True)
                while True:
                    with tfobs.step(step):
                        train_step()
                    step += 1
            tfobs.disable()
            time.sleep(0.3)
            entry["helpers_alive_after_disable"] = [pid for pid in pids if alive(pid)]
            rt = None
        report["phases"].append(entry)
    ticker.stop()
    report["steps"] = step
    report["gc_pauses"] = gc_pauses.pauses
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
