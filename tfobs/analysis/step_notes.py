"""What tfobs says of how a capture marks its steps, beside the steps it finds there:
markers without `_r`, step numbers that are no integer, markers inside other steps, in-graph
loops, steps of several threads that overlap in time."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

TF_LOOP_NOTE = ("the capture holds in-graph while loops (executor iterations): XProf groups "
                "by loop iteration and reports no step time; tfobs keeps the marked steps")
LOOP_OPS_NOTE = ("the capture holds functional while loops (`WhileOp-StartBody` events: a "
                 "While op run as such, each iteration a call of its body function, as "
                 "tf.nn.ctc_loss's dense recursion runs): XProf then groups no event and "
                 "reports no step time; tfobs keeps the marked steps")


def unrooted_note(count: int, name: str) -> str:
    return (f"{count} '{name}' events carry step_num but no _r stat, so "
            "neither XProf nor tfobs takes them for steps: mark each step as a root, "
            f"tf.profiler.experimental.Trace({name!r}, step_num=i, _r=1), or use "
            "tfobs.step(i)")


# The marker Keras 3's TensorBoard callback opens around each batch of its profile_batch
# range (`Trace("Profiled batch", step_num=batch)`): no `_r`, so no step to XProf.
KERAS_TENSORBOARD_MARKER = "Profiled batch"


def inferred_unrooted_note(count: int, name: str) -> str:
    """The start of the note where tfobs infers a Keras window's steps from its training
    function while would-be markers without `_r` are there (a callback's own `Trace` per
    batch, Keras's TensorBoard `profile_batch`): they are why XProf finds no step, and the
    fix is theirs."""
    if name == KERAS_TENSORBOARD_MARKER:
        return (f"no step markers with _r=1: {count} '{name}' events, Keras's "
                "TensorBoard(profile_batch=...) marking each profiled batch, carry step_num "
                "but no _r stat, so neither XProf nor tfobs takes them for steps (XProf finds "
                "none): pass tfobs.KerasCallback() to fit beside it")
    return (f"no step markers with _r=1: {count} '{name}' events carry step_num but no _r "
            "stat, so neither XProf nor tfobs takes them for steps (XProf finds none): "
            f"mark each step as a root, tf.profiler.experimental.Trace({name!r}, "
            "step_num=i, _r=1), or pass "
            "tfobs.KerasCallback() to fit")


ODD_NUMS_NOTE_START = "step markers carry a step_num that is not an integer"
# A scalar tensor's text as TensorFlow writes it for a step_num: tf.Tensor(3, shape=(), ...)
_SCALAR_TENSOR = re.compile(r"tf\.Tensor\((-?\d+)(?:\.0*)?, shape=\(\)")


def number_in(value: object) -> int | None:
    """The whole number a step_num that is no integer holds: a float with no fraction, a
    scalar tensor's text; None for anything else (a variable's text is cut at its first
    comma, before its value)."""
    number = None
    if isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and (found := _SCALAR_TENSOR.match(value)):
        digits = found.group(1)
        number = int(digits) if len(digits) <= 20 else None  # no int() of a huge text
    return number if number is not None and -(2**63) <= number < 2**63 else None


def odd_nums_note(count: int, read: int) -> str:
    how = ("tfobs reads the number each holds" if read else "tfobs numbers them by their "
           "place in the window (not every one holds a number it can read: a variable's "
           "text is cut before its value)")
    return (f"{count} {ODD_NUMS_NOTE_START} (a float, or a tensor or variable that "
            f"TensorFlow writes as its text): XProf 2.24.2 numbers every such step 0, {how}; "
            "pass a Python int (step_num=int(step))")


def nested_markers_note(taken: list[str], groups: Sequence[Any]) -> str:
    """What to say where step markers (`taken`: those that made no step of their own, less
    remote calls) lie inside other steps (`groups`, each with its `marker`), several to a
    step (an `epoch` root around its `batch` roots): the outer ones are the steps, in XProf
    and here. One inner marker per step (a job's own marker inside `tfobs.step`) is the same
    step marked twice and needs no word."""
    if not groups or len(taken) <= len(groups):
        return ""
    inner = max(set(taken), key=taken.count)
    outer = max({g.marker for g in groups}, key=[g.marker for g in groups].count)
    said = (f"{len(taken)} step markers ('{inner}') lie inside the {len(groups)} "
            f"'{outer}' steps and are timed as part of them, as XProf times them: to time "
            f"each inner '{inner}' as a step, ")
    if inner == outer:  # one name for both: which to keep is said by where, not by name
        return said + (f"keep `_r=1` on it alone and make the outer '{outer}' marker a "
                       "plain trace of another name (no `_r`; in JAX, TraceAnnotation)")
    return said + (f"make it the only step marker (`_r=1`; in JAX, StepTraceAnnotation) and "
                   f"'{outer}' a plain trace (no `_r`; TraceAnnotation)")


def concurrent_note(threads: int) -> str:
    return (f"steps of {threads} threads overlap in time: each step is timed whole, as "
            "XProf times it, so a step's time includes its waits on the other threads; "
            "'steps start every' is per thread")


def several_batches_note(batches: int, steps_found: int, stride: int, mean_s: float,
                         how: str = "") -> str:
    """The note's words where each step reads several batches: Keras's
    `steps_per_execution=k` runs k batches in one call (an execution), which XProf and
    tfobs take for one step, so a step reads k times Keras's own time per step.

    `batches`: the batches taken inside in-graph loops in the window; `steps_found`: the
    steps found there, dropped ones included; `stride`: the usual step-number stride (tfobs's
    Keras callback numbers an execution by its first batch). Silent where the batches per
    step are not near a whole number of two or more, or the stride says otherwise."""
    if steps_found < 2 or batches < 2 * steps_found:
        return ""
    k = round(batches / steps_found)
    if abs(batches / steps_found - k) > 0.1 * k or stride not in (1, k):
        return ""
    where = f"({how}: {batches} in" if how else f"in an in-graph loop ({batches} in"
    return (f"each step reads {k} batches {where} {steps_found} "
            f"steps): under Model.compile(steps_per_execution={k}) a step "
            f"here is one execution of {k} of Keras's steps, {1e3 * mean_s / k:.2f} ms per "
            "batch")

