"""The training process's side of the reduce helper (`python -m tfobs.reduce`).

`ReduceHelper.reduce(path, ...)` sends a capture's path to the helper and waits (in
`tfobs-reduce`, never the training thread) for its summary. The helper is started with
`subprocess.Popen` (exec of `sys.executable`, `close_fds`: never a fork that runs Python
code of the training process), restarted with backoff after it dies, killed when a
reduction runs past its timeout, and stopped by `stop()`. Its CPU is read from
`/proc/<pid>/stat` so the runtime can charge it to the overhead budget.

Errors come back as `HelperFailed(kind, message)`; `CannotStart` when no child process can
be started at all (the runtime then reduces in-process).
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from tfobs.reduce import MODULE
from tfobs.summary import MAX_TOP_EVENTS

NICE = 10
START_TIMEOUT_S = 60.0  # imports on a loaded machine
TIMEOUT_S = 60.0  # per reduction, plus TIMEOUT_PER_MB_S per MB of capture
TIMEOUT_PER_MB_S = 2.0
BACKOFF_S = (0.5, 30.0)  # first wait before a restart, and the most it doubles to
# A helper at idle priority that has had less than STARVED_CPU_S of CPU this long into a
# reduction is starved (other work keeps every core busy): it is restarted at plain low
# priority (nice 19, no SCHED_IDLE), which the scheduler still gives a small share.
STARVED_AFTER_S = 10.0
STARVED_CPU_S = 0.05
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class HelperFailed(Exception):
    """A reduction the helper did not finish: kind is died | timeout | starved | memory |
    too_large | error."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class CannotStart(Exception):
    """No helper process could be started (no executable, no fork allowed, ...)."""


def data_limit_bytes(max_capture_bytes: int) -> int:
    """The helper's own memory limit: the interpreter and numpy, plus reduction's working
    set of several times the capture (parse, event columns, per-step tables)."""
    return 512 * 1024 * 1024 + 12 * max_capture_bytes


