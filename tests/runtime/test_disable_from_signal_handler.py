"""`tfobs.disable()` from a signal handler that ran while tfobs's own code held its profiler
slot's lock on the same thread (a window opening) hung the job for good: the handler waited
for a lock its own thread held. It now returns within its timeout."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(120)

ROOT = pathlib.Path(__file__).resolve().parents[2]

JOB = r"""
import os, sys, time
sys.modules["tensorflow"] = None  # no profiler needed: the slot's lock is what matters
import tfobs
from tfobs.runtime import lifecycle

runtime = tfobs.enable(metrics_port=-1, nvml=False)
assert runtime is not None
slot = runtime.slot

def handler():  # the job's own code, as a signal handler runs it
    t0 = time.monotonic()
    tfobs.disable(timeout_s=1.0)
    print("disable took", round(time.monotonic() - t0, 2), flush=True)

# A frame of tfobs's own code holding the slot's lock (as ProfilerSlot.start does) when the
# handler runs on its thread.
code = compile("with slot._lock:\n    handler()\n",
               os.path.join(os.path.dirname(lifecycle.__file__), "opening.py"), "exec")
exec(code, {"slot": slot, "handler": handler})
print("went on", flush=True)
"""



def _run(job: str) -> subprocess.CompletedProcess[str]:
    """`job` in a Python process of its own, tfobs from this tree, quiet."""
    return subprocess.run([sys.executable, "-c", job], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin",
                                                      "PYTHONPATH": str(ROOT),
                                                      "TFOBS_QUIET": "1"})

def test_disable_from_a_handler_that_interrupted_tfobs_returns() -> None:
    proc = _run(JOB)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "went on" in proc.stdout
    took = float(proc.stdout.split("disable took ")[1].split()[0])
    assert took < 5.0


STARTING = r"""
import sys, time
sys.modules["tensorflow"] = None
import tfobs
from tfobs.runtime import lifecycle
from tfobs.runtime.core import Runtime

calls = []
real_start = Runtime.start

def start(self):  # a signal handler runs while enable() starts, on its thread
    out = real_start(self)
    t0 = time.monotonic()
    tfobs.disable(timeout_s=2.0)
    calls.append(round(time.monotonic() - t0, 2))
    return out

Runtime.start = start
got = tfobs.enable(metrics_port=-1, nvml=False)
print("enable returned", got, "disable took", calls[0], flush=True)
assert got is None and lifecycle._instance is None
Runtime.start = real_start
again = tfobs.enable(metrics_port=-1, nvml=False)  # a later enable() starts as usual
assert again is not None and again.running
tfobs.disable(timeout_s=2.0)
print("went on", flush=True)
"""


def test_disable_from_a_handler_that_interrupted_enable_stops_tfobs_once_started() -> None:
    # enable() holds its instance lock while it starts (hundreds of ms): a preemption
    # handler calling disable() then waited for the lock its own thread held, for good.
    proc = _run(STARTING)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "enable returned None" in proc.stdout and "went on" in proc.stdout
    took = float(proc.stdout.split("disable took ")[1].split()[0])
    assert took < 1.0
