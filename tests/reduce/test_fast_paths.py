"""The reduction's fast paths equal their plain references: seeded random cases, and every
test capture.

- the numpy sweep of step event types (`all_type_times`) vs the Python sweep (`type_times`),
  also on call trees whose nested events it leaves out;
- the memory table's allocation replay (`memory.replay`) vs event by event;
- laminar nesting without a loop (`_nesting_laminar`) vs the stack walk (`_nesting`);
- step grouping in waves (`_Grouper.group`) vs the event-by-event walk it replaced;
- the column reader (`PlaneEvents`, `stats_of`) vs the plain protobuf parse, and its
  fast decoder of the writers' event layout vs the field-by-field walk;
- every step's top-event candidates at once vs the per-line selection they replaced;
- the linking stats of step grouping (`int_stats_at`) vs protobuf, and the integer-only
  stat decoding vs the general one;
- times normalised once in the reader: no exact-integer fallback needed near int64.
"""

from __future__ import annotations

import pathlib
from bisect import bisect_right

import numpy as np
import pytest

from tests.conftest import capture_paths, fidelity_capture_paths
from tfobs.analysis import breakdown as bd
from tfobs.analysis import ops
from tfobs.analysis.memory import replay
from tfobs.analysis.step_roots import root_list
from tfobs.analysis.steps import StepGroup, _Grouper
from tfobs.analysis.timeline import Timeline
from tfobs.xspace import columns, schema
from tfobs.xspace.reader import parse


