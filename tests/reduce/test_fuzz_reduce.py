"""Fuzz: 10,000 structure-aware mutated captures through `tfobs.analyze` and a few hundred
through the `tfobs analyze` command; each gives a summary or a CaptureError (exit 2 with one
line), never another exception, each within a time bound. Fixed seed; a longer run is
`benchmarks/fuzz_long.py`.
"""

from __future__ import annotations

import contextlib
import io
import pathlib
import random
import time

import pytest

import tfobs
from tests.conftest import capture_paths
from tests.support.fuzz import mutate, trimmed_base
from tfobs.cli import main

SEED = 20240501
CASES = 10_000
CLI_CASES = 300
BOUND_S = 5.0  # per capture; typical is a few ms, worst seen 0.4 s on a loaded 2-core machine


@pytest.fixture(scope="module")
def bases() -> list[bytes]:
    return [trimmed_base(p) for p in capture_paths()]


@pytest.mark.slow  # 10,000 fuzzed captures: half a minute of CPU on a quiet 2-core machine
def test_reducer_only_raises_capture_error(bases: list[bytes]) -> None:
    rng = random.Random(SEED)
    outcomes = {"summary": 0, "capture_error": 0}
    worst = 0.0
    for k in range(CASES):
        data = mutate(bases[k % len(bases)], rng)
        start = time.perf_counter()
        try:
            summary = tfobs.analyze(data)
        except tfobs.CaptureError as exc:
            assert "\n" not in str(exc)
            outcomes["capture_error"] += 1
        else:
            assert summary.steps.count == len(summary.steps.items)
            assert summary.input_bound.verdict in ("highly", "moderately", "potentially",
                                                   "not", "unknown")
            outcomes["summary"] += 1
        elapsed = time.perf_counter() - start
        worst = max(worst, elapsed)
        assert elapsed < BOUND_S, f"case {k} took {elapsed:.2f} s"
    # Both outcomes occur: the mutations reach the analyses, not only the parser.
    assert outcomes["summary"] > CASES // 2 and outcomes["capture_error"] > 0, outcomes


@pytest.mark.slow  # seconds of training or waiting: the full suite, not the quick one
def test_command_exits_0_or_2_with_one_line(bases: list[bytes], tmp_path: pathlib.Path) -> None:
    rng = random.Random(SEED + 1)
    path = tmp_path / "fuzz.xplane.pb"
    codes = set()
    for k in range(CLI_CASES):
        data = mutate(bases[k % len(bases)], rng)
        if k % 10 == 0:
            data = data[: rng.randrange(len(data))]  # truncated files too
        path.write_bytes(data)
        out, err = io.StringIO(), io.StringIO()
        start = time.perf_counter()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(["analyze", str(path), "--format", rng.choice(("table", "json"))])
        assert time.perf_counter() - start < BOUND_S
        assert rc in (0, 2)
        if rc == 2:
            assert len(err.getvalue().strip().splitlines()) == 1
        codes.add(rc)
    assert codes == {0, 2}
