"""When the reduce thread starts a window's reduction: four of the window's own steps after
its export, so TensorFlow's export and the reduction do not slow the same training step
(benchmarks/RESULTS.md, "The steps after a window")."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from tfobs.runtime import reduce_thread
from tfobs.runtime.reduce_thread import ReduceThread
from tfobs.window import WindowRecord


def _waited(record: WindowRecord, stopping: bool = False) -> float:
    thread = SimpleNamespace(_w=SimpleNamespace(stopping=stopping))
    t0 = time.monotonic()
    ReduceThread._let_steps_pass(thread, SimpleNamespace(record=record))  # type: ignore[arg-type]
    return time.monotonic() - t0


def test_reduction_starts_four_of_the_windows_steps_after_the_export() -> None:
    # Five traced steps of 20 ms: the reduction waits 80 ms.
    rec = WindowRecord(index=0, start_ns=0, end_ns=100_000_000, first_step=10, last_step=14)
    assert reduce_thread.SETTLE_STEPS == 4
    assert 0.08 <= _waited(rec) < 0.08 + 0.3  # well under the 0.5 s cap


def test_slow_steps_wait_at_most_the_cap_and_no_steps_not_at_all() -> None:
    slow = WindowRecord(index=0, start_ns=0, end_ns=10_000_000_000, first_step=0, last_step=4)
    assert reduce_thread.SETTLE_MAX_S <= _waited(slow) < reduce_thread.SETTLE_MAX_S + 0.3
    on_demand = WindowRecord(index=1, start_ns=0, end_ns=2_000_000_000)  # no step traced
    assert _waited(on_demand) < 0.05  # no wait; the settle wait is >= 0.08 s


def test_disable_ends_the_wait() -> None:
    slow = WindowRecord(index=0, start_ns=0, end_ns=10_000_000_000, first_step=0, last_step=4)
    assert _waited(slow, stopping=True) < 0.05  # the busy lane runs at idle priority
    w = SimpleNamespace(stopping=False)
    threading.Timer(0.05, lambda: setattr(w, "stopping", True)).start()
    t0 = time.monotonic()
    ReduceThread._let_steps_pass(SimpleNamespace(_w=w), SimpleNamespace(record=slow))  # type: ignore[arg-type]
    assert time.monotonic() - t0 < 0.05 + 0.3  # not the 0.5 s cap
