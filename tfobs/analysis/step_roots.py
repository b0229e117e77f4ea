"""Step roots: the events XProf starts a step at, in its order, with their numbers.

XProf's `ProcessRootEvent` (`xla/tsl/profiler/utils/group_events.cc`) makes every event with
an `_r` stat a root whatever its name (and every legacy `TraceContext`), except the implicit
roots TensorFlow marks itself; higher root levels first, then by time. A window with none
falls back to Keras 3's step functions (`method="inferred"`). The grouping of each root's
work is steps.py's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from tfobs.analysis.step_notes import number_in
from tfobs.analysis.timeline import (
    Timeline,
    id_array,
    int_stats_at,
    member,
    positions_by_value,
    stat_present,
)

KERAS3_STEP_FUNCTIONS = ("multi_step_on_iterator", "one_step_on_iterator")
MAX_STEPS = 100_000  # roots kept as steps, in root order: a bound on a window's work
# XProf's implicit roots (`IsImplicitRootEvent`): TensorFlow marks them `_r` itself; they
# group their work but name no step.
IMPLICIT_ROOTS = ("FunctionRun", "SessionRun", "RunGraph", "ExecutorState::Process")
# The legacy root event: a root (level 1) with or without `_r`.
LEGACY_ROOT = "TraceContext"
# Roots TensorFlow marks itself that XProf takes for steps and tfobs does not: a
# parameter-server worker's (or chief's) run of a function another task sent
# (`ClusterCoordinator.schedule`), 0.03-1 ms of dispatch around the real work. The window's
# function calls (`calls.py`) report those runs instead.
REMOTE_CALL_ROOTS = ("KernelAndDeviceFunc::RunAsync",)


@dataclass
class Unrooted:
    """Events that look like step markers (a `step_num` stat) but carry no `_r`."""

    count: int = 0
    name: str = ""


@dataclass
class Roots:
    """The step roots in XProf's order, as columns: each root's line, sorted position,
    step number (its place in the order where it carries none) and marker name. Thousands
    of roots (a long window of small steps) need no tuple each."""

    line: np.ndarray
    pos: np.ndarray
    num: list[int]
    name: list[str]
    # Roots whose step_num is not an integer (XProf says 0), and how many of those tfobs
    # numbered by the number they hold (3.0, a scalar tensor's text): all or none.
    odd_nums: int = 0
    odd_read: int = 0
    # Inferred steps: executions of another of Keras's functions (an evaluation's, beside
    # the training one) left out of the steps, and that function's name.
    other_runs: int = 0
    other_function: str = ""

    def __len__(self) -> int:
        return len(self.num)

    def __iter__(self) -> Iterator[tuple[int, int, int, str]]:
        return zip(self.line.tolist(), self.pos.tolist(), self.num, self.name, strict=True)


_NO_ROOTS = Roots(np.zeros(0, np.int64), np.zeros(0, np.int64), [], [])


def _positions(host: Timeline, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(line index, sorted position) of each plane-wide event index (stored order)."""
    firsts = np.array([ld.first for ld in host.lines], np.int64)
    line_of = np.searchsorted(firsts, flat, side="right") - 1
    pos = flat - firsts[line_of]
    for li, on in positions_by_value(line_of):
        ld = host.lines[li]
        if ld.order is not None:
            inverse = np.empty(len(ld), np.int64)
            inverse[np.asarray(ld.order, np.int64)] = np.arange(len(ld))
            pos[on] = inverse[pos[on]]
    return line_of, pos