@pytest.fixture(params=["compiled", "numpy"])
def walks(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test twice: with the compiled loops (`_wire.c`) and with numpy alone."""
    if request.param == "numpy":
        monkeypatch.setattr(columns, "_wire", None)
    return str(request.param)


TYPES = (0, 10, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150, 160, 170)


@pytest.mark.parametrize("seed", range(40))
def test_numpy_sweep_equals_reference(seed: int, walks: str) -> None:
    rng = np.random.default_rng(seed)
    groups = []
    for _ in range(int(rng.integers(1, 6))):
        begin = int(rng.integers(0, 10**6))
        end = begin + int(rng.integers(1, 10**5))
        n = int(rng.integers(0, 40))
        starts = rng.integers(begin - 10**4, end, n)
        lengths = np.where(rng.random(n) < 0.1, 0, rng.integers(0, 3 * 10**4, n))
        types = rng.choice(TYPES, n)
        g = StepGroup(0, "train", begin, end)
        g.events.append((types.astype(np.int64), starts.astype(np.int64),
                         (starts + lengths).astype(np.int64)))
        groups.append(g)
    fast = bd.all_type_times(groups)
    for g, got in zip(groups, fast, strict=True):
        assert got == bd._reference(g)


@pytest.mark.parametrize("seed", range(40))
def test_numpy_sweep_equals_reference_with_many_instants(seed: int, walks: str) -> None:
    # Zero-length events on few distinct times: sticky types in every group.
    rng = np.random.default_rng(1000 + seed)
    groups = []
    for _ in range(int(rng.integers(1, 5))):
        begin = int(rng.integers(0, 100))
        g = StepGroup(0, "train", begin, begin + int(rng.integers(1, 60)))
        n = int(rng.integers(0, 60))
        starts = rng.integers(begin - 10, begin + 60, n)
        lengths = np.where(rng.random(n) < 0.5, 0, rng.integers(0, 20, n))
        types = rng.choice(TYPES, n)
        g.events.append((types.astype(np.int64), starts.astype(np.int64),
                         (starts + lengths).astype(np.int64)))
        groups.append(g)
    for g, got in zip(groups, bd.all_type_times(groups), strict=True):
        assert got == bd._reference(g)


@pytest.mark.parametrize("seed", range(40))
def test_numpy_sweep_equals_reference_with_call_trees(seed: int, walks: str) -> None:
    # Deeply nested events of few types (a Python tracer's call trees) beside instants and
    # strays: the events inside another of their type are left out of the sweep.
    rng = np.random.default_rng(2000 + seed)
    groups = []
    for _ in range(int(rng.integers(1, 4))):
        begin, end = _laminar(rng, int(rng.integers(50, 300)))
        types = rng.choice((10, 60, 90, 140), begin.size, p=(0.7, 0.1, 0.1, 0.1))
        n = int(rng.integers(0, 20))
        strays = rng.integers(int(begin.min()) - 50, int(end.max()) + 50, n)
        lengths = np.where(rng.random(n) < 0.5, 0, rng.integers(0, 500, n))
        g = StepGroup(0, "train", int(rng.integers(begin.min() - 20, begin.min() + 200)),
                      int(rng.integers(end.max() - 200, end.max() + 20)))
        g.events.append((types.astype(np.int64), begin, end))
        g.events.append((rng.choice(TYPES, n).astype(np.int64), strays.astype(np.int64),
                         (strays + lengths).astype(np.int64)))
        groups.append(g)
    kept = bd._without_nested(*bd.event_columns(groups))[0].size  # under the sampling size
    assert kept < sum(len(c[0]) for g in groups for c in g.events)  # the test tests that
    for g, got in zip(groups, bd.all_type_times(groups), strict=True):
        assert got == bd._reference(g)


def _laminar(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Random properly nested intervals, sorted by start (ties: outer first)."""
    spans: list[tuple[int, int]] = []

    def fill(lo: int, hi: int, depth: int) -> None:
        t = lo
        while t < hi and len(spans) < n:
            s = t + int(rng.integers(0, 50))
            e = min(hi, s + int(rng.integers(0, 400)))
            if s > e:
                break
            spans.append((s, e))
            if depth < 4 and e - s > 4:
                fill(s, e, depth + 1)
            t = e + 1 + int(rng.integers(0, 20))  # siblings apart: touching is not nesting

    fill(0, 10**6, 0)
    spans.sort(key=lambda x: (x[0], -x[1]))
    arr = np.array(spans, np.int64).reshape(-1, 2)
    return arr[:, 0], arr[:, 1]


@pytest.mark.parametrize("seed", range(40))
def test_laminar_nesting_equals_stack_walk(seed: int) -> None:
    rng = np.random.default_rng(seed)
    starts, ends = _laminar(rng, int(rng.integers(1, 300)))
    fast = ops._nesting_laminar(starts, ends)
    assert fast is not None
    done, child = ops._nesting(starts.tolist(), ends.tolist())
    assert list(fast[0]) == done
    assert list(fast[1]) == child


def _reference_groups(grouper: _Grouper, roots: list[tuple[int, int, int, str]]) -> list:
    """The event-by-event group walk: each event takes its ungrouped nested events (up to
    the first event that begins inside it and runs past its end: what follows lies in that
    one's subtree of XProf's nesting tree), and the consumers of every producer among them
    are walked next."""
    host = grouper.host
    gid = [np.full(len(ld), -1, np.int64) for ld in host.lines]
    g = 0
    for li, i, _, _ in roots:
        if gid[li][i] >= 0:
            continue
        queue = [(li, i)]
        while queue:
            nli, ni = queue.pop()
            if gid[nli][ni] >= 0:
                continue
            ld = host.lines[nli]
            gid[nli][ni] = g
            end = ld.ends[ni]
            k = bisect_right(ld.starts, end, ni + 1)
            nested = []
            for j in range(ni + 1, k):
                if ld.ends[j] > end:
                    break
                if gid[nli][j] < 0:
                    nested.append(j)
            for j in nested:
                gid[nli][j] = g
            for j in [ni, *nested]:
                code = int(grouper.prod_code[nli][j])
                if code >= 0:
                    lo, hi = grouper.cons_ptr[code], grouper.cons_ptr[code + 1]
                    queue.extend(zip(grouper.cons_line[lo:hi].tolist(),
                                     grouper.cons_idx[lo:hi].tolist(), strict=True))
        g += 1
    return gid


@pytest.mark.parametrize("path", fidelity_capture_paths(), ids=lambda p: p.name[:-10])
def test_wave_grouping_equals_event_walk(path: pathlib.Path, walks: str) -> None:
    space = parse(path.read_bytes())
    plane = space.plane("/host:CPU")
    if plane is None:
        pytest.skip("no host plane in this capture")  # nothing to group
    host = Timeline(plane)
    _, roots = root_list(host)
    fast = _Grouper(host)
    fast.group_roots([(li, i) for li, i, _, _ in roots])
    expected = _reference_groups(_Grouper(host), roots)
    for got, want in zip(fast.gid, expected, strict=True):
        assert np.array_equal(got, want)


@pytest.mark.parametrize("path", fidelity_capture_paths(), ids=lambda p: p.name[:-10])
def test_column_reader_equals_protobuf(path: pathlib.Path) -> None:
    data = path.read_bytes()
    full = schema.XSpace.FromString(data)
    space = parse(data)
    rng = np.random.default_rng(7)
    for proto in full.planes:
        cols = space.plane(proto.name).events
        events = [e for line in proto.lines for e in line.events]
        assert len(cols) == len(events)
        if not events:
            continue
        assert cols.mid.tolist() == [e.metadata_id for e in events]
        assert cols.offset.tolist() == [e.offset_ps for e in events]
        assert cols.duration.tolist() == [e.duration_ps for e in events]
        sample = np.unique(rng.integers(0, len(events), min(200, len(events))))
        batch = cols.stats_of(sample)
        got: dict[int, list] = {int(k): [] for k in sample}
        for r, ev in enumerate(batch.event.tolist()):
            got[ev].append((int(batch.mid[r]), batch.python(r)))
        for k in sample.tolist():
            want = [(s.metadata_id, getattr(s, s.WhichOneof("value")) if s.WhichOneof("value")
                     else None) for s in events[k].stats]
            assert _same(got[k], want), (proto.name, k)


def _same(a: list, b: list) -> bool:
    def norm(v: object) -> object:
        return "nan" if isinstance(v, float) and v != v else v
    return [(m, norm(v)) for m, v in a] == [(m, norm(v)) for m, v in b]


def test_events_with_many_stats_are_read_to_the_end_in_order() -> None:
    """A few events with hundreds of stats (past `walk`'s round limit, so their last
    records are parsed one by one) read as protobuf reads them, next to short events."""
    from tfobs.xspace.columns import TAIL_ROUNDS

    space = schema.XSpace()
    plane = space.planes.add(id=1, name="/host:CPU")
    plane.event_metadata[1].id = 1
    for mid in (1, 2, 3, 4):
        plane.stat_metadata[mid].id = mid
    line = plane.lines.add(id=1, name="l")
    rng = np.random.default_rng(3)
    for k in range(20):
        event = line.events.add(metadata_id=1, offset_ps=k, duration_ps=1)
        for j in range(TAIL_ROUNDS * 5 if k in (3, 11) else 2):
            stat = event.stats.add(metadata_id=int(rng.integers(1, 5)))
            kind = j % 4
            if kind == 0:
                stat.int64_value = int(rng.integers(-2**62, 2**62))
            elif kind == 1:
                stat.double_value = float(rng.random())
            elif kind == 2:
                stat.str_value = "x" * int(rng.integers(0, 300))
            else:
                stat.uint64_value = int(rng.integers(0, 2**63))
    data = space.SerializeToString()
    cols = parse(data).plane("/host:CPU").events
    events = list(schema.XSpace.FromString(data).planes[0].lines[0].events)
    batch = cols.stats_of(np.arange(len(events)))
    got: dict[int, list] = {k: [] for k in range(len(events))}
    for r, ev in enumerate(batch.event.tolist()):
        got[ev].append((int(batch.mid[r]), batch.python(r)))
    for k, event in enumerate(events):
        want = [(s.metadata_id, getattr(s, s.WhichOneof("value"))) for s in event.stats]
        assert _same(got[k], want), k


class _Columns:
    """The part of `PlaneEvents` the steps' top events read: per-event columns."""

    def __init__(self) -> None:
        self.mid = self.offset = self.duration = np.zeros(0, np.int64)


class _Line:
    """The part of `LineData` the steps' top events read (events stored in time order,
    at `first` in their plane's columns)."""

    order = None

    def __init__(self, rng: np.random.Generator, n: int, columns: _Columns) -> None:
        self.start_arr = np.sort(rng.integers(0, 10**4, n)).astype(np.int64)
        self.end_arr = self.start_arr + rng.choice([0, 5, 5, 7, 100, 2500], n)
        self.mid_arr = rng.integers(0, 6, n).astype(np.int64)
        self.start_ps = int(rng.integers(-10**6, 10**6))
        self.columns, self.first = columns, columns.mid.size
        columns.mid = np.concatenate((columns.mid, self.mid_arr))
        columns.offset = np.concatenate((columns.offset, self.start_arr))
        columns.duration = np.concatenate((columns.duration, self.end_arr - self.start_arr))

    def lookup(self, table: dict[int, int], default: int) -> np.ndarray:
        return np.array([table.get(m, default) for m in self.mid_arr.tolist()], np.int64)

    def __len__(self) -> int:
        return self.mid_arr.size


@pytest.mark.parametrize("seed", range(30))
def test_step_top_events_equal_per_line_selection(seed: int) -> None:
    """All steps' top-event candidates at once (`_host_candidates`, one n-th-longest
    floor per step) give each step the same top n as the per-line selection they
    replaced (each line's n longest, ties kept, then one sort by duration and name)."""
    from tfobs.analysis.pipeline import _event_kind, _host_candidates, _top_events

    rng = np.random.default_rng(seed)
    names = {0: "a/b:MatMul", 1: "Iterator::Map", 2: "not an op", 3: "c:Add", 4: "d:Add",
             5: "e/f:Conv2D"}
    columns = _Columns()
    lines = [_Line(rng, int(rng.integers(0, 60)), columns) for _ in range(4)]
    groups = []
    for k in range(int(rng.integers(1, 6))):
        g = StepGroup(k, "train", 0, 1)
        for j in rng.permutation(len(lines))[:int(rng.integers(0, 4))].tolist():
            ld = lines[j]
            g.members.append((ld, np.flatnonzero(rng.random(len(ld)) < 0.5)))
        groups.append(g)
    top_n = int(rng.integers(0, 7))
    got = [_top_events(c, top_n, [], 0)
           for c in _host_candidates(groups, top_n, names)]
    for g, events in zip(groups, got, strict=True):
        cands = []
        for ld, idx in g.members:
            sel = idx[ld.lookup({0: 1, 1: 1, 3: 1, 4: 1, 5: 1}, 0)[idx] > 0]
            if sel.size > top_n:
                dur = ld.end_arr[sel] - ld.start_arr[sel]
                sel = sel[dur >= np.partition(dur, -top_n)[-top_n]] if top_n else sel[:0]
            for i in sel.tolist():
                s, e = int(ld.start_arr[i]), int(ld.end_arr[i])
                name = names[int(ld.mid_arr[i])]
                cands.append((e - s, name, _event_kind(name), (ld.start_ps + s) // 1000))
        cands.sort(key=lambda c: (-c[0], c[1]))
        want = [(name, kind, start, dur / 1e12) for dur, name, kind, start in cands[:top_n]]
        assert [(t.name, t.kind, t.start_ns, t.duration_s) for t in events] == want


def _random_stats_space(seed: int, base: int) -> bytes:
    """A host plane whose events carry random stats (ids base+1 .. base+6): every value
    kind, ids repeated within an event, varints of every length (negative int64s take
    ten bytes)."""
    rng = np.random.default_rng(seed)
    space = schema.XSpace()
    plane = space.planes.add(id=1, name="/host:CPU")
    plane.event_metadata[1].id = 1
    for mid in range(base + 1, base + 7):
        plane.stat_metadata[mid].id = mid
    line = plane.lines.add(id=1, name="l")
    only_ints = seed % 2 == 0  # half the seeds: integers only (the fast decoding)
    for k in range(int(rng.integers(1, 200))):
        event = line.events.add(metadata_id=1, offset_ps=k, duration_ps=1)
        for _ in range(int(rng.integers(0, 7))):
            stat = event.stats.add(metadata_id=base + int(rng.integers(1, 7)))
            kind = int(rng.integers(0, 3 if only_ints else 6))
            bits = int(rng.integers(1, 64))
            if kind == 0:
                stat.int64_value = int(rng.integers(-2**bits, 2**bits))
            elif kind == 1:
                stat.uint64_value = int(rng.integers(0, 2**bits))
            elif kind == 2:
                stat.ref_value = int(rng.integers(0, 2**bits))
            elif kind == 3:
                stat.double_value = float(rng.random())
            elif kind == 4:
                stat.str_value = "x" * int(rng.integers(0, 3))
            # else: no value at all
    return space.SerializeToString()


@pytest.mark.parametrize("seed", range(16))
def test_int_stats_equal_protobuf(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """`int_stats_at` (the linking stats of step grouping): the last record of each stat
    per event, its value when an int64 or uint64, as protobuf reads it; a stat is keyed
    when any record of it was read. And the integer-only fast decoding (`_varints`)
    equals the general one."""
    from tfobs.analysis.timeline import int_stats_at
    from tfobs.xspace import columns

    base = 0 if seed < 8 else 300  # ids past one byte: the general id lookups
    data = _random_stats_space(seed, base)
    host = Timeline(parse(data).plane("/host:CPU"))
    events_pb = list(schema.XSpace.FromString(data).planes[0].lines[0].events)
    rng = np.random.default_rng(seed)
    picked = np.unique(rng.integers(0, len(events_pb), len(events_pb)))
    wanted = {base + 2: "b", base + 4: "d", base + 5: "e", base + 9: "absent"}
    for raw in (False, True):
        got = int_stats_at(host, picked, wanted, raw=raw)
        for mid, key in wanted.items():
            values, seen = [], False
            for k in picked.tolist():
                last = None
                for stat in events_pb[k].stats:
                    if stat.metadata_id == mid:
                        last, seen = stat, True
                kind = last.WhichOneof("value") if last is not None else None
                value = getattr(last, kind) if kind in ("int64_value", "uint64_value") else None
                values.append(value)
            if not seen:
                assert key not in got
                continue
            column, has = got[key]
            assert has.tolist() == [v is not None for v in values], (raw, key)
            for v, c, h in zip(values, column.tolist(), has.tolist(), strict=True):
                if h:
                    assert c == (v & (2**64 - 1) if raw else v), (raw, key)
    cols = host.columns
    every = np.arange(len(cols))
    fast = cols.stats_of(every)
    monkeypatch.setattr(columns.StatBatch, "_varints", lambda *a: False)
    slow = cols.stats_of(every)
    for name in ("event", "mid", "kind", "value", "pos", "size"):
        assert np.array_equal(getattr(fast, name), getattr(slow, name)), name


def _varint(v: int) -> bytes:
    v &= 2**64 - 1
    out = bytearray()
    while True:
        out.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
        v >>= 7
        if not v:
            return bytes(out)


@pytest.mark.parametrize("seed", range(20))
def test_event_fast_decode_equals_walk(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Events in the writers' layout (`_canonical_events`) and in others (fields reordered
    or repeated, num_occurrences, zero fields left out, stats): the same columns as the
    field-by-field walk, or the walk decides (a layout the fast path refuses)."""
    from tfobs.xspace import columns

    rng = np.random.default_rng(seed)
    line = schema.XLineEvents(id=1, timestamp_ns=5)
    odd = seed % 2 == 1  # half the seeds mix in layouts the fast path must refuse
    for _ in range(int(rng.integers(1, 300))):
        fields = [(1, int(rng.integers(0, 2**20)))]
        if rng.random() < 0.8:
            fields.append((2, int(rng.integers(0, 2**63))))
        if rng.random() < 0.8:
            fields.append((3, int(rng.integers(0, 2**40))))
        if odd and rng.random() < 0.1:
            fields.append((5, int(rng.integers(0, 9))))
        if odd and rng.random() < 0.2:
            rng.shuffle(fields)
        if odd and rng.random() < 0.05:
            fields.append((1, int(rng.integers(0, 99))))
        raw = b"".join(bytes([n << 3]) + _varint(v) for n, v in fields)
        for _ in range(int(rng.integers(0, 4))):
            stat = bytes([0x08]) + _varint(int(rng.integers(1, 300))) + bytes([0x18]) + \
                _varint(int(rng.integers(0, 2**63)))
            raw += bytes([0x22]) + _varint(len(stat)) + stat
        line.events.append(raw)
    fast = columns.PlaneEvents([line])
    monkeypatch.setattr(columns, "_canonical_events", lambda *a: None)
    slow = columns.PlaneEvents([line])
    for name in ("mid", "offset", "duration", "stats_at"):
        assert np.array_equal(getattr(fast, name), getattr(slow, name)), name
    if not odd:  # the writers' layout: no walk needed
        monkeypatch.undo()
        assert columns._canonical_events(fast.buf, fast.start, fast.end) is not None


def test_times_normalised_once_far_timestamps() -> None:
    """A capture shifted to line timestamps of 9e15 ns (9e18 ps: line start + offset is past
    int64) reduces to the same figures in int64 (no exact-integer fallback); step starts
    move by the shift."""
    import tfobs.analysis.pipeline

    path = next(p for p in capture_paths() if "custom_loop_compute_bfc" in p.name)
    space = schema.XSpace.FromString(path.read_bytes())
    before = tfobs.analysis.pipeline.reduce_xspace(space.SerializeToString()).to_dict()
    shift = 9 * 10**15
    for plane in space.planes:
        for line in plane.lines:
            line.timestamp_ns += shift
    after = tfobs.analysis.pipeline.reduce_xspace(space.SerializeToString()).to_dict()
    moved = {b["start_ns"] - a["start_ns"] for a, b in
             zip(before["steps"]["items"], after["steps"]["items"], strict=True)}
    assert len(moved) == 1 and before["steps"]["count"] > 0
    for key in ("breakdown_s", "ops", "memory", "input_bound"):
        assert before[key] == after[key], key
    for a, b in zip(before["steps"]["items"], after["steps"]["items"], strict=True):
        assert (a["duration_s"], a["breakdown_s"]) == (b["duration_s"], b["breakdown_s"])


def test_times_past_the_span_are_one_clear_error() -> None:
    from tfobs.analysis.pipeline import reduce_xspace
    from tfobs.errors import CaptureError

    path = next(p for p in capture_paths() if "numpy_preprocess" in p.name)
    space = schema.XSpace.FromString(path.read_bytes())
    host = next(p for p in space.planes if p.name == "/host:CPU")
    line = next(ln for ln in host.lines if len(ln.events))
    line.timestamp_ns += 2**60 // 1000 + 10**9  # one thread's line 13 days from the rest
    with pytest.raises(CaptureError, match="timestamp is corrupt"):
        reduce_xspace(space.SerializeToString())
    line.timestamp_ns -= 2**60 // 1000 + 10**9
    line.events[0].duration_ps = 2**61
    with pytest.raises(CaptureError, match="event times out of range"):
        reduce_xspace(space.SerializeToString())


def test_continuation_count_without_bitwise_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """NumPy 1.x has no `np.bitwise_count`: the multiply trick counts the same bits."""
    from tfobs.xspace import columns

    rng = np.random.default_rng(3)
    cont = rng.integers(0, 2**63, 5000, dtype=np.int64).astype(np.uint64) & columns._CONT
    fast = columns._count_continuations(cont)
    monkeypatch.setattr(columns, "_BITWISE_COUNT", None)
    assert np.array_equal(columns._count_continuations(cont), fast)
    assert fast.tolist() == [bin(v).count("1") for v in cont.tolist()]


def _replay_one_by_one(alloc: list[bool], addr: list[int], nbytes: list[int],
                       heap: int) -> tuple[list[int], int]:
    active: dict[int, int] = {}
    for j, (a, ad, nb) in enumerate(zip(alloc, addr, nbytes, strict=True)):
        if a:
            active[ad] = j
            heap -= nb
        elif active.pop(ad, None) is not None:
            heap += nb
    return sorted(active.values()), heap


@pytest.mark.parametrize("seed", range(40))
def test_memory_replay_equals_event_by_event(seed: int) -> None:
    # Few addresses, so blocks are reused, freed twice, freed before any allocation.
    rng = np.random.default_rng(3000 + seed)
    n = int(rng.integers(0, 200))
    alloc = rng.random(n) < 0.55
    addr = rng.integers(0, int(rng.integers(1, 20)), n).astype(np.int64)
    nbytes = rng.integers(0, 1 << 40, n).astype(np.int64)
    heap = int(rng.integers(0, 1 << 45))
    held, left = replay(alloc, addr, nbytes, heap)
    assert (held.tolist(), left) == _replay_one_by_one(alloc.tolist(), addr.tolist(),
                                                       nbytes.tolist(), heap)


def test_numpy_sweep_samples_large_windows_before_leaving_nested_events_out() -> None:
    # Past the sampling size: a deep call tree is left out (the sample says it pays), a
    # flat run of events is swept whole; both equal the reference.
    rng = np.random.default_rng(7)
    calls = np.arange(800, dtype=np.int64) * 1000  # 800 calls of 50 short calls each
    inner = calls[:, None] + 1 + np.arange(50) * 17 + rng.integers(0, 5, (800, 50))
    begin = np.column_stack((calls, inner)).ravel()
    end = np.column_stack((calls + 900, inner + 10)).ravel()
    tree = StepGroup(0, "train", int(begin.min()), int(end.max()))
    tree.events.append((np.full(begin.size, 10, np.int64), begin, end))
    flat_begin = np.arange(0, 40_000 * 10, 10, dtype=np.int64)
    flat = StepGroup(1, "train", 0, int(flat_begin[-1]) + 5)
    flat.events.append((rng.choice(TYPES, flat_begin.size).astype(np.int64), flat_begin,
                        flat_begin + 5))
    for g in (tree, flat):
        kept = bd._without_nested(*bd.event_columns([g]))[0].size
        assert (kept < begin.size // 2) if g is tree else (kept == flat_begin.size)
        assert bd.all_type_times([g]) == [bd._reference(g)]
