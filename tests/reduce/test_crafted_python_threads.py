"""Python threads made to hurt the reduction (red team 3): each Python thread's reading
costs its own events and the steps and compiled work they reach, not every line's and
every step's again."""

from __future__ import annotations

import random
import time

import numpy as np

from tfobs.analysis import python_time
from tfobs.analysis.pipeline import reduce_xspace
from tfobs.analysis.timeline import Timeline
from tfobs.xspace import schema
from tfobs.xspace.reader import parse

U = 1000


def _threads(steps: int, threads: int, ops: bool, seed: int = 0, long: bool = False) -> bytes:
    """`steps` marked steps; `threads` threads, each of one Python event in one step and,
    with `ops`, a program op (a `program_id` stat) and a program wait beside it. `long`:
    random events of random length, overlapping across threads."""
    r = random.Random(seed)
    x = schema.XSpace()
    host = x.planes.add(id=1, name="/host:CPU")
    names = ("train", "$x.py:1 f", "fusion.1", python_time.PROGRAM_WAIT)
    for mid, name in enumerate(names, 1):
        host.event_metadata[mid].id = mid
        host.event_metadata[mid].name = name
    for sid, name in enumerate(("_r", "step_num", "program_id"), 1):
        host.stat_metadata[sid].id = sid
        host.stat_metadata[sid].name = name
    marks = host.lines.add(id=1, name="python3", timestamp_ns=1000)
    for i in range(steps):
        e = marks.events.add(metadata_id=1, offset_ps=i * U, duration_ps=U - 10)
        e.stats.add(metadata_id=1, int64_value=1)
        e.stats.add(metadata_id=2, int64_value=i)
    for k in range(threads):
        line = host.lines.add(id=2 + k, name=f"Thread-{k}", timestamp_ns=1000)
        at, length = (k % steps) * U, U - 20
        if long:
            at, length = r.randrange(steps * U), r.randrange(1, 3 * U)
        line.events.add(metadata_id=2, offset_ps=at + 1, duration_ps=length)
        if ops:
            op = line.events.add(metadata_id=3, offset_ps=at + length // 2,
                                 duration_ps=r.randrange(1, U) if long else 3)
            op.stats.add(metadata_id=3, int64_value=k)
            line.events.add(metadata_id=4, offset_ps=at + length // 2 + 5,
                            duration_ps=r.randrange(1, U) if long else 3)
    return x.SerializeToString()


def test_many_python_threads_cost_each_its_own_reach() -> None:
    # Each Python thread was read against every line's compiled work and every step:
    # 5,000 threads of one Python event in 5,000 steps (a 0.3 MB capture) took 33 s, and
    # with a program op beside each (every thread's answer its own), 3,000 took 87 s.
    for ops in (False, True):
        data = _threads(1500, 1500, ops)
        t0 = time.process_time()
        s = reduce_xspace(data)
        took = time.process_time() - t0
        assert s.steps.count == 1498
        assert took < 5.0, (ops, took)


def _reference(host: Timeline, line: object) -> np.ndarray:
    """compiled_work as it was: every line read for the one asked about."""
    rows = [np.zeros((0, 2), np.int64)]
    running = np.array(sorted(host.mids_named(python_time.PROGRAM_WAIT)), np.int64)
    ops = {id(ld): at for ld, at in host.once(python_time.program_op_positions)}
    for ld in host.lines:
        begin, end = ld.start_arr + ld.start_ps, ld.end_arr + ld.start_ps
        if ld is not line:
            at = np.isin(ld.mid_arr, running)
            rows.append(np.stack([begin[at], end[at]], 1))
            if (op := ops.get(id(ld))) is not None:
                rows.append(np.stack([begin[op], end[op]], 1))
    return python_time.union_rows(np.concatenate(rows))


def test_a_threads_compiled_work_leaves_out_only_its_own_within_its_reach() -> None:
    for seed in range(20):
        host = Timeline(parse(_threads(20, 12, True, seed, long=True)).plane("/host:CPU"))
        for ld in host.lines[1:]:
            a, b = python_time._extent(ld)
            want = python_time._cut(_reference(host, ld), a, b)
            got = python_time.compiled_work(host, ld, (a, b))
            assert np.array_equal(got, want), (seed, ld.line.name)
            assert np.array_equal(python_time.compiled_work(host, ld), _reference(host, ld))


def _threads_of_own_functions(steps: int, threads: int) -> bytes:
    """`steps` marked steps; `threads` threads of one Python event each, each event of its
    own Python function name (a plane of as many Python names as threads)."""
    x = schema.XSpace()
    host = x.planes.add(id=1, name="/host:CPU")
    host.event_metadata[1].id = 1
    host.event_metadata[1].name = "train"
    for sid, name in enumerate(("_r", "step_num"), 1):
        host.stat_metadata[sid].id = sid
        host.stat_metadata[sid].name = name
    marks = host.lines.add(id=1, name="python3", timestamp_ns=1000)
    for i in range(steps):
        e = marks.events.add(metadata_id=1, offset_ps=i * 100 * U, duration_ps=100 * U - 10)
        e.stats.add(metadata_id=1, int64_value=1)
        e.stats.add(metadata_id=2, int64_value=i)
    for k in range(threads):
        host.event_metadata[10 + k].id = 10 + k
        host.event_metadata[10 + k].name = f"$builtins.len{k}"
        line = host.lines.add(id=2 + k, name=f"worker{k}", timestamp_ns=1000)
        line.events.add(metadata_id=10 + k, offset_ps=(k % steps) * 100 * U + 10,
                        duration_ps=500)
    return x.SerializeToString()


def test_many_python_threads_of_many_function_names_cost_their_sum() -> None:
    # 40,000 threads of one Python event each, each of its own function name (2.8 MB): every
    # thread's events were looked up against a table of all the plane's Python names, four
    # times, 160,000 tables of 40,000 ids: 14 s (10,000: 2 s; 20,000: 5.2 s); now 6 s.
    from tfobs.analysis.timeline import id_array, member

    s = reduce_xspace(_threads_of_own_functions(100, 5_000))
    assert s.steps.count == 98
    # The lookup itself: one line's few ids against a plane's many, once per line.
    ids = id_array(frozenset(range(10, 40_010)))
    line = np.array([25_000], np.int64)
    t0 = time.process_time()
    found = sum(bool(member(line + k, ids).any()) for k in range(20_000))
    took = time.process_time() - t0
    assert found == 15_010
    assert took < 0.6, took  # 20,000 tables of 40,000 ids: 2.5 s


def test_membership_of_many_ids_is_isin() -> None:
    from tfobs.analysis.timeline import member

    rng = random.Random(11)
    for _ in range(300):
        ids = np.array([rng.choice([rng.randint(-3, 600), rng.randint(-2**63, 2**63 - 1)])
                        for _ in range(rng.randint(250, 700))], np.int64)
        mids = np.array([rng.choice([int(rng.choice(ids)), rng.randint(-3, 600), 2**62])
                         for _ in range(rng.randint(0, 300))], np.int64)
        want = np.isin(mids, ids).tolist()
        assert member(mids, ids).tolist() == want
        assert member(mids, ids).tolist() == want  # again, from the ids sorted once
    ids = np.arange(1000, dtype=np.int64)
    assert member(np.array([5, 999, 1000]), ids).tolist() == [True, True, False]
    del ids  # a new array at the same address is sorted anew
    other = np.arange(2000, 3000, dtype=np.int64)
    assert member(np.array([5, 2500]), other).tolist() == [False, True]
