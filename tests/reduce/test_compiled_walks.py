"""The compiled walks (`tfobs/xspace/_wire.c`) equal the numpy code they stand in for.

Each compiled loop has a numpy twin in `columns.py` (used where no C compiler was at
install). Held equal on every test capture (the whole reduction), on seeded random and
damaged bytes (same values, or the same one-line error), and loop by loop.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from tests.conftest import capture_paths, fidelity_capture_paths
from tests.reduce.test_fast_paths import _random_stats_space, _varint
from tfobs.analysis import breakdown, reduce_xspace
from tfobs.analysis.timeline import Timeline, int_stats_at
from tfobs.errors import CaptureError
from tfobs.xspace import columns, schema
from tfobs.xspace.reader import parse


@pytest.fixture
def numpy_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run with the compiled walks switched off, as an install without a compiler runs."""
    monkeypatch.setattr(columns, "_wire", None)


def _without_walks(monkeypatch: pytest.MonkeyPatch, job):  # type: ignore[no-untyped-def]
    with monkeypatch.context() as m:
        m.setattr(columns, "_wire", None)
        return job()


def test_compiled_walks_are_built() -> None:
    """The suite's install (scripts/test.sh) builds the module; a missing one would leave
    every other test here comparing numpy with itself."""
    assert columns.compiled(), (
        "tfobs.xspace._wire was not built: install a C compiler and Python's headers "
        "(apt-get install gcc python3-dev), then pip install -e . again")


def _outcome(data: bytes) -> object:
    try:
        return reduce_xspace(data).to_dict()
    except CaptureError as exc:
        return f"CaptureError: {exc}"


