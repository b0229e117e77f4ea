"""Shared test fixtures. Per-area helpers live in tests/support/."""

from __future__ import annotations

import pathlib

import pytest

DATA = pathlib.Path(__file__).parent / "data"
CAPTURES = DATA / "captures"


def capture_paths() -> list[pathlib.Path]:
    return sorted(CAPTURES.glob("*.xplane.pb"))


@pytest.fixture(scope="session")
def captures_dir() -> pathlib.Path:
    return CAPTURES
