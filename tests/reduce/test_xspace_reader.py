"""The XSpace reader and the capture loader: real captures parse, bad bytes give one line."""

from __future__ import annotations

import pathlib

import pytest

from tests.conftest import CAPTURES, capture_paths
from tfobs import CaptureError
from tfobs.analysis.load import find_capture, read_source
from tfobs.analysis.timeline import Timeline
from tfobs.xspace.reader import parse
from tfobs.xspace.schema import XSpace


@pytest.mark.parametrize("path", capture_paths(), ids=lambda p: p.name.split(".")[0])
def test_real_captures_parse_into_sorted_timelines(path: pathlib.Path) -> None:
    data = path.read_bytes()
    space = parse(data)
    # every event the plain protobuf holds, no more, no fewer
    plain = XSpace.FromString(data)
    expected = sum(len(line.events) for plane in plain.planes for line in plane.lines)
    assert space.planes and space.event_count() == expected > 100
    for plane in space.planes:
        for line in Timeline(plane).lines:
            assert line.starts == sorted(line.starts)
            assert all(e >= s for s, e in zip(line.starts, line.ends, strict=True))


@pytest.mark.parametrize("data", [b"", b"\x00", b"garbage" * 100, 12345, b"\x12\x03abc"])
def test_bad_bytes_raise_capture_error(data: object) -> None:
    with pytest.raises(CaptureError) as info:
        parse(data)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_loader_finds_newest_run_and_rejects_missing(tmp_path: pathlib.Path) -> None:
    with pytest.raises(CaptureError, match="no such file"):
        read_source(tmp_path / "nope.xplane.pb")
    for run in ("a_run", "b_run"):
        folder = tmp_path / "plugins" / "profile" / run
        folder.mkdir(parents=True)
        (folder / "h.xplane.pb").write_bytes(run.encode())
    assert find_capture(tmp_path).parent.name == "b_run"
    data, label = read_source(tmp_path, run="a_run")
    assert data == b"a_run" and label.endswith("h.xplane.pb")
    assert read_source(b"xyz") == (b"xyz", "<bytes>")
    with pytest.raises(CaptureError):
        read_source(CAPTURES / "missing.xplane.pb")