@pytest.mark.parametrize("path", fidelity_capture_paths(), ids=lambda p: p.name[:-10])
def test_every_capture_reduces_the_same_without_the_compiled_walks(
        path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = path.read_bytes()
    compiled = _outcome(data)
    assert not isinstance(compiled, str), compiled
    assert _without_walks(monkeypatch, lambda: _outcome(data)) == compiled


def _small_captures() -> list[pathlib.Path]:
    return [p for p in capture_paths() if p.stat().st_size < 300_000][:6]


@pytest.mark.parametrize("seed", range(24))
def test_damaged_events_give_the_same_outcome(seed: int,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Bytes of a real capture's events overwritten at random (varints cut short or made
    endless, lengths and tags changed): the compiled and numpy readers agree, on the
    figures or on the error."""
    rng = np.random.default_rng(seed)
    small = _small_captures()
    path = small[seed % len(small)]
    # The light schema holds each event as bytes: damage goes past protobuf to the readers.
    space = schema.XSpaceLite.FromString(path.read_bytes())
    lines = [line for p in space.planes for line in p.lines if len(line.events)]
    assert lines, path.name
    for _ in range(int(rng.integers(1, 6))):
        line = lines[int(rng.integers(0, len(lines)))]
        k = int(rng.integers(0, len(line.events)))
        raw = bytearray(line.events[k])
        for _ in range(int(rng.integers(1, 4))):
            if raw:
                raw[int(rng.integers(0, len(raw)))] = int(rng.choice(
                    [0x80, 0xFF, 0x22, 0x0, int(rng.integers(256))]))
        line.events[k] = bytes(raw)
    data = space.SerializeToString()
    assert _outcome(data) == _without_walks(monkeypatch, lambda: _outcome(data))


def _line_with_raw_events(raws: list[bytes]) -> bytes:
    line = schema.XLineLite(id=1, timestamp_ns=5)
    line.events.extend(raws)
    plane = schema.XPlaneLite(id=1, name="/host:CPU")
    plane.lines.append(line)
    return schema.XSpaceLite(planes=[plane]).SerializeToString()


@pytest.mark.parametrize("seed", range(30))
def test_random_event_bytes_give_the_same_columns_or_error(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Events of random bytes, half of them well-formed fields with a random byte changed:
    the same columns, stat records and integer stats from both readers, or both raise."""
    rng = np.random.default_rng(seed)
    raws = []
    for _ in range(int(rng.integers(1, 60))):
        fields = [(1, int(rng.integers(0, 200))), (2, int(rng.integers(0, 2**63))),
                  (3, int(rng.integers(0, 2**40)))]
        raw = b"".join(bytes([n << 3]) + _varint(v) for n, v in fields)
        for _ in range(int(rng.integers(0, 5))):
            stat = bytes([0x08, int(rng.integers(1, 8)), int(rng.choice([0x18, 0x20, 0x38]))])
            stat += _varint(int(rng.integers(-2**62, 2**62)))
            raw += bytes([0x22]) + _varint(len(stat)) + stat
        raw = bytearray(raw)
        if rng.random() < 0.5 and raw:
            raw[int(rng.integers(0, len(raw)))] = int(rng.integers(0, 256))
        raws.append(bytes(raw))
    data = _line_with_raw_events(raws)

    def read() -> object:
        try:
            cols = parse(data).planes[0].events
            every = np.arange(len(cols))
            stats = cols.stats_of(every)
            tl = Timeline(parse(data).planes[0])
            ints = int_stats_at(tl, every, {1: "a", 2: "b", 5: "c"}, raw=True)
            return ([c.tolist() for c in (cols.mid, cols.offset, cols.duration)],
                    [getattr(stats, k).tolist() for k in ("event", "mid", "kind", "value")],
                    {k: (v.tolist(), h.tolist()) for k, (v, h) in ints.items()})
        except CaptureError as exc:
            return f"CaptureError: {exc}"

    assert read() == _without_walks(monkeypatch, read)


@pytest.mark.parametrize("seed", range(16))
def test_int_stats_equal_without_the_compiled_walk(seed: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The linking stats of step grouping, every value kind and repeated ids (seeds >= 8:
    ids past one byte, which the compiled walk hands back to numpy)."""
    base = 0 if seed < 8 else 300
    data = _random_stats_space(seed, base)
    wanted = {base + k: str(k) for k in range(1, 8)}

    def read(raw: bool) -> dict:
        host = Timeline(parse(data).plane("/host:CPU"))
        got = int_stats_at(host, np.arange(len(host.columns)), wanted, raw=raw)
        return {k: (v.tolist(), h.tolist()) for k, (v, h) in got.items()}

    for raw in (False, True):
        assert read(raw) == _without_walks(monkeypatch, lambda raw=raw: read(raw))


@pytest.mark.parametrize("seed", range(20))
def test_varints_equal_numpy(seed: int) -> None:
    """Varints of every length at random positions, some endless (ten bytes with the
    continuation bit): the same values and lengths, or both refuse."""
    rng = np.random.default_rng(seed)
    parts = [_varint(int(rng.integers(0, 2**63)) << int(rng.integers(0, 2)))
             for _ in range(200)]
    if seed % 2:
        parts.insert(int(rng.integers(0, 200)), bytes([0xFF] * 10) + b"\x01")
    blob = b"".join(parts)
    buf = np.frombuffer(blob + bytes(16), np.uint8)
    pos = np.sort(rng.integers(0, len(blob), 300)).astype(np.int64)
    try:
        want: object = tuple(a.tolist() for a in columns._np_varint(buf, pos, "x"))
    except CaptureError:
        want = "refused"
    try:
        got: object = tuple(a.tolist() for a in columns._varint(buf, pos, "x"))
    except CaptureError:
        got = "refused"
    assert got == want


@pytest.mark.parametrize("seed", range(20))
def test_type_sweep_equals_numpy(seed: int, numpy_only: None) -> None:
    """The step breakdown's sweep: the highest open type and each bound's own count."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    typ = rng.choice(np.array([0, 10, 60, 70, 130, 170, 255]), n).astype(np.int64)
    start = rng.random(n) < 0.5
    types = breakdown._small_types(typ)
    want = breakdown._sweep(typ, start, types)
    current, own = np.zeros(n, np.int64), np.zeros(n, np.int64)
    assert columns._wire is None
    from tfobs.xspace import _wire

    assert _wire.type_sweep(typ, start, current, own)
    assert current.tolist() == want[0].tolist()
    assert own.tolist() == want[1].tolist()
    assert not _wire.type_sweep(np.array([256], np.int64), np.ones(1, bool),
                                np.zeros(1, np.int64), np.zeros(1, np.int64))


def test_wrong_array_sizes_are_a_python_error_not_a_crash() -> None:
    """The module checks every array it writes against the sizes it was told."""
    from tfobs.xspace import _wire

    buf = np.zeros(32, np.uint8)
    with pytest.raises(ValueError, match="value"):
        _wire.varints(buf, np.zeros(4, np.int64), np.zeros(3, np.uint64),
                      np.zeros(4, np.int64))
    with pytest.raises(ValueError, match="kinds"):
        _wire.stat_varints(buf, np.zeros(1, np.int64), np.zeros(1, np.int64),
                           np.zeros(8, np.int8), *(np.zeros(1, t) for t in
                                                   (np.int64, np.int8, np.uint64, np.int64)))
    # Positions past the buffer are refused, never read.
    assert not _wire.varints(buf, np.array([40], np.int64), np.zeros(1, np.uint64),
                             np.zeros(1, np.int64))
