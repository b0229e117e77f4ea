"""The process's memory as a window's memory guard reads it: resident set size, and the bytes
glibc's malloc holds live.

While the profiler traces, its event buffers are live allocations. RSS alone overstates
them: on a CPU job that frees multi-MiB tensors every step, glibc's heap keeps the freed
memory (the dynamic mmap threshold moves large blocks into the heap, and the trace's small
buffers pin it), so RSS grew 40-60 MiB per traced step of the demo model while malloc's live
bytes grew 1-2 MiB (RESULTS.md "Memory while tracing"). `live_bytes()` lets the guard tell
the trace's own growth from the allocator's.
"""

from __future__ import annotations

import ctypes
import logging
import os

_log = logging.getLogger(__name__)


def rss_bytes() -> int:
    """Resident set size of this process (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _mallinfo2() -> object | None:
    try:
        fn = ctypes.CDLL(None).mallinfo2  # glibc >= 2.33; absent on musl and macOS
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    fn.argtypes = []
    return fn


_MALLINFO2 = _mallinfo2()


def live_bytes() -> int | None:
    """Bytes malloc has handed out and not had back (heap chunks in use plus mmapped
    blocks), or None where glibc's `mallinfo2` is missing. Costs 0.1-0.3 ms (it walks each
    arena's free lists under that arena's lock): call it rarely."""
    fn = _MALLINFO2
    if fn is None:
        return None
    try:
        info = fn()  # type: ignore[operator]
        return int(info.uordblks + info.hblkhd)
    except Exception:  # never into the caller: the bound falls back to RSS
        _log.debug("tfobs: mallinfo2 failed", exc_info=True)
        return None
