"""The reduce helper's and `tfobs analyze`'s heap (`tfobs/reduce/heap.py`): freed arrays are
kept for the next one, so a reduction's megabyte arrays cost no page fault each."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tfobs.reduce.helper import ReduceHelper, data_limit_bytes

ROOT = Path(__file__).resolve().parents[2]
CAPTURE = ROOT / "tests/data/captures/generated__tf2.21cpu__ctc_loss_loop.xplane.pb"
ARGS = {"top_n": 5, "short_gap_s": 30e-6, "max_events": 5_000_000}

_FAULTS = textwrap.dedent("""
    import resource, sys
    import numpy as np
    from tfobs.reduce.heap import keep_freed_memory
    kept = keep_freed_memory() if sys.argv[1] == "kept" else None
    def round_():  # a reduction's shape: arrays held together, all dropped at its end
        held = [np.ones(1 << 17) for _ in range(40)]  # 40 x 1 MiB
        del held
    round_()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        round_()
    print(kept, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


def _faults(mode: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", _FAULTS, mode], capture_output=True, text=True,
                         cwd=ROOT, check=True, timeout=60).stdout.split()
    return out[0], int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux")
def test_kept_freed_memory_makes_each_new_array_without_page_faults() -> None:
    _, plain = _faults("plain")
    kept, faults = _faults("kept")
    assert kept == "True"
    # glibc gives the freed 40 MiB back at each round's end: 10,240 pages of 4 KiB to
    # fault in again at the next.
    assert plain > 5 * 9000
    assert faults < 1000  # the first round's pages, reused


def _minor_faults(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[7])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and glibc: Linux")
def test_the_reduce_helper_reduces_again_without_faulting_its_arrays_in() -> None:
    worker = ReduceHelper(data_limit=data_limit_bytes(256 << 20))
    try:
        first = worker.reduce(str(CAPTURE), **ARGS)
        pid = worker.pid
        assert pid is not None
        before = _minor_faults(pid)
        again = worker.reduce(str(CAPTURE), **ARGS)
        faults = _minor_faults(pid) - before
    finally:
        worker.stop(1.0)
    assert again == first
    # Without kept memory: about 8,800 (each array's pages faulted in afresh).
    assert faults < 2000, faults
