"""Input pipeline stages a loader names itself (grain's iterators), read as XProf 2.24.2 reads them.

A Python data loader such as grain marks each stage's `__next__` with stats of its own:
`_ipl_stage_name` (the stage, as the loader prints it), `_ipl_stage_id` (one per stage
object) and `_ipl_stage_cat` ("preprocessing", "prefetch", "read", "enqueue", ...).
XProf then:

- times an outermost stage inside a step as input wait (`ClassifyCpuEvent`'s
  `is_input_pipeline_output_stage`): a stage no other stage encloses on its thread, and not
  the consumer (`_ct`/`_c`) of a producer (`_pt`/`_p`) elsewhere (a worker's element made
  for a stage of the main thread);
- lists each stage object as one host op (`CollectTfOpsFromHostThreadsXPlane`): named for
  its event, typed by its category, counted by stage id (two stages of one name are two
  rows);
- takes the categories "enqueue", "read", "preprocessing" and "unknown" as input ops
  (`IsInputOpNew`); "prefetch" is none.

Events without these stats (TensorFlow's tf.data, every capture before grain) read as
before: each function returns None or nothing for them at the cost of one dict lookup.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tfobs.analysis.gpu_idle import merged_spans
from tfobs.analysis.timeline import LineData, Timeline, int_stats_at, span_of, stat_present

STAGE_NAME = "_ipl_stage_name"
STAGE_ID = "_ipl_stage_id"
STAGE_CATEGORY = "_ipl_stage_cat"
# `IsInputOpNew`: the stage categories XProf takes as input ops, and the input kind each
# adds to (`CategorizeInputOpNew`; "unknown" is input with no kind).
INPUT_CATEGORIES = {"enqueue": "enqueue", "read": "demanded_file_read",
                    "preprocessing": "preprocessing", "unknown": None}


def _strings(host: Timeline, ld: LineData, positions: np.ndarray, key: str) -> list[str]:
    """The string value of stat `key` on each of the line's `positions` ("" where it has
    none, or holds a number: XProf's StrOrRefValue)."""
    values = host.stat_values_many(ld, positions.tolist(), {host.stat_ids[key]: key})
    return [v if isinstance(v := got.get(key), str) else "" for got in values]


# `_carrying` per host timeline and stat (the step grouping and the stages' typing both ask
# for the stage names'; held weakly: freed with the timeline).
_CARRYING: weakref.WeakKeyDictionary[Timeline, dict[str, list[tuple[LineData, np.ndarray]]]] = (
    weakref.WeakKeyDictionary())


def _carrying(host: Timeline, key: str) -> list[tuple[LineData, np.ndarray]]:
    """Each line's sorted positions of the events that carry stat `key` (one scan of the
    plane's stats per timeline and stat)."""
    known = _CARRYING.setdefault(host, {})
    if key in known:
        return known[key]
    present = stat_present(host, np.arange(len(host.columns), dtype=np.int64),
                           host.stat_ids[key])
    out = []
    for ld in host.lines:
        if not len(ld):
            continue
        at = np.flatnonzero(present[ld.indices(np.arange(len(ld)))])
        if at.size:
            out.append((ld, at))
    known[key] = out
    return out


def _produced(host: Timeline) -> set[tuple[int, int]]:
    """The (`_pt`, `_p`) pairs some event of the plane produces."""
    ids = host.stat_ids
    if "_pt" not in ids or "_p" not in ids:
        return set()
    made = int_stats_at(host, np.arange(len(host.columns), dtype=np.int64),
                        {ids["_pt"]: "_pt", ids["_p"]: "_p"}, raw=True)
    if "_pt" not in made or "_p" not in made:
        return set()
    both = made["_pt"][1] & made["_p"][1]
    return set(zip(made["_pt"][0][both].tolist(), made["_p"][0][both].tolist(), strict=True))


def _consumers(host: Timeline, ld: LineData, produced: set[tuple[int, int]]) -> np.ndarray:
    """Which events of the line consume (`_ct`, `_c`) a pair of `produced`: their work was
    made for a stage elsewhere."""
    ids = host.stat_ids
    out = np.zeros(len(ld), bool)
    if not produced or "_ct" not in ids or "_c" not in ids:
        return out
    used = int_stats_at(host, ld.indices(np.arange(len(ld))),
                        {ids["_ct"]: "_ct", ids["_c"]: "_c"}, raw=True)
    if "_ct" in used and "_c" in used:
        has = np.flatnonzero(used["_ct"][1] & used["_c"][1])
        keys = zip(used["_ct"][0][has].tolist(), used["_c"][0][has].tolist(), strict=True)
        out[has] = [k in produced for k in keys]
    return out


def stage_mids(host: Timeline | None) -> np.ndarray:
    """The metadata ids of the events that carry a stage name: XProf links a stage that
    consumes (`_ct`, `_c`) another thread's stage into that stage's step, as it links any
    producer and consumer."""
    if host is None or STAGE_NAME not in host.stat_ids:
        return np.zeros(0, np.int64)
    found = [ld.mid_arr[at] for ld, at in _carrying(host, STAGE_NAME)]
    return np.unique(np.concatenate(found)) if found else np.zeros(0, np.int64)


# root_stages per host timeline, as the analyses ask in turn (held weakly: freed with it).
_ROOTS: weakref.WeakKeyDictionary[Timeline, np.ndarray | None] = weakref.WeakKeyDictionary()


def root_stages(host: Timeline | None) -> np.ndarray | None:
    """`_root_stages`, once per timeline."""
    if host is None or STAGE_NAME not in host.stat_ids:
        return None
    try:
        return _ROOTS[host]
    except KeyError:
        found = _ROOTS[host] = _root_stages(host)
        return found


