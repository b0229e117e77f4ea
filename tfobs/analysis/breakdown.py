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

from tfobs.analysis import eventtypes as et
from tfobs.analysis.steps import DROP_INCOMPLETE_THRESHOLD, StepGroup
from tfobs.summary import CATEGORIES

HIGHLY_INPUT_PCT = 20.0
MODERATELY_INPUT_PCT = 5.0
MODERATELY_OTHER_PCT = 3.0


def type_times(events: list[tuple[int, int, int]], begin: int, end: int) -> dict[int, int]:
    """Picoseconds per event type inside [begin, end] after flattening overlaps."""
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


def categories_of(types_ps: dict[int, int]) -> dict[str, float]:
    out = dict.fromkeys(CATEGORIES, 0.0)
    for etype, ps in types_ps.items():
        out[et.CATEGORY_OF_TYPE.get(etype, "other")] += ps / 1e12
    return out


def well_formed(types_ps: dict[int, int], has_device: bool) -> bool:
    if has_device:
        return et.DEVICE_COMPUTE_16 in types_ps or et.DEVICE_COMPUTE_32 in types_ps
    return et.HOST_COMPUTE in types_ps


def step_breakdowns(
    groups: list[StepGroup], has_device: bool, drop_incomplete: bool = True
) -> tuple[list[tuple[StepGroup, dict[int, int]]], int]:
    """Well-formed steps with their type times, XProf's first/last step dropped."""
    kept = []
    for g in groups:
        if g.duration_ps <= 0:
            continue
        types_ps = type_times(g.events, g.begin_ps, g.end_ps)
        if well_formed(types_ps, has_device):
            kept.append((g, types_ps))
    dropped = 0
    if drop_incomplete and len(kept) > DROP_INCOMPLETE_THRESHOLD:
        kept = kept[1:-1]
        dropped = 2
    return kept, dropped


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
