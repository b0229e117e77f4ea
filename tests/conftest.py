"""Shared test fixtures. Per-area helpers live in tests/support/."""

from __future__ import annotations

import os
import pathlib

import pytest

from tests.support.demo_run import DemoRun, run_demo

# Windows of a fixed length in every test and in the jobs tests start: on a 2-core machine
# a window's export may stretch a step past the limit and shorten later windows, which tests
# of other things must not depend on. tests/runtime/test_window_length.py turns it on.
os.environ.setdefault("TFOBS_EXPORT_STEP_STRETCH", "0")

DATA = pathlib.Path(__file__).parent / "data"
CAPTURES = DATA / "captures"


def capture_paths() -> list[pathlib.Path]:
    return sorted(CAPTURES.glob("*.xplane.pb"))


def fidelity_capture_paths() -> list[pathlib.Path]:
    """The captures held against XProf and the plain protobuf: the test data's, or with
    `TFOBS_FIDELITY_CAPTURES=<folder>` every `*.xplane.pb` there (fresh captures of one's
    own workloads, e.g. from `tools/record_tf_captures.py --out <folder>`)."""
    folder = os.environ.get("TFOBS_FIDELITY_CAPTURES")
    if not folder:
        return capture_paths()
    found = sorted(pathlib.Path(folder).rglob("*.xplane.pb"))
    if not found:
        raise pytest.UsageError(f"TFOBS_FIDELITY_CAPTURES={folder}: no *.xplane.pb there")
    return found


# `bash scripts/test.sh` runs the suite in lanes: "busy" (most tests, at the
# idle scheduling class) side by side with "waits" (tests that mostly wait on timeouts,
# servers or sleeping jobs), then "alone" (tests that time the job or need idle cores).
# PYTEST_LANE picks one lane; unset (a plain `pytest`, or TFOBS_LANES=0), every test runs.
LANES = ("busy", "waits", "alone")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    lane = os.environ.get("PYTEST_LANE", "")
    if not lane:
        return
    if lane not in LANES:
        raise pytest.UsageError(f"PYTEST_LANE={lane}: use one of {', '.join(LANES)}")

    def lane_of(item: pytest.Item) -> str:
        for marker in ("alone", "waits"):
            if item.get_closest_marker(marker) is not None:
                return marker
        return "busy"

    keep, dropped = [], []
    for item in items:
        (keep if lane_of(item) == lane else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture(scope="session")
def captures_dir() -> pathlib.Path:
    return CAPTURES


@pytest.fixture(scope="session")
def healthy_demo(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """One default `tfobs demo` run, read by every test that asks something of it."""
    return run_demo(tmp_path_factory.mktemp("healthy-demo"))
