"""The optimizer's update against the step's op time.

An optimizer's cost grows with the parameters it updates, not with the batch: a large
Embedding or output layer under Adam, on small batches, spends most of each step on the
update (Adam decays every row's moments each step, and Keras makes an Embedding's sparse
gradient dense for it). XProf shows those ops in its op table and says nothing; tfobs sums
them by the optimizer's name scope (`ops.optimizer_s`).
"""

from __future__ import annotations

from tfobs.analysis.advice.rule import PROFILER, Rule, step_total_s, steps_run
from tfobs.summary import Advice, WindowSummary

UPDATE = Rule(
    "optimizer_update", "optimizer",
    "the optimizer's update ops (its name scope, fused ResourceApply* kernels; tf.distribute's "
    "all-reduce left out) >= 50 % of the window's op time, tf.data's iterators left out, "
    "and >= 30 % of the steps' time",
    "the update costs per parameter, not per example: train on larger batches (fewer "
    "updates for the same data), compile the step with XLA (tf.function(jit_compile=True), "
    "Model.compile(jit_compile=True)) so the update's elementwise ops fuse, and for a large "
    "Embedding or output layer use fewer rows (hashing, a smaller vocabulary, sampled "
    "softmax) or an optimizer that updates only the rows a batch touches (SGD or Adagrad "
    "on its sparse gradient; Adam updates every row's moments each step)",
    f"{PROFILER}: TensorFlow stats (the op table); Keras optimizers "
    "(keras.io/api/optimizers)")
RULES = (UPDATE,)

UPDATE_SHARE = 0.5  # of op time: small models under Adam spend up to a third there
STEP_SHARE = 0.3  # of the steps' time


def check(s: WindowSummary) -> list[Advice]:
    ops = s.ops
    tfdata_s = sum(st.self_s for st in s.input_pipeline.stages)
    op_s = ops.host_s + ops.device_s - tfdata_s
    if ops.optimizer_s <= 0 or op_s <= 0 or ops.optimizer_s / op_s < UPDATE_SHARE:
        return []
    # Half of a tiny step's few ops is no cost worth a change: the update must weigh on
    # the step itself too.
    step_s = step_total_s(s)
    if step_s > 0 and ops.optimizer_s < STEP_SHARE * step_s:
        return []
    share = ops.optimizer_s / op_s
    per = (f", {1e3 * ops.optimizer_s / steps_run(s):.2f} ms per step" if s.steps.count
           else "")
    densify = ops.optimizer_densify_s / ops.optimizer_s
    dense = (f" {100 * densify:.0f} % of it makes sparse gradients dense "
             "(UnsortedSegmentSum: an Embedding's gradient turned into a whole-table update)."
             if densify >= 0.05 else "")
    return [UPDATE.advice(
        "warning",
        f"The optimizer's update takes {100 * share:.0f} % of op time "
        f"({1e3 * ops.optimizer_s:.1f} ms in the window{per}).{dense}",
        {"optimizer_share": share, "optimizer_s": ops.optimizer_s,
         "optimizer_densify_share": densify},
        f"optimizer update >= {100 * UPDATE_SHARE:g} % of op time and >= "
        f"{100 * STEP_SHARE:g} % of step time (tfobs)")]
