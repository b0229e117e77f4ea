"""Padding: batches padded to their longest element, run through a loop over that length."""

from __future__ import annotations

from tfobs.analysis.advice.rule import TFDATA, Rule, steps_run
from tfobs.summary import Advice, WindowSummary

PADDED_BATCH = Rule(
    "padded_batch_loop", "steps",
    "the input pipeline pads its batches (padded_batch) without bucketing them by length, "
    "and an in-graph loop (an RNN's while loop) runs >= 8 iterations a step with >= 30 % "
    "of host op time",
    "a batch padded to its longest sequence makes the loop run over the padding too: where "
    "the lengths vary, batch sequences of similar length together "
    "(Dataset.bucket_by_sequence_length, or sorting by length within a large shuffle "
    "buffer) or cap the length; a mask keeps the padding out of the loss, not out of the "
    "loop's iterations",
    f"{TFDATA}: Dataset.bucket_by_sequence_length; Keras RNN guide "
    "(keras.io/guides/working_with_rnns): padding and masking")
RULES = (PADDED_BATCH,)

LOOP_ITERATIONS = 8  # a step's iterations of the loop, from which its length tells
LOOP_SHARE = 0.3  # of host op time in the loop's ops
_LOOP = "/while/"  # an op of a while loop's body or condition (a TF op name's scope)


def check(s: WindowSummary) -> list[Advice]:
    stages = [st.name for st in s.input_pipeline.stages]
    padded = [n for n in stages if n.rsplit("::", 1)[-1].startswith("PaddedBatch")]
    if not padded or any("::GroupByWindow" in n for n in stages) or not s.steps.count:
        return []  # bucket_by_sequence_length pads inside its windows: already by length
    loop = [o for o in s.ops.top if not o.on_device and _LOOP in o.name]
    if not loop or s.ops.host_s <= 0:
        return []
    per_step = max(o.count for o in loop) / steps_run(s)
    share = sum(o.self_s for o in loop) / s.ops.host_s
    if per_step < LOOP_ITERATIONS or share < LOOP_SHARE:
        return []
    # The loop's forward scope where the top ops hold it (its gradient's shares the path).
    scope = min(loop, key=lambda o: o.name.startswith("gradient_tape/")).name.split(_LOOP)[0]
    return [PADDED_BATCH.advice(
        "info",
        f"The pipeline pads each batch to its longest element ({padded[0]}) and the step "
        f"runs an in-graph loop about {per_step:.0f} times ({scope}: "
        f"{100 * share:.0f} % of host op time): the loop runs over the padding as well.",
        {"loop_iterations_per_step": per_step, "loop_op_share": share},
        f"padded_batch without bucket_by_sequence_length, a while loop >= "
        f"{LOOP_ITERATIONS} iterations a step with >= {100 * LOOP_SHARE:g} % of host op time "
        "(tfobs)")]
