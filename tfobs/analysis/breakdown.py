"""Step-time breakdown and the input-bound verdict, as XProf's Input Pipeline Analyzer.

Per step (`xprof/utils/event_span.cc`, `step_events_to_steps_db.cc`): overlapping events
are flattened so each instant belongs to the highest-priority event type present, the
flattened spans are clipped to the step, and time no event covers is "other" (XProf's
unknown time). A step without any compute of the expected kind is not well formed and
is dropped. Verdict (`op_stats_to_input_pipeline_analysis.cc`): input share of the total
step time >= 20 % highly, >= 5 % moderately, else potentially when "other" >= 3 %, else
not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tfobs.analysis import eventtypes as et
from tfobs.analysis.steps import DROP_INCOMPLETE_THRESHOLD, StepGroup
from tfobs.analysis.timeline import unique
from tfobs.summary import CATEGORIES
from tfobs.xspace.columns import wire

HIGHLY_INPUT_PCT = 20.0
MODERATELY_INPUT_PCT = 5.0
MODERATELY_OTHER_PCT = 3.0


def type_times(events: list[tuple[int, int, int]], begin: int, end: int) -> dict[int, int]:
    """Picoseconds per event type inside [begin, end] after flattening overlaps.

    The reference sweep, one step at a time in Python: `all_type_times` computes the same
    for every step at once and falls back to this for times numpy cannot hold exactly.
    """
    bounds = []
    for etype, b, e in events:
        bounds.append((b, 1, -etype, etype))  # at equal times: ends (0) before starts (1)
        bounds.append((e, 0, -etype, etype))
    bounds.sort()
    counts: dict[int, int] = {}
    out: dict[int, int] = {}
    current = et.UNKNOWN_TIME
    covered = 0
    for k in range(len(bounds) - 1):
        t, is_start, _, etype = bounds[k]
        if is_start:
            counts[etype] = counts.get(etype, 0) + 1
            if etype > current:
                current = etype
        else:
            counts[etype] = counts.get(etype, 0) - 1
            if etype == current and counts[etype] == 0:
                current = max((k2 for k2, c in counts.items() if c > 0), default=et.UNKNOWN_TIME)
        nxt = bounds[k + 1][0]
        lo, hi = max(t, begin), min(nxt, end)
        span = hi - lo if hi > lo else 0
        # XProf keeps a type once a flattened span of it exists, even outside the step.
        out[current] = out.get(current, 0) + span
        covered += span
    total = end - begin
    if covered < total:
        out[et.UNKNOWN_TIME] = out.get(et.UNKNOWN_TIME, 0) + total - covered
    return out


def event_columns(groups: Sequence[StepGroup]) -> tuple[np.ndarray, ...] | None:
    """(type, begin, end, group) of every group's events as int64 (the reader keeps every
    time far inside int64), or None when an event ends before it begins (corrupt)."""
    chunks = [(c, k) for k, g in enumerate(groups) for c in g.events if len(c[0])]
    if not chunks:
        return tuple(np.zeros(0, np.int64) for _ in range(4))
    begin = np.concatenate([c[1] for c, _ in chunks])
    end = np.concatenate([c[2] for c, _ in chunks])
    begin, end = begin.astype(np.int64), end.astype(np.int64)
    if (end < begin).any():
        return None
    etype = np.concatenate([c[0] for c, _ in chunks]).astype(np.int64)
    group = np.repeat(np.array([k for _, k in chunks], np.int64),
                      [len(c[0]) for c, _ in chunks])
    return etype, begin, end, group


def all_type_times(groups: Sequence[StepGroup], columns: tuple[np.ndarray, ...] | None = None
                   ) -> list[dict[int, int]]:
    """`type_times` of every group, swept together with numpy.

    Each event gives a start and an end bound; sorted as the reference sweep sorts them
    (group, time, ends before starts, higher type first), the type in force after each
    bound is the highest type with more starts than ends so far (counted per type with a
    running sum, which returns to zero at each group's last bound). Each gap between
    bounds of one group, clipped to the step, goes to that type.
    """
    cells = _type_cells(groups, columns)
    return _from_sums(groups, *cells) if isinstance(cells, tuple) else cells


def _type_cells(groups: Sequence[StepGroup], columns: tuple[np.ndarray, ...] | None,
                spans: tuple[np.ndarray, np.ndarray] | None = None,
                swept: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None] | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | list[dict[int, int]]:
    """`all_type_times` as the compiled gaps leave it, (time per group and type, first
    gap per group and type, the type of each column), where `_wire` is there; else the
    dicts. `spans`: the groups' (begin_ps, end_ps) as arrays, where the caller has them;
    `swept`: `_swept_bounds` of `columns`, where the caller made it."""
    cols = event_columns(groups) if columns is None else columns
    if cols is None or (columns is not None and (columns[2] < columns[1]).any()):
        return [_reference(g) for g in groups]
    time, grp, current, types = swept if swept is not None else _swept_bounds(*cols)
    # Gaps: bound k to bound k + 1 of the same group, clipped to the group's span.
    g_begin, g_end = spans if spans is not None else (
        np.array([x.begin_ps for x in groups], np.int64),
        np.array([x.end_ps for x in groups], np.int64))
    summed = gap_sums(time, grp, current, g_begin, g_end,
                      None if types is None else np.union1d(types, [et.UNKNOWN_TIME]))
    if summed is not None:
        return summed
    gap = np.flatnonzero(grp[:-1] == grp[1:])
    g = grp[gap]
    lo = np.maximum(time[gap], g_begin[g])
    hi = np.minimum(time[gap + 1], g_end[g])
    span = np.where(hi > lo, hi - lo, 0)
    return _per_group(groups, g, current[gap], span)


def _swept_bounds(etype: np.ndarray, begin: np.ndarray, end: np.ndarray, group: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """The groups' event bounds in the reference sweep's order, as (time, group, the type in
    force after each bound, the distinct types where all are small, else None)."""
    etype, begin, end, group = _without_nested(etype, begin, end, group)
    n = etype.size
    time = np.concatenate((begin, end))
    start = np.concatenate((np.ones(n, bool), np.zeros(n, bool)))
    typ = np.concatenate((etype, etype))
    grp = np.concatenate((group, group))
    types = _small_types(typ)
    order = _bound_order(time, start, typ, grp, types)
    time, start, typ, grp = time[order], start[order], typ[order], grp[order]
    current, own = _sweep(typ, start, types)
    # A start whose own count stays <= 0 follows the end of a zero-length event of its
    # type at the same time (ties among equal bounds fall either way).
    _hold_sticky_types(current, start, typ, grp, own, start & (own <= 0))
    return time, grp, current, types


def unknown_spans(typed: tuple[np.ndarray, ...], g_begin: np.ndarray, g_end: np.ndarray
                  ) -> np.ndarray:
    """Each step's unknown time (XProf's 'All Others') as (begin, end) rows of absolute ps,
    from the sweep `_type_cells` runs: the stretches between a step's event bounds where no
    type is in force, and the parts of the step before its first bound and after its last.
    `typed`: the steps' events (type, begin, end, group), groups numbering `g_begin`."""
    swept = _swept_bounds(*typed)[:3] if typed[0].size else None
    return unknown_spans_swept(swept, g_begin, g_end)


