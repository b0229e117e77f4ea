"""The compiled walks (`tfobs/xspace/_wire.c`) equal the numpy code they stand in for.

Each compiled loop has a numpy twin (used where no C compiler was at install): the wire
walks' in `columns.py`, the analyses' loops' in the analysis that calls them (`breakdown`,
`steps`, `ops`). Held equal on every test capture (the whole reduction), on seeded random and
damaged bytes (same values, or the same one-line error), and loop by loop.
"""

from __future__ import annotations

import pathlib
import types

import numpy as np
import pytest

from tests.conftest import capture_paths, fidelity_capture_paths
from tests.reduce.test_fast_paths import _random_stats_space, _varint
from tfobs.analysis import breakdown, ops, python_time, steps, timeline
from tfobs.analysis.pipeline import reduce_xspace
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
    # The light schema leaves events unread: damage goes past protobuf to the readers.
    space = schema.XSpaceLite.FromString(path.read_bytes())
    lines = [(line, schema.XLineEvents.FromString(line.SerializeToString()))
             for p in space.planes for line in p.lines]
    lines = [(line, read) for line, read in lines if len(read.events)]
    assert lines, path.name
    for _ in range(int(rng.integers(1, 6))):
        line, read = lines[int(rng.integers(0, len(lines)))]
        k = int(rng.integers(0, len(read.events)))
        raw = bytearray(read.events[k])
        for _ in range(int(rng.integers(1, 4))):
            if raw:
                raw[int(rng.integers(0, len(raw)))] = int(rng.choice(
                    [0x80, 0xFF, 0x22, 0x0, int(rng.integers(256))]))
        read.events[k] = bytes(raw)
        line.Clear()
        line.MergeFromString(read.SerializeToString())
    data = space.SerializeToString()
    assert _outcome(data) == _without_walks(monkeypatch, lambda: _outcome(data))


def _line_with_raw_events(raws: list[bytes]) -> bytes:
    line = schema.XLineEvents(id=1, timestamp_ns=5)
    line.events.extend(raws)
    plane = schema.XPlaneLite(id=1, name="/host:CPU")
    plane.lines.add().MergeFromString(line.SerializeToString())
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


