"""A profiler session copied into a forked child, dropped there without blocking the child.

A fork during a window copies an active profiler session: left alone, the child keeps
tracing (its memory grows with every op) and its own profiler cannot start. The copy is
destroyed (which stops tracing without writing) on a short-lived thread, so that if the fork
caught a profiler lock held by another thread, only that thread waits, never the child.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

_log = logging.getLogger(__name__)

_kept: list[Any] = []  # copies no thread could drop: kept alive rather than freed here


def drop(session: Any) -> None:
    """Destroy `session` (the child's copy) on a short-lived thread."""
    holder = [session]
    del session

    def release() -> None:
        holder.clear()  # the last reference: the C++ destructor stops the tracers

    try:
        threading.Thread(target=release, name="tfobs-fork-untrace", daemon=True).start()
    except Exception:  # cannot start a thread in this child: keep it, as before
        _log.debug("tfobs: no thread to drop the copied profiler session", exc_info=True)
        _kept.extend(holder)
