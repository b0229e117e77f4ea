"""Keep TensorFlow's profiler from writing INFO lines into the job's log.

Every session TF's C++ profiler logs five INFO lines ("Profiler session initializing",
"... started", "... collecting data", "... tear down", "Collecting XSpace to repository").
TF 2.21 logs through absl, whose minimum level can change at run time with
`absl::SetMinLogLevel`, but no Python binding exposes it, so this module calls the C++
function that `libtensorflow_framework.so.2` exports, through ctypes. Its name carries the
absl version (`lts_YYYYMMDD`), so it is read from the library's symbol names once.

`quiet()` raises the level to WARNING only around the profiler calls that log (start,
export, drop), never the whole window: the job's own warnings and errors always show, and
its INFO lines are hidden only for those few milliseconds. Where the function cannot be
found (another TF build), nothing changes; docs/usage.md names TF_CPP_MIN_LOG_LEVEL=1 then.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import mmap
import os
import re
import threading
from collections.abc import Iterator
from typing import Any

_log = logging.getLogger(__name__)

WARNING = 1  # absl::LogSeverityAtLeast::kWarning
_SET = re.compile(rb"_ZN4absl(?:\d+lts_\d+)?14SetMinLogLevelENS(?:0_|_)18LogSeverityAtLeastE\0")
_GET = re.compile(rb"_ZN4absl(?:\d+lts_\d+)?11MinLogLevelEv\0")

_lock = threading.Lock()
_resolved = False
_set_fn: Any = None
_get_fn: Any = None
_depth = 0  # scopes open now, on any thread
_saved = 0  # the level before the first open scope


def _library() -> str:
    import tensorflow as tf  # already imported by the job when this runs

    return os.path.join(os.path.dirname(tf.__file__), "libtensorflow_framework.so.2")


def prepare() -> bool:
    """Find absl's SetMinLogLevel/MinLogLevel (once; about 60 ms). True when found."""
    global _resolved, _set_fn, _get_fn
    with _lock:
        if _resolved:
            return _set_fn is not None
        _resolved = True
        try:
            path = _library()
            with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
                names = [_symbol(rx, m) for rx in (_SET, _GET)]
            if not all(names):
                _log.debug("absl SetMinLogLevel not found in %s", path)
                return False
            lib = ctypes.CDLL(path)  # the copy TF loaded: dlopen returns the same handle
            setter, getter = (getattr(lib, name) for name in names)
            setter.argtypes, setter.restype = [ctypes.c_int], None
            getter.argtypes, getter.restype = [], ctypes.c_int
            getter()  # a call that fails here fails before any level is changed
        except Exception:  # no TF, another build, no ctypes: leave TF's logging alone
            _log.debug("cannot control TensorFlow's C++ log level", exc_info=True)
            return False
        _set_fn, _get_fn = setter, getter
        return True


def _symbol(rx: re.Pattern[bytes], data: Any) -> str:
    hit = rx.search(data)
    return bytes(hit.group())[:-1].decode() if hit else ""


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Hide TF's C++ INFO lines inside the block (WARNING and above still show)."""
    global _depth, _saved
    if not (_resolved and _set_fn is not None):  # prepare() not run or failed: no change
        yield
        return
    with _lock:
        if _depth == 0:
            _saved = _get_fn()
            if _saved < WARNING:
                _set_fn(WARNING)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            # Put back the job's level unless something else changed it meanwhile.
            if _depth == 0 and _saved < WARNING and _get_fn() == WARNING:
                _set_fn(_saved)