class ReduceHelper:
    def __init__(self, *, data_limit: int, python: str | None = None, nice: int = NICE,
                 timeout_s: float = TIMEOUT_S, starved_after_s: float = STARVED_AFTER_S
                 ) -> None:
        self.python = python or sys.executable
        self.data_limit = data_limit
        self.nice = nice
        self.timeout_s = timeout_s
        self.starved_after_s = starved_after_s
        self.idle_policy = True  # SCHED_IDLE; off for good once a helper starved
        self.starts = 0  # helpers started (1 + restarts)
        self.busy = False  # a request is out (read-only: tests, benchmarks)
        self._proc: subprocess.Popen[bytes] | None = None
        self._buf = b""
        self._cpu_seen = 0.0  # the current helper's CPU already handed out by take_cpu()
        self._cpu_lost = 0.0  # CPU of helpers that ended, not handed out yet
        self._cpu_ended = 0.0  # CPU of all helpers that ended (for cpu_s())
        self._backoff = BACKOFF_S[0]
        self._next_start = 0.0
        self._stop = threading.Event()
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.returncode is None else None

    # -- start, restart, stop -------------------------------------------------------------

    def ensure_started(self) -> None:
        """Start the helper if none runs, waiting out the backoff after a death."""
        if self._proc is not None and not self._ended(self._proc):
            return
        self._reap()
        wait = self._next_start - time.monotonic()
        if wait > 0 and self._stop.wait(wait):
            raise HelperFailed("died", "tfobs is shutting down")
        if self._stop.is_set():
            raise HelperFailed("died", "tfobs is shutting down")
        env = dict(os.environ)
        # One thread for numpy's BLAS: its pools reserve memory under our own limit and
        # would compete with training for cores.
        env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        cmd = [self.python, "-m", MODULE, "--parent", str(os.getpid()),
               "--data-limit", str(self.data_limit), "--nice", str(self.nice),
               "--idle-policy", "1" if self.idle_policy else "0"]
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, close_fds=True, env=env,
                                    cwd=_package_parent())
        except OSError as exc:
            self._died()
            raise CannotStart(f"cannot start the reduce helper ({self.python}): {exc}") from exc
        with self._lock:
            stopped = self._stop.is_set()  # stop() ran while we started it
            if not stopped:
                self._proc, self._buf, self._cpu_seen = proc, b"", 0.0
        if stopped:
            proc.kill()
            self._wait(proc, 2.0)
            raise HelperFailed("died", "tfobs is shutting down")
        self.starts += 1
        try:
            ready = self._read_line(time.monotonic() + START_TIMEOUT_S, "before it was ready")
        except HelperFailed:
            self._kill()
            raise
        if not ready.get("ready"):
            self._kill()
            raise HelperFailed("error", f"reduce helper said {ready!r} at start")
        # Its start (interpreter and imports, at idle priority before any window) is not a
        # window's cost, as the in-process reduction's warm-up imports never were.
        with self._lock:
            self._cpu_seen = _proc_cpu_s(proc.pid) or 0.0

    def stop(self, timeout_s: float = 2.0) -> None:
        """Close its stdin (it exits), kill it if it does not; no helper is left."""
        self._stop.set()
        with self._lock:
            proc = self._proc
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass
        if not self._wait(proc, max(0.05, timeout_s)):
            self._kill()
        self._reap()

    def forget_after_fork(self) -> None:
        """In a forked child: drop the parent's helper (its pipes) without touching it."""
        self._stop.set()
        proc, self._proc = self._proc, None
        if proc is not None:
            for pipe in (proc.stdin, proc.stdout):
                try:
                    if pipe is not None:
                        os.close(pipe.fileno())
                except (OSError, ValueError):
                    pass
            proc.returncode = 0  # never waited on here: it is not this process's child

    # -- one reduction --------------------------------------------------------------------

    def reduce(self, path: str, *, top_n: int, short_gap_s: float,
               max_events: int, max_top_events: int = MAX_TOP_EVENTS) -> dict[str, Any]:
        """The summary dict of the capture at `path`; raises HelperFailed or CannotStart."""
        self.ensure_started()
        proc = self._proc
        assert proc is not None and proc.stdin is not None
        request = {"path": os.path.abspath(path), "top_n": top_n, "short_gap_s": short_gap_s,
                   "max_events": max_events, "max_top_events": max_top_events}
        try:
            size_mb = os.path.getsize(path) / 1e6
        except OSError:
            size_mb = 0.0
        sent = time.monotonic()
        deadline = sent + self.timeout_s + TIMEOUT_PER_MB_S * size_mb
        cpu_at_start = _proc_cpu_s(proc.pid) or 0.0

        def starved() -> None:
            if not self.idle_policy or time.monotonic() - sent < self.starved_after_s:
                return
            if (_proc_cpu_s(proc.pid) or 0.0) - cpu_at_start >= STARVED_CPU_S:
                return
            self.idle_policy = False
            raise HelperFailed("starved", f"reduce helper had no CPU for "
                               f"{self.starved_after_s:.0f} s at idle priority (other work "
                               "keeps every core busy); restarted at nice 19 without "
                               "SCHED_IDLE")

        self.busy = True
        try:
            proc.stdin.write((json.dumps(request) + "\n").encode())
            proc.stdin.flush()
            reply = self._read_line(deadline, "mid-reduction", starved)
        except (OSError, ValueError) as exc:
            self._kill()
            raise HelperFailed("died", f"reduce helper gone: {exc}") from exc
        except HelperFailed:
            self._kill()
            raise
        finally:
            self.busy = False
        if reply.get("ok"):
            self._backoff = BACKOFF_S[0]
            summary = reply.get("summary")
            if not isinstance(summary, dict):
                raise HelperFailed("error", "reduce helper answered without a summary")
            return summary
        kind = str(reply.get("kind", "error"))
        if kind == "memory":
            self._kill()  # it exits by itself; make sure, and back off
        raise HelperFailed(kind, str(reply.get("message", "reduction failed")))

    def take_cpu(self) -> float:
        """CPU seconds the helpers used since the last call (their starts left out)."""
        with self._lock:
            proc = self._proc
            now = _proc_cpu_s(proc.pid) if proc is not None else None
            new = self._cpu_lost
            self._cpu_lost = 0.0
            if now is not None:
                new += max(0.0, now - self._cpu_seen)
                self._cpu_seen = now
        return new

    def cpu_s(self) -> float:
        """CPU seconds of every helper so far (read-only: benchmarks, tests)."""
        with self._lock:
            proc = self._proc
            ended = self._cpu_ended
        now = _proc_cpu_s(proc.pid) if proc is not None and proc.returncode is None else None
        return ended + (now or 0.0)

    # -- internals ------------------------------------------------------------------------

    def _read_line(self, deadline: float, when: str,
                   check: Callable[[], None] | None = None) -> dict[str, Any]:
        """The helper's next reply line; `check` runs while waiting and may raise."""
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        fd = proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise HelperFailed("timeout", "reduce helper ran past its timeout "
                                       "(killed; restarted for the next window)")
                if not sel.select(min(left, 0.5)):
                    if self._stop.is_set():
                        raise HelperFailed("died", "tfobs is shutting down")
                    if check is not None:
                        check()
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    self._wait(proc, 1.0)
                    code = proc.returncode
                    raise HelperFailed("died", f"reduce helper exited (status {code}) {when}; "
                                       "restarted for the next window")
                self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        try:
            reply = json.loads(line)
        except ValueError as exc:
            raise HelperFailed("error", f"reduce helper answered garbage: {exc}") from exc
        if not isinstance(reply, dict):
            raise HelperFailed("error", "reduce helper answered garbage")
        return reply

    def _kill(self) -> None:
        with self._lock:
            proc = self._proc
        if proc is not None and not self._ended(proc):
            try:
                proc.kill()
            except OSError:
                pass
            self._wait(proc, 2.0)
        self._reap()

    def _ended(self, proc: subprocess.Popen[bytes]) -> bool:
        """Reap the helper if it ended, keeping its CPU (wait4's rusage: after the reap
        /proc no longer has it). Popen's own wait is not used, so it cannot reap first."""
        if proc.returncode is not None:
            return True
        try:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        except ChildProcessError:
            proc.returncode = -1
            return True
        if pid == 0:
            return False
        proc.returncode = os.waitstatus_to_exitcode(status)
        with self._lock:
            self._cpu_lost += max(0.0, usage.ru_utime + usage.ru_stime - self._cpu_seen)
            self._cpu_ended += usage.ru_utime + usage.ru_stime
            self._cpu_seen = 0.0
        return True

    def _wait(self, proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not self._ended(proc):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def _reap(self) -> None:
        """Forget an ended helper (its CPU kept for take_cpu) and plan the restart."""
        with self._lock:
            proc = self._proc
        if proc is None or not self._ended(proc):
            return
        with self._lock:
            self._proc = None
            for pipe in (proc.stdin, proc.stdout):
                try:
                    if pipe is not None:
                        pipe.close()
                except OSError:
                    pass
        self._died()

    def _died(self) -> None:
        self._next_start = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, BACKOFF_S[1])


def _proc_cpu_s(pid: int) -> float | None:
    """utime + stime of a live process, from /proc (None when unreadable)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()
    try:
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (IndexError, ValueError):
        return None


def _package_parent() -> str:
    """The folder holding the `tfobs` package, so `-m tfobs.reduce` finds this copy."""
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.dirname(os.path.dirname(here))


__all__ = ["CannotStart", "ReduceHelper", "HelperFailed", "data_limit_bytes"]