def _explicit_roots(host: Timeline) -> tuple[Roots, Unrooted]:
    """XProf's step roots (`ProcessRootEvent`): every event with an `_r` stat, whatever
    its name, and every `TraceContext`, except the implicit roots TensorFlow marks itself,
    in XProf's root order (higher root levels first, then by time). Also the
    would-be markers without `_r` (a `step_num` stat, not an op), which no tool takes."""
    ids, names = host.stat_ids, host.names
    n = len(host.columns)
    legacy = id_array(host.mids_named(LEGACY_ROOT))
    if not n or ("_r" not in ids and not legacy.size and "step_num" not in ids):
        return _NO_ROOTS, Unrooted()
    implicit = id_array(host.mids_named(*IMPLICIT_ROOTS))
    mids = host.columns.mid
    wanted = {ids[k]: k for k in ("_r", "step_num") if k in ids}
    scan = int_stats_at(host, np.arange(n, dtype=np.int64), wanted, raw=True)
    none = np.zeros(n, bool)
    has_r = scan["_r"][1] if "_r" in scan else none
    not_implicit = ~member(mids, implicit) if implicit.size else ~none
    is_root = (has_r | member(mids, legacy) if legacy.size else has_r) & not_implicit
    unrooted = Unrooted()
    if "step_num" in scan:
        loose = np.flatnonzero(scan["step_num"][1] & ~is_root & not_implicit)
        loose = loose[[":" not in names[m] for m in mids[loose].tolist()]]
        if loose.size:
            counts = np.bincount(mids[loose])
            unrooted = Unrooted(int(loose.size), names[int(counts.argmax())])
    flat = np.flatnonzero(is_root)
    if not flat.size:
        return _NO_ROOTS, unrooted
    level = np.ones(flat.size, np.int64)
    if "_r" in scan:
        level = np.where(has_r[flat], scan["_r"][0][flat].view(np.int64), 1)
    line_of, pos = _positions(host, flat)
    stat_ids = {ids[k]: k for k in ("step_num", "iter_num") if k in ids}
    nums = int_stats_at(host, flat, stat_ids)
    num = np.zeros(flat.size, np.int64)  # where `numbered`: the root's integer step number
    numbered = np.zeros(flat.size, bool)
    for key in ("step_num", "iter_num"):  # iter_num wins, as XProf's group name reads it
        if key in nums:
            values, has = nums[key]
            num[has] = _as_int64(values[has])  # negative numbers are the job's too
            numbered |= has
    # Markers whose step_num is no integer (a float, a tensor or variable passed as is,
    # which TensorFlow writes as text): XProf numbers every such step 0.
    odd = read = 0
    odd_at = np.zeros(0, np.int64)
    held: dict[int, int | None] = {}  # odd root -> the number its value holds
    if "step_num" in ids and not numbered.all():  # a second read only where one is missing
        odd_at = np.flatnonzero(stat_present(host, flat, ids["step_num"]) & ~numbered)
        odd = int(odd_at.size)
    # Each root's start and name, gathered line by line; the numbers odd markers hold.
    start = np.zeros(flat.size, np.int64)
    mid = np.zeros(flat.size, np.int64)
    is_odd = np.zeros(flat.size, bool)
    is_odd[odd_at] = True
    for li, on in positions_by_value(line_of):
        ld = host.lines[li]
        start[on] = ld.start_arr[pos[on]] + ld.start_ps
        mid[on] = ld.mid_arr[pos[on]]
        odd_here = on[is_odd[on]]
        if odd_here.size:
            stats = host.stat_values_many(ld, pos[odd_here].tolist(),
                                          {ids["step_num"]: "step_num"})
            held.update(zip(odd_here.tolist(), (number_in(v.get("step_num")) for v in stats),
                            strict=True))
    # Read numbers only where every odd marker holds one: numbers by place beside read
    # ones would repeat.
    if not (held and None not in held.values()):
        held = {}
    read = len(held)
    # In XProf's order (higher root levels first, then by time): one sort of the columns,
    # not of thousands of tuples (line and position make every key distinct).
    order = np.lexsort((pos, line_of, start, -level))
    if order.size > MAX_STEPS:
        order = order[:MAX_STEPS]
    # A root without a step number takes its place in the order, as XProf numbers it.
    step_nums = np.where(numbered[order], num[order], np.arange(order.size)).tolist()
    if held:  # read numbers may pass int64: set as Python ints
        place = np.full(flat.size, -1, np.int64)
        place[order] = np.arange(order.size)
        for k, number in held.items():
            if place[k] >= 0:
                step_nums[place[k]] = number
    return Roots(line_of[order], pos[order], step_nums,
                  list(map(names.__getitem__, mid[order].tolist())), odd, read), unrooted


