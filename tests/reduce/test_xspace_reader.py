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


@pytest.mark.parametrize("wire", ["compiled", "numpy"])
@pytest.mark.parametrize("path", capture_paths()[::6], ids=lambda p: p.name.split(".")[0])
def test_events_are_counted_per_line_without_decoding_one(
        path: pathlib.Path, wire: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lines are parsed without their events (protobuf keeps them as unknown fields, no
    object per event): each line's count equals the plain protobuf's, read before and
    without any event column, and the columns then hold exactly those events."""
    from tfobs.xspace import columns

    if wire == "numpy":
        monkeypatch.setattr(columns, "_wire", None)
    data = path.read_bytes()
    plain = XSpace.FromString(data)
    space = parse(data)
    for view, proto in zip(space.planes, plain.planes, strict=True):
        want = [len(line.events) for line in proto.lines]
        assert view.line_counts == want
        assert view._events is None  # counted, not decoded
        events = view.events
        assert events.line_start[-1] == sum(want) == events.mid.size
        assert view.line_counts == want
        mids = [e.metadata_id for line in proto.lines for e in line.events]
        assert events.mid.tolist() == mids


def test_a_line_whose_events_protobuf_cannot_read_is_a_capture_error() -> None:
    """With events left unread by the parse, a line whose event runs past the line's end is
    still one clear error (protobuf checks the framing of the fields it keeps unread)."""
    from tfobs.xspace import schema

    line = schema.XLineEvents(id=1, timestamp_ns=5)
    line.events.append(b"\x08\x01")
    good = line.SerializeToString()
    bad = good[:-3] + b"\x22\x7f\x08"  # the event's length now runs past the line
    plane = schema.XPlaneLite(id=1, name="/host:CPU")
    plane.lines.add().MergeFromString(good)
    data = schema.XSpaceLite(planes=[plane]).SerializeToString()
    data = data.replace(good, bad)
    with pytest.raises(CaptureError) as info:
        parse(data).planes[0].events  # noqa: B018
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("data", [b"", b"\x00", b"garbage" * 100, 12345, b"\x12\x03abc"])
def test_bad_bytes_raise_capture_error(data: object) -> None:
    with pytest.raises(CaptureError) as info:
        parse(data)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_a_name_that_is_not_utf8_is_said_so() -> None:
    """A plane name cut mid-character: whole and of the right kind, so the error says what
    is wrong with it where protobuf tells (5 on), and names it among the causes where not."""
    from tfobs.xspace import schema

    plane = schema.XPlaneLite(id=1, name="/host:CPU")
    data = schema.XSpaceLite(planes=[plane]).SerializeToString()
    data = data.replace(b"/host:CPU", b"/host:\xff\xfeU")
    with pytest.raises(CaptureError) as info:
        parse(data)
    text = str(info.value)
    assert "not valid UTF-8" in text and "\n" not in text
    try:  # where protobuf's own error says so (protobuf 5 on), only that is said
        schema.XSpaceLite().ParseFromString(data)
    except Exception as exc:  # the runtime's own words are the point
        if "UTF-8" in str(exc):
            assert "truncated" not in text


def test_a_folder_whose_only_capture_is_not_a_file_says_it_was_skipped(
        tmp_path: pathlib.Path) -> None:
    # A FIFO named as a capture is never opened (it would wait for a writer); the line said
    # "no capture" as if the folder were empty.
    import os

    os.mkfifo(tmp_path / "host.xplane.pb")
    with pytest.raises(CaptureError, match=r"host\.xplane\.pb is not a regular file "
                                           r"\(skipped\); point at a capture file"):
        read_source(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(CaptureError, match=r"no \*\.xplane\.pb capture under .*empty; point"):
        read_source(tmp_path / "empty")


def test_loader_finds_newest_run_and_rejects_missing(tmp_path: pathlib.Path) -> None:
    with pytest.raises(CaptureError, match="no such file"):
        read_source(tmp_path / "nope.xplane.pb")
    (tmp_path / "a.xplane.pb").symlink_to(tmp_path / "b.xplane.pb")
    (tmp_path / "b.xplane.pb").symlink_to(tmp_path / "a.xplane.pb")
    with pytest.raises(CaptureError, match="symbolic link that leads to no file"):
        read_source(tmp_path / "a.xplane.pb")
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
