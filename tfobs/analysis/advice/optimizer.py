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
    "softmax) or an optimizer that updates only the rows a batch touches (SGD on its "
    "sparse gradient, tf_keras's Adagrad; Adam updates every row's moments each step, and "
    "Keras 3's Adagrad divides by sqrt(accumulator + epsilon) over every row)",
    f"{PROFILER}: TensorFlow stats (the op table); Keras optimizers "
    "(keras.io/api/optimizers)")
# A sparse gradient made dense before the optimizer: the op that asked for it, and every op
# after it (the update too), then run on every row of the table.
DENSIFIED = Rule(
    "sparse_gradient_dense", "optimizer",
    "TensorFlow made a sparse gradient (IndexedSlices) dense outside the optimizer, for an "
    "op that takes only dense tensors (UnsortedSegmentSum named for that op's input, "
    "IsFinite/x), >= 1 % of the window's op time; a warning from 5 %",
    "keep the gradient sparse: apply elementwise work to its values and rebuild it, "
    "tf.IndexedSlices(fn(g.values), g.indices, g.dense_shape) (a NaN guard, a scale, a clip "
    "by value), clip by norm with tf.clip_by_norm or tf.clip_by_global_norm (which keep "
    "IndexedSlices), and hand the optimizer the IndexedSlices so it updates only the rows "
    "the batch touched; TensorFlow's warning 'Converting sparse IndexedSlices to a dense "
    "Tensor' marks where it happens",
    "tf.IndexedSlices (tensorflow.org/api_docs/python/tf/IndexedSlices); "
    f"{PROFILER}: TensorFlow stats (the op table)")
RULES = (UPDATE, DENSIFIED)
DENSIFIED_INFO_SHARE = 0.01  # of op time: the conversion alone, its consumers cost more
DENSIFIED_WARNING_SHARE = 0.05

# Keras 3's Adagrad keeps its accumulator's update sparse but computes the step as
# gradient / sqrt(accumulator + epsilon) with the whole accumulator: every row of a table,
# each step (tf_keras's gathers the touched rows first).
KERAS3_ADAGRAD_WORDS = (
    " The update runs under Keras 3's Adagrad (scope 'adagrad/'), which computes "
    "sqrt(accumulator + epsilon) over every row of each table at every step: a sparse "
    "gradient does not keep it to the rows the batch touched.")
# A sampled softmax (or NCE) loss already reads a few rows of its output layer: sampling
# is not the fix, the optimizer that updates every row is.
SAMPLED_FIX = (
    "the loss already samples (a sampled softmax or NCE loss: its gradient for the output "
    "layer's weights and biases is sparse, IndexedSlices of the sampled rows), but the "
    "optimizer updates every row: use one that updates only the rows a batch touches (SGD "
    "on the sparse gradient; Adam updates every row's moments each step, and Keras 3's "
    "Adagrad divides by sqrt(accumulator + epsilon) over every row), or give the output "
    "layer and the Embedding such an optimizer of their own; train on larger batches "
    "(fewer updates for the same data)")
UPDATE_SHARE = 0.5  # of op time: small models under Adam spend up to a third there
STEP_SHARE = 0.3  # of the steps' time


def check(s: WindowSummary) -> list[Advice]:
    return _update(s) + _densified(s)


def _densified(s: WindowSummary) -> list[Advice]:
    """sparse_gradient_dense: an IndexedSlices gradient made dense by an op of the job's
    own before the optimizer."""
    ops = s.ops
    op_s = _op_s(s)
    share = ops.densified_s / op_s if op_s > 0 else 0.0
    if share < DENSIFIED_INFO_SHARE:
        return []
    takers = sorted({name.rsplit("/", 1)[0].rsplit("/", 1)[-1] for name in ops.densified_ops})
    per = (f", {ops.densified_count / steps_run(s):.0f} a step" if s.steps.count else "")
    return [DENSIFIED.advice(
        "warning" if share >= DENSIFIED_WARNING_SHARE else "info",
        f"TensorFlow made sparse gradients (IndexedSlices: a gather's or an Embedding's rows) "
        f"dense {ops.densified_count} times in the window{per}, for ops that take only "
        f"dense tensors ({', '.join(takers)}: {', '.join(ops.densified_ops)}): "
        f"{1e3 * ops.densified_s:.1f} ms of op time ({100 * share:.1f} %) to build them, "
        "and those ops and everything after them (the optimizer's update too) then run on "
        "every row of the table, not the rows the batch touched.",
        {"densified_s": ops.densified_s, "densified_share": share,
         "densified_count": float(ops.densified_count)},
        f"sparse gradients made dense outside the optimizer >= "
        f"{100 * DENSIFIED_INFO_SHARE:g} % of op time (tfobs); a warning from "
        f"{100 * DENSIFIED_WARNING_SHARE:g} %")]


def _update(s: WindowSummary) -> list[Advice]:
    ops = s.ops
    op_s = _op_s(s)
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
    if s.steps.count and ops.optimizer_s / steps_run(s) > step_s / s.steps.count:
        # Op time counts each thread's ops: an update run on several cores side by side
        # sums to more than the step's wall time.
        per += (f" of op time, summed over the threads running its ops side by side: more "
                f"than the {1e3 * step_s / s.steps.count:.2f} ms step")
    densify = ops.optimizer_densify_s / ops.optimizer_s
    sampled = ", ".join(ops.candidate_samplers)
    whose = ("an Embedding's or the sampled output layer's gradient" if sampled
             else "an Embedding's gradient")
    dense = (f" {100 * densify:.0f} % of it makes sparse gradients dense "
             f"(UnsortedSegmentSum: {whose} turned into a whole-table update)."
             if densify >= 0.05 else "")
    dense += KERAS3_ADAGRAD_WORDS if ops.optimizer_scopes[:1] == ("adagrad",) else ""
    fix = ""
    if sampled:  # the loss samples already: its output layer's update is what costs
        dense += (f" The loss already samples its classes ({sampled}): it reads a few rows "
                  "of the output layer, and the optimizer still updates all of them.")
        fix = SAMPLED_FIX
    return [UPDATE.advice(
        "warning",
        f"The optimizer's update takes {100 * share:.0f} % of op time "
        f"({1e3 * ops.optimizer_s:.1f} ms in the window{per}).{dense}",
        {"optimizer_share": share, "optimizer_s": ops.optimizer_s,
         "optimizer_densify_share": densify},
        f"optimizer update >= {100 * UPDATE_SHARE:g} % of op time and >= "
        f"{100 * STEP_SHARE:g} % of step time (tfobs)", fix=fix)]


def _op_s(s: WindowSummary) -> float:
    """The window's op time, tf.data's iterators left out."""
    return (s.ops.host_s + s.ops.device_s
            - sum(st.self_s for st in s.input_pipeline.stages))
