"""Calls that may block forever on a FIFO (a TLS file read whole): run on a side thread with
a time limit, and the reader let go afterwards."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any


def call_within(fn: Callable[[], Any], seconds: float) -> tuple[bool, BaseException | None]:
    """Run `fn` on a daemon thread: (whether it returned or raised within `seconds`, what it
    raised)."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # handed to the test
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    return not thread.is_alive(), (raised[0] if raised else None)


def release_fifo(fifo: str, tries: int = 1) -> None:
    """End readers blocked on `fifo` (each reads end of file), opening it for writing up to
    `tries` times, while a reader is there to open it."""
    for _ in range(tries):
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            return