def _as_int64(values: np.ndarray) -> np.ndarray:
    """Step numbers (Python ints) as int64: a uint64 number of 2**63 or more (a hashed id,
    an unsigned counter) wraps to a negative one, as a cast does, keeping the steps in
    order (XProf reads such a number as 0: README, "Where tfobs differs from XProf")."""
    try:
        return values.astype(np.int64)
    except OverflowError:
        return np.array([v - 2**64 if v >= 2**63 else v for v in values.tolist()], np.int64)


def root_list(host: Timeline) -> tuple[str, list[tuple[int, int, int, str]]]:
    """(method, [(line index, event index, step number, name)]) in XProf's root order."""
    method, roots, _ = find_roots(host)
    return method, list(roots)


def find_roots(host: Timeline) -> tuple[str, Roots, Unrooted]:
    names = host.names
    # XProf's order: higher root levels first, then by time (`_explicit_roots` sorts them).
    found, unrooted = _explicit_roots(host)
    if len(found):
        return "markers", found, unrooted
    roots: list[tuple[int, int, int, int, int, str]] = []
    fn_mids = id_array(host.mids_named(*KERAS3_STEP_FUNCTIONS))
    for li, ld in enumerate(host.lines):
        last_end = None
        picked = ld.where(fn_mids)
        for i, start, end, mid in zip(picked, ld.start_arr[picked].tolist(),
                                      ld.end_arr[picked].tolist(),
                                      ld.mid_arr[picked].tolist(), strict=True):
            if last_end is not None and start < last_end:
                continue  # nested or overlapping: not a top-level execution
            last_end = end
            roots.append((0, ld.start_ps + start, li, i, -1, names[mid]))
    roots.sort()
    roots, other_runs, other = _one_keras_function(host, roots)
    roots = roots[:MAX_STEPS]
    return "inferred", Roots(np.array([r[2] for r in roots], np.int64),
                              np.array([r[3] for r in roots], np.int64),
                              list(range(len(roots))), [r[5] for r in roots],
                              other_runs=other_runs, other_function=other), unrooted


_CONCRETE = "EagerLocalExecute: __inference_"


def _one_keras_function(host: Timeline, roots: list[tuple[int, int, int, int, int, str]]
                        ) -> tuple[list[tuple[int, int, int, int, int, str]], int, str]:
    """The executions of the concrete function run most often, where Keras's step function
    name covers several (fit's training function and its validation's are both
    `multi_step_on_iterator`): (those roots, how many were left out, the name of the most
    run of the others). Each execution names its function in the `EagerLocalExecute`
    event it starts with."""
    names = host.names
    step_functions = {n for n in names.values() if n.startswith(_CONCRETE)
                      and any(f in n for f in KERAS3_STEP_FUNCTIONS)}
    if len(step_functions) < 2:  # one concrete function: every execution is its
        return roots, 0, ""
    concrete = id_array([m for m, n in names.items() if n.startswith(_CONCRETE)])
    function_of: list[str] = []
    for _, _, li, i, _, _ in roots:
        ld = host.lines[li]
        # the events inside the execution (a first one traces its function first)
        inside = slice(i + 1, int(np.searchsorted(ld.start_arr, ld.end_arr[i])))
        hit = np.flatnonzero(member(ld.mid_arr[inside], concrete))
        function_of.append(names[int(ld.mid_arr[inside][hit[0]])][len(_CONCRETE):]
                           if hit.size else "")
    counts = Counter(f for f in function_of if f)
    if len(counts) < 2:
        return roots, 0, ""
    (kept, _), (other, _) = counts.most_common(2)
    picked = [r for r, f in zip(roots, function_of, strict=True) if f in (kept, "")]
    return picked, len(roots) - len(picked), other
