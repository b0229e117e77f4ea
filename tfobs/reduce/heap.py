"""The heap of tfobs's own reducing processes: the reduce helper and `tfobs analyze`.

A reduction makes and drops arrays of megabytes one after another. glibc's malloc maps each
one above 128 KB afresh and unmaps it when freed (its own limit grows only to the largest
block freed so far), and trims the heap's top as soon as 128 KB of it are free: every 4 KB
of each new array then costs a page fault. On a 7.6 MB capture that was 11,000 faults a
reduction, a sixth of its time. Kept for the next array instead, the freed memory is
reused without a fault. Only these processes ask it: a training job's allocator is its own.
"""

from __future__ import annotations

import ctypes

# mallopt's parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# Blocks below this come from the heap (glibc's ceiling for it on 64-bit systems).
MMAP_THRESHOLD_BYTES = 32 << 20
# At most this much free memory stays mapped at the heap's top between reductions; the
# helper's data-size limit still bounds the whole.
TRIM_THRESHOLD_BYTES = 128 << 20


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to keep freed blocks for reuse (see the module's note). False
    where the C library has no `mallopt` (macOS, musl without it) or refused a setting."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