@pytest.mark.parametrize("seed", range(24))
def test_int_stats_equal_without_the_compiled_walk(seed: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The linking stats of step grouping, every value kind and repeated ids. Seeds 8-15:
    ids 123-128, the last two bytes long (a plane naming over 127 stats), which the
    compiled walk reads, wanted or not; seeds >= 16: ids past its table, handed back to
    numpy."""
    base = (0, 122, 300)[seed // 8]
    data = _random_stats_space(seed, base)
    # Seeds 2, 6, ... want the first three ids only: the others' records are skipped unread.
    wanted = {base + k: str(k) for k in range(1, 4 if seed % 4 == 2 else 8)}
    if base == 122 and seed % 2 == 0:  # integers only (a record with no value is handed
        # back): the two-byte ids take the compiled walk
        host = Timeline(parse(data).plane("/host:CPU"))
        every = np.arange(len(host.columns), dtype=np.int64)
        ids = np.fromiter(wanted, np.int64, len(wanted))
        assert timeline._compiled_int_stats(host, every, ids) is not None

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


@pytest.mark.parametrize("seed", range(40))
def test_nested_events_equal_numpy(seed: int) -> None:
    """Events strictly inside another of their type and group (left out of the breakdown's
    sweep): runs of time-ordered events per group, threads going back in time, equal begins,
    equal ends, instants and types spread over 0..255."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 4000))
    etype = rng.choice(np.array([0, 3, 9, 64, 200, 255]), n).astype(np.int64)
    group = np.sort(rng.integers(0, max(1, n // 200), n)).astype(np.int64)
    # Per group a few threads, each in time order; coarse times make ties common.
    begin = np.zeros(n, np.int64)
    for g in np.unique(group).tolist():
        at = np.flatnonzero(group == g)
        for part in np.array_split(at, int(rng.integers(1, 4))):
            begin[part] = np.sort(rng.integers(0, 50, part.size))
    end = begin + rng.choice(np.array([0, 1, 5, 20, 60]), n)
    want = breakdown._nested(etype, begin, end, group)
    got = breakdown.nested_compiled(etype, begin, end, group)
    assert want is not None and got is not None
    assert got.tolist() == want.tolist()
    assert 0 < int(got.sum()) < n or n < 50  # both kinds of event are met
    # Types outside 0..255 are left to numpy.
    assert breakdown.nested_compiled(np.array([256, 0]), begin[:2], end[:2], group[:2]) is None


@pytest.mark.parametrize("path", capture_paths()[::3], ids=lambda p: p.name[:-10])
def test_step_members_equal_numpy(path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The steps' members and typed events from the compiled pass (`_wire.step_members`):
    the same columns, in the same order, as the numpy code gives from the same walk."""
    plane = parse(path.read_bytes()).plane("/host:CPU")
    if plane is None:
        pytest.skip("no host plane in this capture")  # no step to find
    host = Timeline(plane)
    fast = steps.find_steps(host)
    with monkeypatch.context() as m:
        m.setattr(steps, "_compiled_members", lambda *a: None)
        slow = steps.find_steps(host)
    assert [g.name for g in fast.groups] == [g.name for g in slow.groups]
    if fast.members is None or slow.members is None:
        assert fast.members is slow.members
        return
    assert [id(ld) for ld in fast.members[0]] == [id(ld) for ld in slow.members[0]]
    for got, want in zip(fast.members[1:], slow.members[1:], strict=True):
        assert got.tolist() == want.tolist()
    assert (fast.typed is None) == (slow.typed is None)
    for got, want in zip(fast.typed or (), slow.typed or (), strict=True):
        assert got.dtype == want.dtype and got.tolist() == want.tolist()
    for g, w in zip(fast.groups, slow.groups, strict=True):
        assert [c.tolist() for c in g.events[0]] == [c.tolist() for c in w.events[0]] \
            if w.events else not g.events


def test_step_members_leave_lines_out_of_time_order_to_numpy() -> None:
    """A member on a line stored out of time order (its positions are sorted ones) or an
    index past the plane's events: the pass decides nothing."""
    from tfobs.xspace import _wire

    one = np.zeros(1, np.int64)  # one member, of group 0 (step 0), on line 0
    out = [np.zeros(1, np.int64) for _ in range(7)]
    used, counts = np.zeros(1, np.int64), np.zeros(3, np.int64)
    root = (np.array([0]), np.array([5]))  # the step's root is another event
    cols = (np.zeros(4, np.int64),) * 3  # a plane of four events

    def run(ordered: bool, pos: int) -> int:
        return _wire.step_members(one, one, np.array([pos]), one, *root, one,
                                  np.array([ordered]), one, *cols, np.full(1, -1), *out,
                                  used, counts)

    assert run(True, 2) == 1 and counts.tolist() == [1, 0, 1] and out[2].tolist() == [2]
    assert run(False, 2) == 0
    assert run(True, 9) == -1


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
    one, two = np.zeros(1, np.int64), np.zeros(2, np.int64)
    with pytest.raises(ValueError, match="not 1 to 256 for each of 1 groups"):
        _wire.gap_sums(two, two, two, one, one, np.zeros(257, np.int64),
                       np.zeros(257, np.int64))
    with pytest.raises(ValueError, match="not 1 to 256 for each of 2 groups"):
        _wire.gap_sums(two, two, two, two, two, np.zeros(5, np.int64), np.zeros(5, np.int64))
    with pytest.raises(ValueError, match="member"):  # fewer member slots than events
        _wire.group_walk(np.array([0, 2]), two, two, two.copy(), two, one, np.zeros(0),
                         np.zeros(0), one, one, one.copy(), one.copy(), two.copy(),
                         two.copy(), two.copy())
    with pytest.raises(ValueError, match="inside"):  # one flag short
        _wire.nested(two, two, two, two, np.zeros(1, np.bool_))
    # Positions past the buffer are refused, never read.
    assert not _wire.varints(buf, np.array([40], np.int64), np.zeros(1, np.uint64),
                             np.zeros(1, np.int64))


class _Line:
    """What the group walk reads of a timeline line: sorted starts and the ends."""

    def __init__(self, start: np.ndarray, end: np.ndarray) -> None:
        self.start_arr, self.end_arr = start, end
        self.starts, self.ends = start.tolist(), end.tolist()

    def __len__(self) -> int:
        return self.start_arr.size


class _Host:
    def __init__(self, lines: list[_Line]) -> None:
        self.lines = lines


def _random_grouper(seed: int) -> tuple[steps._Grouper, list[tuple[int, int]]]:
    """A grouper over random lines (nested call trees, overlapping strays, instants) and
    random links (codes with consumers on any line, producers sharing codes), with roots
    that repeat and fall inside each other; built without a capture."""
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(int(rng.integers(1, 7))):
        n = int(rng.integers(1, 120))
        start = np.sort(rng.integers(0, 2000, n))
        length = np.where(rng.random(n) < 0.2, 0, rng.integers(0, 600, n))
        end = start + length
        order = np.lexsort((-end, start))  # as LineData sorts: start, then outer first
        lines.append(_Line(start[order].astype(np.int64), end[order].astype(np.int64)))
    grouper = object.__new__(steps._Grouper)
    grouper.host = _Host(lines)  # type: ignore[assignment]
    sizes = [len(ld) for ld in lines]
    grouper.first = np.r_[0, np.cumsum(sizes)].astype(np.int64)
    total = int(grouper.first[-1])
    grouper._gid = np.full(total, -1, np.int64)
    codes = int(rng.integers(1, 30))
    grouper._prod_code = np.where(rng.random(total) < 0.3, rng.integers(0, codes, total), -1)
    bounds = list(zip(grouper.first[:-1].tolist(), grouper.first[1:].tolist(), strict=True))
    grouper.gid = [grouper._gid[a:b] for a, b in bounds]
    grouper.prod_code = [grouper._prod_code[a:b] for a, b in bounds]
    per_code = rng.integers(1, 6, codes)  # as _index_links: producers only of consumed codes
    line = rng.integers(0, len(lines), int(per_code.sum()))
    grouper.cons_ptr = np.r_[0, np.cumsum(per_code)].astype(np.int64)
    grouper.cons_line = line.astype(np.int64)
    grouper.cons_idx = np.array([rng.integers(0, sizes[li]) for li in line.tolist()], np.int64)
    roots = [(int(li), int(rng.integers(0, sizes[li])))
             for li in rng.integers(0, len(lines), int(rng.integers(1, 25)))]
    return grouper, roots


@pytest.mark.parametrize("seed", range(60))
def test_group_walk_equals_numpy(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Step grouping's walk from every root: the same groups, the same members in the same
    order (line by line, wave by wave), the same group of every event."""
    compiled, roots = _random_grouper(seed)
    got = compiled.group_roots(roots)
    reference, _ = _random_grouper(seed)
    want = _without_walks(monkeypatch, lambda: reference.group_roots(roots))
    assert [m is None for m in got] == [m is None for m in want]
    for g, w in zip(got, want, strict=True):
        if g is not None and w is not None:
            assert [(li, idx.tolist()) for li, idx in g] == [(li, idx.tolist()) for li, idx in w]
    assert compiled._gid.tolist() == reference._gid.tolist()
    assert max(compiled._gid) >= 0


def test_group_walk_refuses_arrays_that_do_not_hold_together() -> None:
    """A link to an event past its line's end: no walk (the numpy one runs), nothing
    written."""
    grouper, roots = _random_grouper(1)
    grouper.cons_idx = grouper.cons_idx.copy()
    grouper.cons_idx[0] = 10**6
    assert grouper._walk_compiled(roots) is None
    assert (grouper._gid == -1).all()


@pytest.mark.parametrize("seed", range(20))
def test_link_codes_name_equal_keys_alike(seed: int) -> None:
    """Rows share a code exactly when their keys are equal; each code's consumers come in
    row order."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 6000))
    if seed % 2:  # few distinct keys, some differing in one column only, some near 2**64
        high = rng.choice(np.array([0, 1, 2**40, 2**64 - 1], np.uint64), n)
        low = rng.choice(np.array([0, 5, 2**63, 2**64 - 2], np.uint64), n)
    else:  # thousands of distinct keys: the table grows while it fills
        high = rng.integers(0, 3, n).astype(np.uint64) << np.uint64(32)
        low = rng.integers(0, 2000, n).astype(np.uint64)
    consumer = rng.random(n) < 0.4
    hashed = steps.link_codes(high, low, consumer)
    assert hashed is not None
    code, count, order = hashed
    keys = list(zip(high.tolist(), low.tolist(), strict=True))
    first_code: dict[tuple[int, int], int] = {}
    for k, c in zip(keys, code.tolist(), strict=True):
        assert first_code.setdefault(k, c) == c
    assert len(set(first_code.values())) == len(first_code) == count.size
    want = sorted(np.flatnonzero(consumer).tolist(), key=lambda r: (code[r], r))
    assert order.tolist() == want
    assert count.tolist() == np.bincount(code[consumer], minlength=count.size).tolist()


def test_gap_sums_refuse_groups_and_types_out_of_range() -> None:
    one = np.zeros(2, np.int64)
    assert breakdown.gap_sums(one, np.array([3, 3]), one, np.zeros(1), np.ones(1)) is None
    assert breakdown.gap_sums(one, one, np.array([256, 0]), np.zeros(1), np.ones(1)) is None
    sums, first, types = breakdown.gap_sums(np.array([0, 5]), one, one, np.zeros(1),
                                            np.full(1, 9))
    assert sums[0, 0] == 5 and first[0, 0] == 0 and sums.shape == (1, 256)
    # Columns for the types given only: a type outside them is refused, not misfiled.
    sums, first, types = breakdown.gap_sums(np.array([0, 5]), one, np.array([70, 70]),
                                            np.zeros(1), np.full(1, 9), np.array([0, 70]))
    assert sums.tolist() == [[0, 5]] and first.tolist() == [[-1, 0]] and types.tolist() == [0, 70]
    assert breakdown.gap_sums(np.array([0, 5]), one, np.array([60, 60]), np.zeros(1),
                              np.full(1, 9), np.array([0, 70])) is None


@pytest.mark.parametrize("seed", range(30))
def test_op_nesting_equals_the_stack_walk(seed: int) -> None:
    """The host op table's walk over one thread: ops that nest, ops that overlap their
    would-be parent, instants and equal starts; the close order and the children's time."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 400))
    starts = np.sort(rng.integers(0, 5000, n))
    ends = starts + np.where(rng.random(n) < 0.15, 0, rng.integers(0, 800, n))
    order = np.lexsort((-ends, starts))
    starts, ends = starts[order].astype(np.int64), ends[order].astype(np.int64)
    got = ops.op_nesting(starts, ends)
    assert got is not None
    done, child = ops._nesting(starts.tolist(), ends.tolist())
    assert got[0].tolist() == done
    assert got[1].tolist() == child


def test_op_nesting_leaves_overflowing_sums_to_python() -> None:
    far = 3 * 2**61  # two children of 3 * 2**61 ps each: their sum is past int64
    starts = np.array([-far, -far, 1], np.int64)
    ends = np.array([far, 0, far], np.int64)
    assert ops.op_nesting(starts, ends) is None
    assert ops._nesting(starts.tolist(), ends.tolist())[1][0] == 2 * far - 1


def _spans(rng: np.random.Generator, count: int) -> np.ndarray:
    """Merged (begin, end) rows, sorted and disjoint (touching ones and instants too)."""
    cuts = np.sort(rng.integers(-50, 6000, 2 * count)).astype(np.int64)
    return cuts.reshape(-1, 2)


def _stretches_equal_numpy(line: types.SimpleNamespace, rng: np.random.Generator,
                           monkeypatch: pytest.MonkeyPatch, most_regions: int = 3) -> None:
    """The compiled sweep's stretches of `line`, for one to `most_regions` random regions
    and random busy time, against the numpy cut-and-sort's."""
    regions = [_spans(rng, int(rng.integers(0, 40)))
               for _ in range(int(rng.integers(1, most_regions + 1)))]
    busy = _spans(rng, int(rng.integers(0, 30)))
    got = python_time._stretches(line, regions, busy)  # type: ignore[arg-type]
    want = _without_walks(monkeypatch, lambda: python_time._stretches(
        line, regions, busy))  # type: ignore[arg-type]
    assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()
    assert [g.tolist() for g in got[2]] == [w.tolist() for w in want[2]]
    assert got[3].tolist() == want[3].tolist()


@pytest.mark.parametrize("seed", range(4))
def test_stretches_in_up_to_63_regions_equal_numpy(seed: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweep keeps whether it is inside each region as one bit of a 64-bit word (the
    busy time the last): as many regions as it takes, each bit read where it is set."""
    rng = np.random.default_rng(100 + seed)
    start = np.sort(rng.integers(0, 5000, 200)).astype(np.int64)
    end = start + rng.integers(0, 900, 200)
    if seed % 2:  # nested: one call after another
        end = np.minimum(end, np.r_[start[1:], 6000])
    line = types.SimpleNamespace(start_arr=start, end_arr=end, start_ps=0)
    regions = [_spans(rng, int(rng.integers(1, 20))) for _ in range(63)]
    busy = _spans(rng, 5)
    got = python_time._stretches(line, regions, busy)  # type: ignore[arg-type]
    want = _without_walks(monkeypatch, lambda: python_time._stretches(
        line, regions, busy))  # type: ignore[arg-type]
    assert got[0].tolist() == want[0].tolist() and got[3].tolist() == want[3].tolist()
    assert [g.tolist() for g in got[2]] == [w.tolist() for w in want[2]]
    assert got[2][-1].any()  # the 63rd region's bit is read
    assert python_time._compiled_stretches(start, end, regions, busy) is not None


@pytest.mark.parametrize("seed", range(40))
def test_stretches_equal_numpy(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Python thread's stretches (`_wire.stretches`): nested and overlapping events,
    instants, equal starts, one to three regions and busy time that may be empty; the
    same stretches, owners and region flags as the numpy cut-and-sort."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 300))
    start = np.sort(rng.integers(0, 5000, n)).astype(np.int64)
    end = start + np.where(rng.random(n) < 0.1, 0, rng.integers(0, 900, n))
    line = types.SimpleNamespace(start_arr=start - 7, end_arr=end - 7, start_ps=7)
    _stretches_equal_numpy(line, rng, monkeypatch)


def _call_tree(rng: np.random.Generator, lo: int, hi: int, depth: int,
               out: list[tuple[int, int]]) -> None:
    """Nested calls inside [lo, hi], as a Python thread's tracer records them: children
    that touch, share their parent's start or end, instants, and calls of equal bounds."""
    at = lo
    while at < hi and len(out) < 400:
        begin = int(rng.integers(at, hi + 1))
        end = int(rng.integers(begin, hi + 1)) if rng.random() > 0.1 else begin
        out.append((begin, end))
        if rng.random() < 0.15:
            out.append((begin, end))  # a call and its equal-bounded wrapper
        if depth < 6 and end > begin:
            _call_tree(rng, begin, end, depth + 1, out)
        at = end if rng.random() < 0.3 else end + int(rng.integers(0, 50))


@pytest.mark.parametrize("seed", range(30))
def test_nested_stretches_equal_numpy(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nested events only, as a Python thread's tracer writes them (deep call trees, equal
    bounds, instants): the same stretches, owners and region flags as the numpy
    cut-and-sort."""
    rng = np.random.default_rng(seed)
    calls: list[tuple[int, int]] = []
    _call_tree(rng, 0, 5000, 0, calls)
    calls.sort(key=lambda c: c[0])  # stable: a parent stays before its children
    start = np.array([c[0] for c in calls], np.int64)
    end = np.array([c[1] for c in calls], np.int64)
    line = types.SimpleNamespace(start_arr=start, end_arr=end, start_ps=0)
    _stretches_equal_numpy(line, rng, monkeypatch)


def test_stretches_leave_events_ending_before_they_start_to_numpy() -> None:
    start, end = np.array([0, 5], np.int64), np.array([10, 3], np.int64)
    rows = np.array([[0, 20]], np.int64)
    assert python_time._compiled_stretches(start, end, [rows], rows[:0]) is None
    line = types.SimpleNamespace(start_arr=start, end_arr=end, start_ps=0)
    lo, hi, inside, owner = python_time._stretches(line, [rows], rows[:0])  # type: ignore
    assert (lo.tolist(), hi.tolist(), owner.tolist()) == (
        [0, 3, 5, 10], [3, 5, 10, 20], [0, 0, 0, -1])


def test_stretches_refuse_outputs_too_short_for_every_cut() -> None:
    from tfobs.xspace import _wire

    two, offs = np.array([0, 5], np.int64), np.array([0, 2, 2], np.int64)
    short = np.zeros(5, np.int64)  # 2 events and 2 bounds cut up to 6 times
    with pytest.raises(ValueError, match="stretches"):
        _wire.stretches(two, two, two, offs, short, short.copy(), short.copy(),
                        np.zeros(6, np.uint8))
    with pytest.raises(ValueError, match="stretches"):  # no region beside the busy set
        _wire.stretches(two, two, two, np.array([0, 2], np.int64), *(np.zeros(6, np.int64)
                        for _ in range(3)), np.zeros(6, np.uint8))
