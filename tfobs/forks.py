"""What each part of tfobs does in a forked child, registered in one place.

A child of `fork()` has none of the parent's threads but a copy of their objects: a served
port, a profiler session, a span queue, a helper's pipes. Each part that holds such a thing
registers here what the child must do to forget it; `os.register_at_fork` (whose hooks can
never be removed) is called once, by this module, and runs them in the order registered.

A bound method is held weakly: an exporter closed and collected has nothing left to forget and
is not kept alive by its fork duty. A failing callback is logged at debug and the next one
still runs: nothing raises into the child's own code.
"""

from __future__ import annotations

import inspect
import logging
import os
import threading
import weakref
from collections.abc import Callable

_log = logging.getLogger(__name__)

_Ref = Callable[[], "Callable[[], object] | None"]

_lock = threading.Lock()
_entries: list[_Ref] = []
_hooked = False


def after_fork_in_child(fn: Callable[[], object]) -> None:
    """Run `fn()` in every child forked from now on (a bound method is held weakly).
    Registering the same duty again (an enable after a disable) keeps one entry."""
    ref: _Ref
    if inspect.ismethod(fn):
        ref = weakref.WeakMethod(fn)
    else:
        ref = _strong(fn)
    global _hooked
    with _lock:
        _entries[:] = [e for e in _entries if e() is not None]  # a long job creates many exporters
        if any(e() == fn for e in _entries):
            return
        _entries.append(ref)
        if not _hooked and hasattr(os, "register_at_fork"):
            _hooked = True
            os.register_at_fork(after_in_child=_run_in_child)


def _strong(fn: Callable[[], object]) -> _Ref:
    return lambda: fn


def _run_in_child() -> None:
    # No lock: the child has one thread, and a lock held by another thread at the fork
    # would stay held here for good.
    for ref in list(_entries):
        fn = ref()
        if fn is None:
            continue
        try:
            fn()
        except Exception:  # never into the child's own code; the next part still forgets
            _log.debug("tfobs: after fork, %r failed", fn, exc_info=True)
