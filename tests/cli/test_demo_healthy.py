"""The demo's default run shows what a healthy job looks like."""

from __future__ import annotations

import collections
import re

import pytest

from tests.support.demo_run import DemoRun

pytestmark = pytest.mark.slow  # trains in a subprocess (one run, shared: tests/conftest.py)


def test_default_demo_reads_healthy(healthy_demo: DemoRun) -> None:
    assert healthy_demo.returncode == 0, healthy_demo.stderr[-2000:]
    verdicts = collections.Counter(re.findall(r"input-bound: (\w+) \(", healthy_demo.stdout))
    assert sum(verdicts.values()) >= 3, healthy_demo.stdout
    # The machine is shared: a window may catch a stall, but the run as a whole reads healthy.
    assert verdicts.most_common(1)[0][0] == "not", verdicts
    assert verdicts["highly"] == 0, healthy_demo.stdout
