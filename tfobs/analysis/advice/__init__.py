"""Advice: the TensorFlow performance guides' recommendations, chosen from one window's figures.

Each family module holds a table of `Rule`s (id, when it fires, the fix, the guide section)
and a `check(summary)` that returns the rules that fire, with the figures they read as
evidence and the threshold they used (XProf's where XProf has one, and then XProf's own
sentence as the message). `advise` runs every family; `RULE_IDS` (`tfobs.summary`'s) is the
bounded set of ids the `tfobs_advice_active{rule}` metric and the alert annotations use:
the rules' ids, in this table's order.
"""

from __future__ import annotations

import dataclasses

from tfobs.analysis.advice import (
    gaps,
    input_pipeline,
    keras_metrics,
    launch,
    loops,
    memory,
    multi_device,
    optimizer,
    padding,
    placement,
    precision,
    steps,
)
from tfobs.analysis.advice.rule import Rule
from tfobs.summary import RULE_IDS, SEVERITIES, Advice, WindowSummary

__all__ = ["RULES", "RULE_IDS", "SEVERITIES", "Rule", "advise", "keras_steps_per_call",
           "markdown_table", "with_advice"]

_FAMILIES = (input_pipeline, gaps, launch, placement, precision, memory, multi_device, steps,
             optimizer, padding, loops, keras_metrics)
RULES: tuple[Rule, ...] = tuple(r for f in _FAMILIES for r in f.RULES)


def advise(summary: WindowSummary) -> tuple[Advice, ...]:
    """Every rule that fires for this window, most severe first (stable within a severity);
    in a JAX job's window, fixes in JAX's terms where a rule has them."""
    out = [a for f in _FAMILIES for a in f.check(summary)]
    if any(a.code == steps.MARKERS_TIME_DISPATCH.id for a in out):
        out = [dataclasses.replace(a, fix=steps.DISPATCH_VERDICT_FIX) if a.code == "input_bound"
               else a for a in out if a.code not in steps.SUPERSEDED_BY_DISPATCH]
    if summary.environment.framework == "jax":
        by_id = {r.id: r for r in RULES}
        out = [dataclasses.replace(a, fix=by_id[a.code].jax_fix)
               if a.code in by_id and by_id[a.code].jax_fix and a.fix == by_id[a.code].fix
               else a for a in out]
        out = [dataclasses.replace(a, guide=by_id[a.code].jax_guide)
               if a.code in by_id and by_id[a.code].jax_guide else a for a in out]
    per_call = keras_steps_per_call(summary)
    if per_call > 1:
        note = MULTI_STEP_NOTE.format(n=per_call)
        out = [dataclasses.replace(a, fix=a.fix + note) if SEVERAL_PER_CALL in a.fix else a
               for a in out]
    rank = {s: i for i, s in enumerate(reversed(SEVERITIES))}
    return tuple(sorted(out, key=lambda a: rank.get(a.severity, len(rank))))


# Keras 3 runs each call of its train function as `multi_step_on_iterator`, fetching
# steps_per_execution batches in it: the fixes that suggest several steps per call say how
# many the job already runs.
KERAS_MULTI_STEP = "multi_step_on_iterator"
SEVERAL_PER_CALL = "steps_per_execution=N"
MULTI_STEP_NOTE = (
    " (each step here is one call of about {n} training steps: the job already sets "
    "steps_per_execution={n}; raise it further only for the per-call cost left once the "
    "rest is done)")


def keras_steps_per_call(summary: WindowSummary) -> int:
    """The batches a Keras step fetches per call (its steps_per_execution), where the steps
    are Keras's `multi_step_on_iterator` calls and its root prefetch was read; 0 otherwise."""
    st, ip = summary.steps, summary.input_pipeline
    if not st.count or not any(c.name == KERAS_MULTI_STEP for c in st.calls):
        return 0
    return round(ip.prefetch_fetches / st.count)


def with_advice(summary: WindowSummary) -> WindowSummary:
    return dataclasses.replace(summary, advice=advise(summary))


def markdown_table() -> str:
    """The advice table (docs/advice.md): rule id, what fires it, the fix, the guide section."""
    rows = ["| Rule id | Fires when | Fix | Guide section |", "|---|---|---|---|"]
    for r in RULES:
        fix = f"{r.fix}. JAX: {r.jax_fix}" if r.jax_fix else r.fix
        guide = f"{r.guide}. JAX: {r.jax_guide}" if r.jax_guide else r.guide
        cells = (f"`{r.id}`", r.fires_when, fix, guide)
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows)