def unknown_spans_swept(swept: tuple[np.ndarray, ...] | None, g_begin: np.ndarray,
                        g_end: np.ndarray) -> np.ndarray:
    """`unknown_spans` from the sweep's bounds (time, group, type in force after each;
    None: no event), groups numbering `g_begin`."""
    rows = []
    seen = np.zeros(g_begin.size, bool)
    if swept is not None and swept[0].size:
        time, grp, current = swept
        gap = np.flatnonzero((grp[:-1] == grp[1:]) & (current[:-1] == et.UNKNOWN_TIME))
        g = grp[gap]
        rows.append(np.stack([np.maximum(time[gap], g_begin[g]),
                              np.minimum(time[gap + 1], g_end[g])], 1))
        first = np.flatnonzero(np.r_[True, grp[1:] != grp[:-1]])
        last = np.r_[first[1:] - 1, grp.size - 1]
        g = grp[first]
        seen[g] = True
        rows.append(np.stack([g_begin[g], np.minimum(time[first], g_end[g])], 1))
        rows.append(np.stack([np.maximum(time[last], g_begin[g]), g_end[g]], 1))
    rows.append(np.stack([g_begin[~seen], g_end[~seen]], 1))  # steps with no event
    out = np.concatenate(rows).astype(np.int64)
    kept: np.ndarray = out[out[:, 1] > out[:, 0]]
    return kept