def _root_stages(host: Timeline) -> np.ndarray | None:
    """For each event of the host plane (plane-wide index), whether XProf times it as input
    wait: an input pipeline stage (a non-empty `_ipl_stage_name`) that no stage, and no
    consumer of another thread's stage, encloses on its line, and that is no such consumer
    itself. None where no event names a stage."""
    roots = np.zeros(len(host.columns), bool)
    produced: set[tuple[int, int]] | None = None
    for ld, at in _carrying(host, STAGE_NAME):
        named = np.array([bool(s) for s in _strings(host, ld, at, STAGE_NAME)], bool)
        stages = at[named]
        if not stages.size:
            continue
        if produced is None:
            produced = _produced(host)
        consumer = _consumers(host, ld, produced)
        # Events that make what they enclose a stage's descendant: stages and consumers.
        marks = np.zeros(len(ld), bool)
        marks[stages] = True
        marks |= consumer
        marked = np.flatnonzero(marks)
        # The latest end among the marked events before each stage (by position: a line's
        # events are sorted by start, the longer first): one that reaches the stage's end
        # encloses it.
        reach = np.maximum.accumulate(ld.end_arr[marked])
        before = np.searchsorted(marked, stages, side="left") - 1
        inside = (before >= 0) & (reach[np.maximum(before, 0)] >= ld.end_arr[stages])
        root = stages[~inside & ~consumer[stages]]
        roots[ld.indices(root)] = True
    return roots if roots.any() else None


@dataclass(frozen=True)
class StageOps:
    """The host-op view of the stages: each line's stage events and the op each counts
    toward (`key`, an index into `names` and `categories`)."""

    lines: dict[int, tuple[np.ndarray, np.ndarray]]  # line index -> (positions, key)
    # Positions of events with a stage id that no op takes (no stage of their id has a
    # category): XProf counts them as no op, whatever their name.
    untaken: dict[int, np.ndarray]
    names: list[str]
    categories: list[str]
    ids: list[int]


def stage_ops(host: Timeline | None) -> StageOps | None:
    """The stages as host ops, one per stage id that some event gives a category; None
    where no event carries a stage id."""
    if host is None or STAGE_ID not in host.stat_ids:
        return None
    sid = host.stat_ids[STAGE_ID]
    carrying = {id(ld): at for ld, at in _carrying(host, STAGE_ID)}
    per_line: list[tuple[int, np.ndarray, np.ndarray]] = []
    key_of: dict[int, int] = {}
    names: list[str] = []
    categories: list[str] = []
    for li, ld in enumerate(host.lines):
        at = carrying.get(id(ld))
        if at is None:
            continue
        read = int_stats_at(host, ld.indices(at), {sid: STAGE_ID}, raw=True)
        if STAGE_ID not in read:
            continue
        values, has = read[STAGE_ID]
        at, stage = at[has], values[has].view(np.int64)  # XProf's IntValue
        cats = (_strings(host, ld, at, STAGE_CATEGORY) if STAGE_CATEGORY in host.stat_ids
                else [""] * at.size)
        for j, (s, cat) in enumerate(zip(stage.tolist(), cats, strict=True)):
            if cat and s not in key_of:  # the first event with a category names the op
                key_of[s] = len(names)
                names.append(host.names.get(int(ld.mid_arr[at[j]]), ""))
                categories.append(cat)
        per_line.append((li, at, stage))
    lines: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    untaken: dict[int, np.ndarray] = {}
    for li, at, stage in per_line:
        key = np.array([key_of.get(s, -1) for s in stage.tolist()], np.int64)
        taken = key >= 0
        lines[li] = (at[taken], key[taken])
        untaken[li] = at[~taken]
    return StageOps(lines, untaken, names, categories, sorted(key_of, key=key_of.__getitem__))


def stage_spans(host: Timeline | None, ld: LineData) -> np.ndarray:
    """The line's outermost input stages (`root_stages`) as merged (begin, end) rows,
    absolute ps: time XProf counts as input wait, not as the Python inside it."""
    roots = root_stages(host)
    if roots is None:
        return np.zeros((0, 2), np.int64)
    at = np.flatnonzero(roots[ld.indices(np.arange(len(ld)))])
    if not at.size:
        return np.zeros((0, 2), np.int64)
    return np.stack(merged_spans(ld.start_arr[at] + ld.start_ps,
                                 ld.end_arr[at] + ld.start_ps), 1)


def loader_wait(host: Timeline | None, lo: np.ndarray, hi: np.ndarray,
                lines: Sequence[int] | None, top: int = 3) -> tuple[float, tuple[str, ...]]:
    """(seconds the steps, `lo[k]..hi[k]` in order, spent in outermost input stages that
    begin inside them on `lines` (the threads that run the steps; a loader's own threads
    work beside the steps, not in them), those stages' names, most time first)."""
    roots = root_stages(host)
    if host is None or roots is None or not lo.size or not lines:
        return 0.0, ()
    per_name: dict[str, int] = {}
    for ld in (host.lines[li] for li in lines):
        at = np.flatnonzero(roots[ld.indices(np.arange(len(ld)))])
        if not at.size:
            continue
        begin = ld.start_arr[at] + ld.start_ps
        k, inside = span_of(begin, lo, hi)  # each cut at its step's end
        ps = np.minimum(ld.end_arr[at] + ld.start_ps, hi[k])[inside] - begin[inside]
        for mid, held in zip(ld.mid_arr[at[inside]].tolist(), ps.tolist(), strict=True):
            name = host.names.get(mid, "")
            per_name[name] = per_name.get(name, 0) + held
    names = sorted(per_name, key=lambda n: (-per_name[n], n))
    return sum(per_name.values()) / 1e12, tuple(names[:top])
