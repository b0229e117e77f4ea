"""The TensorFlow releases tfobs supports (docs/install.md, "Supported versions"): each
resolves with tfobs in a fresh venv without pip changing what it picks for TensorFlow alone,
and the oldest one runs for real in the compatibility job (scripts/compat.sh), which also runs the
demo test below with that TensorFlow."""

from __future__ import annotations

import pathlib
import re
from typing import Any

import pytest

import tfobs
from tests.support.demo_run import DemoRun
from tests.support.dists import REPO, built_dists, dry_run, each_at_once, fresh_venv, run

# Newest patch release of each supported minor version; the first is the compat job's.
SUPPORTED = {"2.16": "2.16.2", "2.17": "2.17.1", "2.18": "2.18.1", "2.19": "2.19.1",
             "2.20": "2.20.0", "2.21": "2.21.0"}


def readme_matrix() -> dict[str, list[str]]:
    """Rows of the support matrix (docs/install.md): TensorFlow minor -> the row's cells."""
    text = (REPO / "docs" / "install.md").read_text()
    section = text.split("## Supported versions", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and re.fullmatch(r"2\.\d+", cells[0]):
            rows[cells[0]] = cells
    return rows


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def test_readme_matrix_lists_every_supported_version() -> None:
    rows = readme_matrix()
    assert list(rows) == list(SUPPORTED)
    assert SUPPORTED["2.16"] in (REPO / "scripts" / "compat.sh").read_text()


def _resolve(pip: pathlib.Path, minor: str, wheel: pathlib.Path,
             out: pathlib.Path) -> tuple[dict[str, str], dict[str, str]]:
    """pip's picks for the user's TensorFlow alone, and with tfobs[all] beside it."""
    user = [f"tensorflow=={SUPPORTED[minor]}", f"tf_keras~={minor}.0"]
    alone = dry_run(pip, user, out / f"{minor}-alone.json")
    both = dry_run(pip, [*user, f"{wheel}[all]"], out / f"{minor}-with-tfobs.json")
    return alone, both


@pytest.fixture(scope="module")
def resolutions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every supported release resolved at once (pip evaluating the index's links: CPU).
    A dry run changes nothing, so one empty venv stands for a fresh one per release.

    With pip's newest release: its resolver picks as the one Python ships does (the same
    resolver since pip 20.3) at less than half the CPU (it reads the index's metadata files
    where the older one downloads each candidate wheel, and checks wheel tags faster): 6 s
    against 13.5 s for one of the twelve dry runs on a 2-core VM."""
    out = tmp_path_factory.mktemp("resolve")
    pip = fresh_venv(out / "venv") / "pip"
    run([str(pip), "install", "--disable-pip-version-check", "--quiet", "--upgrade", "pip"])
    wheel, _ = built_dists()
    return each_at_once(SUPPORTED, lambda m: _resolve(pip, m, wheel, out))


@pytest.mark.slow  # busy lane: pip's twelve dry runs keep both cores busy (about 150 s of CPU)
@pytest.mark.parametrize("minor", list(SUPPORTED))
def test_supported_tensorflow_resolves_with_tfobs(minor: str,
                                                 resolutions: dict[str, Any]) -> None:
    if isinstance(resolutions[minor], BaseException):
        raise resolutions[minor]
    alone, both = resolutions[minor]
    assert both["tfobs"] == tfobs.__version__
    # Adding tfobs (every extra) changes none of pip's picks for the user's environment.
    changed = {name: (v, both.get(name)) for name, v in alone.items() if both.get(name) != v}
    assert not changed, changed
    assert both["tensorflow"] == SUPPORTED[minor]
    # The matrix's row says what pip picks beside this release.
    row = readme_matrix()[minor]
    picks = {"keras": both["keras"], "numpy": both["numpy"], "protobuf": both["protobuf"],
             "opentelemetry-sdk": both["opentelemetry-sdk"]}
    for cell, name in ((1, "keras"), (3, "numpy"), (4, "protobuf")):
        assert row[cell].split(".")[0] == picks[name].split(".")[0], (row, picks)
    assert row[2] == _major_minor(both["tf-keras"]) == minor, (row, picks)
    otel = _major_minor(both["opentelemetry-sdk"])
    assert row[5] == ("newest" if int(both["protobuf"].split(".")[0]) >= 5 else otel), (
        row, picks)


@pytest.mark.slow
def test_demo_runs_clean_on_this_tensorflow(healthy_demo: DemoRun) -> None:
    """`tfobs demo` with whatever TensorFlow this venv has (2.21 in the main suite, 2.16 in
    the compatibility job): windows are captured and reduced, none fails."""
    assert healthy_demo.returncode == 0, healthy_demo.stderr[-3000:]
    fields = healthy_demo.done_fields()
    assert fields, healthy_demo.stdout[-2000:]
    assert int(fields["captured"]) >= 1 and int(fields["errors"]) == 0, fields
    assert "failed" not in fields or int(fields["failed"]) == 0, fields
    assert healthy_demo.window_lines()