def _sweep(typ: np.ndarray, start: np.ndarray, types: np.ndarray | None
           ) -> tuple[np.ndarray, np.ndarray]:
    """(the highest type with more starts than ends so far, the running count of the
    bound's own type) after each sorted bound: one compiled loop where types are small,
    else one numpy pass per type."""
    swept = type_sweep(typ, start) if types is not None else None
    if swept is not None:
        return swept
    current, own = np.zeros(typ.size, np.int64), np.zeros(typ.size, np.int64)
    step = np.where(start, 1, -1)
    for t in (types if types is not None else unique(typ)).tolist():
        count = np.cumsum(np.where(typ == t, step, 0))
        current = np.maximum(current, np.where(count > 0, t, et.UNKNOWN_TIME))
        own = np.where(typ == t, count, own)
    return current, own


def type_sweep(typ: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The compiled sweep of all_type_times (see _wire.c): (the highest open
    type, the bound's own type's running count) after each bound; None where `_wire` is
    missing or a type is outside 0..255."""
    lib = wire()
    if lib is None:
        return None
    current, own = np.empty(typ.size, np.int64), np.empty(typ.size, np.int64)
    ok = lib.type_sweep(np.ascontiguousarray(typ, np.int64),
                        np.ascontiguousarray(start, np.bool_), current, own)
    return (current, own) if ok else None


def gap_sums(time: np.ndarray, grp: np.ndarray, current: np.ndarray, g_begin: np.ndarray,
             g_end: np.ndarray, types: np.ndarray | None = None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The compiled gaps of all_type_times (see _wire.c): (time per group and
    type, first gap per group and type, -1 if none, the type of each column), groups x
    the sorted `types` (every type `current` holds; default all of 0..255: thousands of
    steps would hold 256 cells each where a window has a handful of types); None where
    `_wire` is missing or a group or type is out of range."""
    lib = wire()
    if lib is None:
        return None
    if types is None:
        types = np.arange(256)
    elif current.size:
        if current.min() < 0 or current.max() > 255:
            return None
        column = np.full(256, -1, np.int64)  # -1: a type not among `types`, refused below
        column[types] = np.arange(types.size)
        current = column[current]
    sums = np.zeros((g_begin.size, types.size), np.int64)
    first = np.full((g_begin.size, types.size), -1, np.int64)
    time, grp, current, g_begin, g_end = (np.ascontiguousarray(x, np.int64)
                                          for x in (time, grp, current, g_begin, g_end))
    ok = lib.gap_sums(time, grp, current, g_begin, g_end, sums, first)
    return (sums, first, types) if ok else None


# Leaving nested events out pays where most events are nested (call trees); elsewhere the
# search costs more than it saves. Large windows are sampled first: blocks of events.
_NESTED_SAMPLE = (8, 1024)  # blocks, events per block
_NESTED_WORTH = 0.25  # the share of sampled events nested that makes the search worth it


def _without_nested(etype: np.ndarray, begin: np.ndarray, end: np.ndarray,
                    group: np.ndarray) -> tuple[np.ndarray, ...]:
    """The events less those strictly inside another event of their type and group.

    Such an event changes nothing in the sweep: its type is open from before its start to
    after its end, so the type in force is the same at its two bounds as just before them,
    and no zero-length event of its type there can be sticky. (Call trees, such as JAX's
    Python tracer events, are mostly such events.) Compiled, always; else only where a
    sample of the events says many are nested.
    """
    inside = nested_compiled(etype, begin, end, group)
    if inside is not None:
        if not inside.any():
            return etype, begin, end, group
        keep = ~inside
        return etype[keep], begin[keep], end[keep], group[keep]
    n = etype.size
    blocks, size = _NESTED_SAMPLE
    if n > 2 * blocks * size:
        at = np.linspace(0, n - size, blocks).astype(np.int64)
        take = (at[:, None] + np.arange(size)).ravel()
        sample = _nested(etype[take], begin[take], end[take], group[take])
        if sample is None or sample.mean() < _NESTED_WORTH:
            return etype, begin, end, group
    inside = _nested(etype, begin, end, group)
    if inside is None or not inside.any():
        return etype, begin, end, group
    keep = ~inside
    return etype[keep], begin[keep], end[keep], group[keep]


def nested_compiled(etype: np.ndarray, begin: np.ndarray, end: np.ndarray,
                    group: np.ndarray) -> np.ndarray | None:
    """`_nested` by one compiled pass (see _wire.c), without its bounds on the packed keys;
    None where `_wire` is missing or a type is outside 0..255."""
    lib = wire()
    if lib is None:
        return None
    inside = np.zeros(etype.size, np.bool_)
    ok = lib.nested(*(np.ascontiguousarray(x, np.int64) for x in (etype, begin, end, group)),
                    inside)
    return inside if ok else None


def _nested(etype: np.ndarray, begin: np.ndarray, end: np.ndarray,
            group: np.ndarray) -> np.ndarray | None:
    """Which events lie strictly inside another of their type and group, found within each
    run of events stored in time order (a thread's events in a step); None where the
    packed keys below would not fit 63 bits."""
    n = etype.size
    types = _small_types(etype)
    if n < 2 or types is None:
        return None
    # Runs: a new one where the group changes or time goes back (the next thread).
    run = np.cumsum(np.r_[False, (group[1:] != group[:-1]) | (begin[1:] < begin[:-1])])
    rank = np.zeros(256, np.int64)
    rank[types] = np.arange(types.size)
    seg = run * types.size + rank[etype]
    e_lo = int(end.min())
    end_bits = (int(end.max()) - e_lo).bit_length()
    if int(seg.max()).bit_length() + end_bits > 62:
        return None
    # By segment (run, type), time order kept (a stable sort of keys that are mostly
    # in order already); then, per event, the latest end among the events of its
    # segment that begin strictly before it: a running max of packed (segment, end),
    # where earlier segments pack smaller and so never win.
    order = np.argsort(seg, kind="stable") if types.size > 1 else np.arange(n)
    seg_o, begin_o, end_o = seg[order], begin[order], end[order]
    packed = np.left_shift(seg_o, end_bits) | (end_o - e_lo)
    reach = np.maximum.accumulate(packed)
    new = np.r_[True, (seg_o[1:] != seg_o[:-1]) | (begin_o[1:] != begin_o[:-1])]
    tie_start = np.maximum.accumulate(np.where(new, np.arange(n), 0))
    before = np.where(tie_start > 0, reach[np.maximum(tie_start - 1, 0)], -1)
    # Same segment (the high bits agree), a later end; the event itself not an instant.
    inside = ((before >> end_bits) == seg_o) & (before > packed) & (end_o > begin_o)
    out = np.zeros(n, bool)
    out[order[inside]] = True
    return out


def _hold_sticky_types(current: np.ndarray, start: np.ndarray, typ: np.ndarray,
                       grp: np.ndarray, own: np.ndarray, candidates: np.ndarray) -> None:
    """Make `current` (max type with an open event, per bound) the reference sweep's.

    A zero-length event sorts its end before its start. When no other event of its type
    is open and its type is above the one in force, the reference sweep keeps its type in
    force after it ("sticky") although no event of it is open, until a start of a higher
    type, or of its own type that opens one, in the same group; ends never release it, and
    a later sticky type is higher than the one it replaces. So at most one sticky type
    holds at a bound: found in one pass over the candidate bounds, then applied as
    `max(current, type)` over each sticky stretch. (Captures with many zero-length events,
    such as JAX's Python tracer, otherwise sent every step through the Python sweep.)
    """
    cand = np.flatnonzero(candidates)
    if not cand.size:
        return
    n = current.size
    group_end = np.searchsorted(grp, grp[cand], side="right")  # bounds are sorted by group
    starts = np.flatnonzero(start)
    # Released by the first start of a higher type, or of its own type that opens one.
    release = np.empty(cand.size, np.int64)
    cand_typ = typ[cand]
    for t in unique(cand_typ).tolist():
        mine = cand_typ == t
        higher = starts[(typ[starts] > t) | ((typ[starts] == t) & (own[starts] > 0))]
        pos = np.searchsorted(higher, cand[mine], side="right")
        padded = np.append(higher, n)  # none left: held to the group's end
        release[mine] = padded[pos]
    release = np.minimum(release, group_end)
    # The type in force just before each candidate (0 at a group's first bound), read
    # before the loop: `current` changes only after it.
    prev = np.maximum(cand - 1, 0)
    new_group = (cand == 0) | (grp[prev] != grp[cand])
    in_force = np.where(new_group, 0, current[prev])
    # A candidate at or under the type in force holds nothing and changes no state (a held
    # type only raises it): only the others go through the loop.
    rise = np.flatnonzero(cand_typ > in_force)
    cand, cand_typ, release = cand[rise], cand_typ[rise], release[rise]
    in_force, new_group = in_force[rise], new_group[rise]
    if not cand.size:
        return
    # Each candidate sees the stretch the one before it began, if that still holds. Where
    # every candidate begins one (the usual case: one per step), that is read off the
    # columns; otherwise the candidates go one at a time.
    held_before = ~new_group[1:] & (cand[1:] - 1 < release[:-1])
    before = in_force.copy()
    before[1:] = np.where(held_before, np.maximum(in_force[1:], cand_typ[:-1]), in_force[1:])
    if (cand_typ > before).all():
        cs, rs, ts = cand, release, cand_typ
    else:
        cs, rs, ts = _sticky_one_by_one(cand, cand_typ, release, in_force, new_group)
        if not cs.size:
            return
    if (rs[1:] < rs[:-1]).any():  # not nested in order: one stretch at a time
        for c, r, t in zip(cs.tolist(), rs.tolist(), ts.tolist(), strict=True):
            np.maximum(current[c:r], t, out=current[c:r])
        return
    # A later stretch starts higher and ends no earlier (a start that releases the earlier
    # type releases it too): at each bound the last stretch begun, if it still holds, is
    # the highest.
    lo, hi = int(cs[0]), int(rs[-1])
    last = np.full(hi - lo, -1, np.int64)
    last[cs - lo] = np.arange(cs.size)  # the stretches' starts are distinct bounds
    k = np.maximum.accumulate(last)
    held = np.where(np.arange(lo, hi) < rs[k], ts[k], 0)
    np.maximum(current[lo:hi], held.astype(current.dtype), out=current[lo:hi])


def _sticky_one_by_one(cand: np.ndarray, cand_typ: np.ndarray, release: np.ndarray,
                       in_force: np.ndarray, new_group: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sticky stretches (start, release, type) as the reference sweep finds them, one
    candidate at a time (`_hold_sticky_types`)."""
    held_type, held_until = 0, -1
    stretches: list[tuple[int, int, int]] = []
    for c, t, r, before, fresh in zip(cand.tolist(), cand_typ.tolist(), release.tolist(),
                                      in_force.tolist(), new_group.tolist(), strict=True):
        if not fresh and c - 1 < held_until:
            before = max(before, held_type)
        if t <= before:
            continue
        held_type, held_until = t, r
        stretches.append((c, r, t))
    if not stretches:
        none = np.zeros(0, np.int64)
        return none, none, none
    cs, rs, ts = (np.array(col, np.int64) for col in zip(*stretches, strict=True))
    return cs, rs, ts


def _small_types(typ: np.ndarray) -> np.ndarray | None:
    """The distinct event types, sorted, when all are in 0..255 (XProf's are), else None."""
    if not typ.size or typ.min() < 0 or typ.max() > 255:
        return None
    return np.flatnonzero(np.bincount(typ, minlength=256))


def _bound_order(time: np.ndarray, start: np.ndarray, typ: np.ndarray, grp: np.ndarray,
                 types: np.ndarray | None) -> np.ndarray:
    """`np.lexsort((-typ, start, time, grp))`, by one sort of int64 keys packing the four
    and the bound's index where they fit (the usual case: a few times faster). Keys are
    distinct (the index is in them), so the order is lexsort's, ties included."""
    n = time.size
    if types is not None and n:
        t_lo = int(time.min())
        idx_bits = (n - 1).bit_length()
        type_bits = (types.size - 1).bit_length()
        time_bits = (int(time.max()) - t_lo).bit_length()
        if int(grp.max()).bit_length() + time_bits + 1 + type_bits + idx_bits <= 63:
            rank = np.zeros(256, np.int64)  # 0 for the highest type: higher types first
            rank[types] = np.arange(types.size)[::-1]
            # Field by field through one scratch array (fresh large arrays cost page faults).
            key: np.ndarray = np.left_shift(grp, time_bits + 1 + type_bits + idx_bits)
            part = np.subtract(time, t_lo)
            part <<= 1 + type_bits + idx_bits
            key |= part
            np.copyto(part, start)
            part <<= type_bits + idx_bits
            key |= part
            np.take(rank, typ, out=part)
            part <<= idx_bits
            key |= part
            key |= np.arange(n)
            key.sort()
            key &= (1 << idx_bits) - 1
            return key
    return np.lexsort((-typ, start, time, grp))


def _reference(g: StepGroup) -> dict[int, int]:
    events = [(int(t), int(b), int(e)) for c in g.events for t, b, e in zip(*c, strict=True)]
    return type_times(events, g.begin_ps, g.end_ps)


def _per_group(groups: Sequence[StepGroup], g: np.ndarray, current: np.ndarray,
               span: np.ndarray) -> list[dict[int, int]]:
    """{type: ps} per group; types in order of first appearance, as the sweep adds them."""
    key = g * 256 + current  # XProf's types are below 256
    order = np.argsort(key, kind="stable")
    key_s = key[order]
    first = np.flatnonzero(np.r_[True, key_s[1:] != key_s[:-1]]) if key.size else key
    sums = np.add.reduceat(span[order], first) if key.size else key
    firsts = order[first]  # the gap where each (group, type) first appears
    out: list[dict[int, int]] = [{} for _ in groups]
    for j in np.argsort(firsts, kind="stable").tolist():
        k = int(key_s[first[j]])
        out[k // 256][k % 256] = int(sums[j])
    for d, grp in zip(out, groups, strict=True):
        _add_unknown(d, grp)
    return out


def _from_sums(groups: Sequence[StepGroup], sums: np.ndarray, first: np.ndarray,
               types: np.ndarray) -> list[dict[int, int]]:
    """`_per_group` from the compiled gaps: each group's time per type and first gap per
    type (-1: none), a column per one of `types`. Every group at once: the (group, type)
    cells in order of group, then first gap; one Python pass fills the dicts."""
    rows, cols = np.nonzero(first >= 0)
    order = np.lexsort((first[rows, cols], rows))
    rows, cols = rows[order], cols[order]
    values = sums[rows, cols].astype(np.int64)
    covered = np.zeros(len(groups), np.int64)
    np.add.at(covered, rows, values)
    total = np.array([g.end_ps - g.begin_ps for g in groups], np.int64)
    out: list[dict[int, int]] = [{} for _ in groups]
    for r, t, v in zip(rows.tolist(), types[cols].tolist(), values.tolist(), strict=True):
        out[r][t] = v
    # The step's time no gap covered goes to unknown time, as in XProf.
    for k in np.flatnonzero(covered < total).tolist():
        d = out[k]
        d[et.UNKNOWN_TIME] = d.get(et.UNKNOWN_TIME, 0) + int(total[k] - covered[k])
    return out


def _add_unknown(d: dict[int, int], grp: StepGroup) -> None:
    """The step's time no gap covered goes to unknown time, as in XProf."""
    total = grp.end_ps - grp.begin_ps
    covered = sum(d.values())
    if covered < total:
        d[et.UNKNOWN_TIME] = d.get(et.UNKNOWN_TIME, 0) + total - covered


@dataclass
class StepTimes:
    """The steps XProf keeps (well formed, first and last dropped) with their breakdowns."""

    groups: Sequence[StepGroup]
    # Per step (rows), seconds per category in CATEGORIES order (columns): each the sum of
    # its event types' times in the order the sweep met them, as XProf adds them up.
    seconds_array: np.ndarray
    totals: dict[int, int]  # ps per event type over the kept steps
    dropped: int = 0  # steps XProf drops (first and last)
    # Those two steps' durations, seconds (first, last): a long one (a shuffle buffer
    # filling, a first trace) is in none of the kept steps' figures.
    dropped_s: tuple[float, float] = (0.0, 0.0)
    # Those two steps' places among the groups given ((-1, -1): none dropped), so what they
    # held (a first call's compile) can be read.
    dropped_at: tuple[int, int] = (-1, -1)
    # Each kept step's place among the groups given, and its span (absolute ps): columns,
    # so thousands of steps are not read one attribute at a time.
    index: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    begin_ps: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    end_ps: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # The breakdown's sweep of the groups' event bounds (time, group: place among the
    # groups given, type in force after the bound), where it ran on the found columns.
    swept: tuple[np.ndarray, np.ndarray, np.ndarray] | None = field(
        default=None, repr=False, compare=False)

    def category_sums(self) -> dict[str, float]:
        """Each category's seconds summed over the steps left to right (a cumulative sum
        adds in that order, as summing each step's figure in turn does)."""
        array = self.seconds_array
        if not array.size:
            return dict.fromkeys(CATEGORIES, 0.0)
        last = np.cumsum(array, axis=0)[-1]
        return {c: 0.0 + x for c, x in zip(CATEGORIES, last.tolist(), strict=True)}


def step_breakdowns(
    groups: Sequence[StepGroup], has_device: bool, drop_incomplete: bool = True,
    require_compute: bool = True, typed: tuple[np.ndarray, ...] | None = None,
    spans: tuple[np.ndarray, np.ndarray] | None = None,
) -> StepTimes:
    """Well-formed steps with their breakdowns, XProf's first/last step dropped; with
    `require_compute` off, every timed step (a coordinator's, whose work runs elsewhere).
    `typed`: the groups' events as columns (type, begin, end, group number) when they are
    all of each group's `events` (`FoundSteps.typed`: no device event added); `spans`: the
    groups' (begin_ps, end_ps) as columns, where the caller has them."""
    if spans is not None:
        begin, end = spans
    else:
        begin = np.array([g.begin_ps for g in groups], np.int64)
        end = np.array([g.end_ps for g in groups], np.int64)
    at = np.flatnonzero(end > begin)
    every = at.size == len(groups)  # the usual case: no group needs renumbering
    timed = groups if every else [groups[k] for k in at.tolist()]
    columns = None
    if typed is not None and every:
        columns = typed
    elif typed is not None:  # the timed groups' rows, renumbered
        rank = np.full(len(groups), -1, np.int64)
        rank[at] = np.arange(len(at))
        etype, e_begin, e_end, group = typed
        new = rank[group]
        sel = new >= 0
        columns = (etype[sel], e_begin[sel], e_end[sel], new[sel])
    swept = None
    if columns is not None and not (columns[2] < columns[1]).any():
        swept = _swept_bounds(*columns)
    cells = _type_cells(timed, columns, (begin[at], end[at]), swept)
    if isinstance(cells, list):
        cells = _cells_of(cells)
    kept = _kept_times(timed, (end - begin)[at], *cells, has_device, require_compute,
                       drop_incomplete)
    if swept is not None:  # the unknown time's spans read it again (`unknown_spans_swept`)
        kept.swept = (swept[0], at[swept[1]], swept[2])
    kept.index = at[kept.index]
    if kept.dropped:
        kept.dropped_at = (int(at[kept.dropped_at[0]]), int(at[kept.dropped_at[1]]))
    kept.begin_ps, kept.end_ps = begin[kept.index], end[kept.index]
    return kept


def _cells_of(dicts: list[dict[int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dicts of type times as the compiled gaps' cells (time, first-seen rank, -1: none;
    a column per type of 0..255)."""
    sums = np.zeros((len(dicts), 256), np.int64)
    first = np.full((len(dicts), 256), -1, np.int64)
    for k, d in enumerate(dicts):
        for j, (t, ps) in enumerate(d.items()):
            sums[k, t], first[k, t] = ps, j
    return sums, first, np.arange(256)


# Each event type's category, as an index into CATEGORIES ("other" where none is named).
_CATEGORY_INDEX = np.array([CATEGORIES.index(et.CATEGORY_OF_TYPE.get(t, "other"))
                            for t in range(256)], np.int64)


def _kept_times(groups: Sequence[StepGroup], total: np.ndarray, sums: np.ndarray,
                first: np.ndarray, types: np.ndarray, has_device: bool,
                require_compute: bool, drop_incomplete: bool) -> StepTimes:
    """`StepTimes` from each group's time and first gap per type, every step at once:
    the time no gap covered goes to unknown time (last in order where the step had none,
    as XProf adds it), and each category sums its types' seconds in first-seen order."""
    # The types any step has, and unknown time (`types` holds it).
    taken = np.flatnonzero((first >= 0).any(axis=0) | (types == et.UNKNOWN_TIME))
    used = types[taken]
    unknown = int(np.flatnonzero(used == et.UNKNOWN_TIME)[0])
    order = first[:, taken]
    present = order >= 0
    ps = np.where(present, sums[:, taken], 0)
    extra = total - ps.sum(axis=1)
    short = np.flatnonzero(extra > 0)
    ps[short, unknown] += extra[short]
    new = short[~present[short, unknown]]
    order[new, unknown] = np.iinfo(np.int64).max
    present[new, unknown] = True
    at = {int(t): j for j, t in enumerate(used.tolist())}
    if not require_compute:
        ok = np.ones(len(groups), bool)
    else:
        needed = ((et.DEVICE_COMPUTE_16, et.DEVICE_COMPUTE_32) if has_device
                  else (et.HOST_COMPUTE,))
        ok = np.zeros(len(groups), bool)
        for t in needed:
            if t in at:
                ok |= present[:, at[t]]
    keep = np.flatnonzero(ok)
    dropped = 0
    dropped_s = (0.0, 0.0)
    dropped_at = (-1, -1)
    if drop_incomplete and keep.size > DROP_INCOMPLETE_THRESHOLD:
        dropped_s = (int(total[keep[0]]) / 1e12, int(total[keep[-1]]) / 1e12)
        dropped_at = (int(keep[0]), int(keep[-1]))
        keep, dropped = keep[1:-1], 2
    ps, order, present = ps[keep], order[keep], present[keep]
    rows, cols = np.nonzero(present)
    seen = np.lexsort((order[rows, cols], rows))
    rows, cols = rows[seen], cols[seen]
    seconds = np.zeros((keep.size, len(CATEGORIES)))
    # In place and in order: each cell's sum adds its types left to right, as a dict would.
    np.add.at(seconds, (rows, _CATEGORY_INDEX[used[cols]]), ps[rows, cols] / 1e12)
    had = np.flatnonzero(present.any(axis=0))
    totals = dict(zip(used[had].tolist(), ps[:, had].sum(axis=0).tolist(), strict=True))
    if keep.size and keep[-1] - keep[0] + 1 == keep.size:  # a run of steps: a slice
        chosen = groups[int(keep[0]):int(keep[-1]) + 1]
    else:
        chosen = [groups[k] for k in keep.tolist()]
    return StepTimes(chosen, seconds, totals, dropped, dropped_s, dropped_at, index=keep)


def verdict(input_pct: float, other_pct: float, have_steps: bool) -> str:
    if not have_steps:
        return "unknown"
    if input_pct >= HIGHLY_INPUT_PCT:
        return "highly"
    if input_pct >= MODERATELY_INPUT_PCT:
        return "moderately"
    if other_pct >= MODERATELY_OTHER_PCT:
        return "potentially"
    return "not"


def one_digit(x: float) -> str:
    return f"{x:.1f}"


def input_statement(v: str, input_pct: float, other_pct: float) -> str:
    """XProf's input conclusion sentence for a verdict."""
    if v == "highly":
        return (
            f"Your program is HIGHLY input-bound because {one_digit(input_pct)}% of the total "
            "step time sampled is waiting for input. Therefore, you should first focus on "
            "reducing the input time."
        )
    if v == "moderately":
        return (
            f"Your program is MODERATELY input-bound because {one_digit(input_pct)}% of the "
            "total step time sampled is waiting for input. Therefore, you would need to "
            "reduce both the input time and other time."
        )
    if v == "potentially":
        return (
            f"Your program is POTENTIALLY input-bound because {one_digit(other_pct)}% of the "
            "total step time sampled is spent on 'All Others' time (which could be due to "
            "I/O or Python execution or both)."
        )
    if v == "not":
        return (
            f"Your program is NOT input-bound because only {one_digit(input_pct)}% of the "
            "total step time sampled is waiting for input. Therefore, you should focus on "
            "reducing other time."
        )
    return "No step time measured. Therefore we cannot tell where the performance bottleneck is."
