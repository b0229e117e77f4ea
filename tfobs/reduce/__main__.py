"""Entry point of the reduce helper (see `tfobs/reduce/__init__.py` for the protocol).

    python -m tfobs.reduce --parent PID --data-limit BYTES --nice N [--idle-policy 0|1]
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import resource
import signal
import sys
import threading
import time
from typing import Any, TextIO

from tfobs.reduce.heap import keep_freed_memory
from tfobs.summary import MAX_TOP_EVENTS

PR_SET_PDEATHSIG = 1
WATCH_S = 0.5


def die_with_parent(parent: int) -> None:
    """SIGKILL when the parent dies (Linux); exit now if it already has."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the watchdog and stdin EOF still stop us
        pass
    if os.getppid() != parent:
        os._exit(0)

    def watch() -> None:  # also covers a reduction that runs while the parent goes away
        while True:
            time.sleep(WATCH_S)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def limit_self(data_bytes: int, nice: int, idle_policy: bool = True) -> None:
    """Low priority and a data-size limit of our own (nothing to do for the parent).

    SCHED_IDLE (Linux) runs the helper only on CPU time nothing else wants: at nice 10 alone
    a 1 ms ticker in a training job on a busy 2-core machine waited 260 ms for a core while
    the helper reduced (issue 17). nice covers systems without SCHED_IDLE, and machines
    where other work keeps every core busy (SCHED_IDLE then never runs: the parent restarts
    a starved helper with `idle_policy` off, at nice 19)."""
    if nice > 0:
        try:
            os.nice(nice)
        except OSError:
            pass
        if not idle_policy:
            try:
                os.nice(19 - os.nice(0))
            except OSError:
                pass
        else:
            try:
                os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            except (AttributeError, OSError):
                pass
    if data_bytes > 0:
        which = getattr(resource, "RLIMIT_DATA", resource.RLIMIT_AS)
        try:
            _soft, hard = resource.getrlimit(which)
            cap = data_bytes if hard == resource.RLIM_INFINITY else min(data_bytes, hard)
            resource.setrlimit(which, (cap, hard))
        except (ValueError, OSError, OverflowError):  # a limit the OS cannot take: none
            pass


def answer(out: TextIO, reply: dict[str, Any]) -> None:
    out.write(json.dumps(reply) + "\n")
    out.flush()


def reduce_one(req: dict[str, Any]) -> dict[str, Any]:
    from tfobs.analysis.pipeline import reduce_xspace
    from tfobs.xspace.reader import parse

    with open(req["path"], "rb") as fh:
        data = fh.read()
    space = parse(data)
    count = space.event_count()
    if count > int(req["max_events"]):
        return {"ok": False, "kind": "too_large",
                "message": f"capture has {count} events, over max_capture_events="
                           f"{req['max_events']}"}
    # This process is tfobs's own, as `tfobs analyze`'s is: the cycle collector waits while
    # a capture is reduced (its per-step objects made it run over and over: a tenth of a
    # long window's reduction) and runs again between requests.
    collecting = gc.isenabled()
    gc.disable()
    try:
        summary = reduce_xspace(space, top_n=int(req["top_n"]),
                                short_gap_s=float(req["short_gap_s"]),
                                max_top_events=int(req.get("max_top_events", MAX_TOP_EVENTS)))
    finally:
        if collecting:
            gc.enable()
    return {"ok": True, "summary": summary.to_dict()}


def out_of_memory(exc: BaseException | None) -> bool:
    """A MemoryError, also one the reduction wrapped (CaptureError from MemoryError)."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, MemoryError):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tfobs.reduce")
    p.add_argument("--parent", type=int, required=True)
    p.add_argument("--data-limit", type=int, default=0)
    p.add_argument("--nice", type=int, default=10)
    p.add_argument("--idle-policy", type=int, default=1, help="1: SCHED_IDLE (Linux)")
    args = p.parse_args(argv)
    die_with_parent(args.parent)
    limit_self(args.data_limit, args.nice, bool(args.idle_policy))
    keep_freed_memory()
    # Answers go to the pipe we were given as stdout; anything a library prints goes to
    # stderr instead, so it cannot break the protocol.
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    import tfobs.analysis.pipeline
    import tfobs.xspace.reader  # noqa: F401  (imported before "ready": the first window is not slower)

    answer(out, {"ready": True, "pid": os.getpid()})
    for line in sys.stdin:  # EOF: the parent closed the pipe or died
        if not line.strip():
            continue
        try:
            reply = reduce_one(json.loads(line))
        except Exception as exc:
            if out_of_memory(exc):
                answer(out, {"ok": False, "kind": "memory",
                             "message": f"reduce helper ran out of its memory limit: {exc}"})
                return 3  # a fresh helper gets a fresh heap
            reply = {"ok": False, "kind": "error", "message": f"{type(exc).__name__}: {exc}"}
        try:
            answer(out, reply)
        except MemoryError:
            answer(out, {"ok": False, "kind": "memory",
                         "message": "reduce helper ran out of memory writing its answer"})
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
