"""In-graph loops that hold the step: tf.map_fn, tf.while_loop, an RNN's loop over time.

TensorFlow's executor schedules every op of a loop's body once per iteration; a body of
small ops (a per-row tf.map_fn) writes no op events, so neither XProf's op table nor its
overview points at it. tfobs times the loop's iterations (`steps.in_graph_loop_s`,
tfobs.analysis.loops) and names the loop by its scope.
"""

from __future__ import annotations

import re

from tfobs.analysis.advice.padding import LOOP_ITERATIONS
from tfobs.analysis.advice.rule import PROFILER, Rule, on_gpu
from tfobs.analysis.loops import PFOR_SCOPE
from tfobs.summary import Advice, WindowSummary

GUIDES = (f"{PROFILER}: TensorFlow stats; tf.function guide (tensorflow.org/guide/function): "
          "AutoGraph transformations (loops); tf.vectorized_map "
          "(tensorflow.org/api_docs/python/tf/vectorized_map); XLA (tensorflow.org/xla); "
          "Keras RNN guide (keras.io/guides/working_with_rnns): performance optimization and "
          "cuDNN kernels")
IN_GRAPH_LOOP = Rule(
    "in_graph_loop", "steps",
    "an in-graph loop's iterations (tf.map_fn, tf.while_loop, a Python loop AutoGraph made "
    "one, an RNN's loop over time steps: executor runs past the loop's first iteration, "
    "each instant once) take >= 20 % of step time, the loop running >= 8 iterations a "
    "step; info for a Keras recurrent layer's loop",
    "each iteration pays the executor's scheduling of every op in the loop's body "
    "(microseconds an op, however little it computes): where each iteration handles one "
    "example or row of the batch (tf.map_fn, a Python for loop over a tensor that "
    "AutoGraph turned into a tf.while_loop), write that work as ops on the whole batch "
    "(reductions over axis=-1 with keepdims=True, broadcasting, tf.gather, batched "
    "matmul); where the body cannot be written batched, tf.vectorized_map(fn, elems) "
    "turns it into batched ops; where the iterations depend on one another (tf.scan, an "
    "inner optimization loop), compile the step with XLA (tf.function(jit_compile=True)) "
    "so the loop runs without per-op scheduling, or give each iteration more work (fewer, "
    "larger iterations)",
    GUIDES)
RULES = (IN_GRAPH_LOOP,)

RECURRENT_FIX = (
    "a recurrent layer runs its cell once per time step, one after another: the loop is "
    "its nature, and it costs the sequence length times each iteration's op scheduling. "
    "{device}compile the step with XLA (Model.compile(jit_compile=True), "
    "tf.function(jit_compile=True); Keras 3's jit_compile='auto' leaves XLA off on a host "
    "without a GPU) so the loop runs without per-op scheduling, or pass unroll=True for "
    "short sequences of a fixed length (no loop, more memory); else run fewer iterations "
    "or give each more work: shorter sequences ({shorter}) or larger batches, each "
    "iteration's cost being mostly fixed")
PFOR_FIX = (
    "this loop is tf.vectorized_map's own fallback: pfor has no batched form for {ops} and "
    "runs {them} once per example in a while loop over the batch (TensorFlow logs 'Using a "
    "while_loop for converting <op>' when it traces the function), so vectorizing again "
    "does not help. Write {them} in the mapped function with ops pfor vectorizes{hint}, "
    "or call tf.vectorized_map(fn, elems, fallback_to_while_loop=False), which raises an "
    "error naming each op it cannot convert; else compile the step with XLA "
    "(tf.function(jit_compile=True)) so the loop runs without per-op scheduling")
# Ops pfor falls back on, with a rewrite it vectorizes.
PFOR_HINTS = {
    "L2Loss": "tf.nn.l2_loss(x) as tf.reduce_sum(tf.square(x)) / 2, and "
              "tf.linalg.global_norm(ts) (which calls it) as tf.sqrt(tf.add_n("
              "[tf.reduce_sum(tf.square(t)) for t in ts]))",
}
# tf.nn.ctc_loss takes its dense path (ctc_loss_dense: forward and backward recursions as
# While loops over the frames) when the labels are a dense tensor; given a SparseTensor it
# runs the fused CTCLoss kernel on the CPU instead.
CTC_DENSE_SCOPE = "ctc_loss_dense"
CTC_FIX = (
    "these loops are tf.nn.ctc_loss's dense path (ctc_loss_dense), taken when the labels "
    "are a dense tensor: pass them as a tf.SparseTensor (tf.sparse.from_dense(labels), the "
    "padding value left out, with blank_index given), which runs the fused CTCLoss kernel "
    "over the whole batch with no loop on the executor; else compile the step with XLA "
    "(tf.function(jit_compile=True)) so the loops run without per-op scheduling")
_NUMBERED = re.compile(r"_\d+$")
BUCKET = "truncate them, bucket them by length"
BUCKETED = "truncate them: the pipeline already buckets them by length"
CUDNN = ("Keep Keras's LSTM and GRU on cuDNN's fused kernel, which runs the whole sequence "
         "as one op and writes no such loop (Keras 3's use_cudnn='auto' takes it where "
         "activation='tanh', recurrent_activation='sigmoid', recurrent_dropout=0, "
         "unroll=False, use_bias=True, GRU's reset_after=True, and masks are right-padded): "
         "a loop like this one in a GPU job means the layer is off it. Where cuDNN does not "
         "apply, ")

LOOP_SHARE = 0.2  # of step time
HIDDEN_OPS = 0.05  # of the loop's time in op events: less, and the op table misses it
MANY_MORE = 1.25  # the longest step's loop against the median step's, to be said


def check(s: WindowSummary) -> list[Advice]:
    st = s.steps
    if not st.count or st.mean_s <= 0 or st.in_graph_loop_s <= 0:
        return []
    share = st.in_graph_loop_s / st.mean_s
    if share < LOOP_SHARE or st.in_graph_loop_iterations < LOOP_ITERATIONS:
        return []
    n, top = st.in_graph_loop_iterations, st.in_graph_loop_iterations_max
    length = (f"about {n} iterations (up to {top})" if top >= MANY_MORE * n
              else f"{n} iterations")
    scopes = st.in_graph_loop_scopes
    op_share = st.in_graph_loop_op_s / st.in_graph_loop_s
    # A body of small ops writes few op events or none: the op table misses the loop.
    ops = ("; no op event holds that time: the body's ops are each too short to be "
           "written, so the op table does not show the loop" if op_share < HIDDEN_OPS else
           f", {100 * op_share:.0f} % of it inside op events")
    timed = (f"{length} long, taking {1e3 * st.in_graph_loop_s:.2f} ms of each "
             f"{1e3 * st.mean_s:.2f} ms step ({100 * share:.0f} %) on TensorFlow's "
             f"executor{ops}")
    evidence = {"in_graph_loop_s": st.in_graph_loop_s, "in_graph_loop_share": share,
                "in_graph_loop_op_share": op_share, "loop_iterations": float(n),
                "loop_iterations_max": float(top)}
    threshold = (f"in-graph loop iterations >= {100 * LOOP_SHARE:g} % of step time, "
                 f">= {LOOP_ITERATIONS} iterations a step (tfobs)")
    if st.in_graph_loop_recurrent:
        bucketed = any("::GroupByWindow" in x.name for x in s.input_pipeline.stages)
        fix = RECURRENT_FIX.format(device=CUDNN if on_gpu(s) else "On a CPU, ",
                                   shorter=BUCKETED if bucketed else BUCKET)
        what = ("A recurrent layer's loop over time steps" if len(scopes) < 2
                else "Recurrent layers' loops over time steps")
        return [IN_GRAPH_LOOP.advice(
            "info", f"{what} ({', '.join(scopes)}) run{'s' * (len(scopes) < 2)} in each "
            f"step, {timed}.", evidence, threshold, fix)]
    where = f" ({', '.join(scopes)})" if scopes else ""
    pfor = [x for x in scopes if x.endswith(PFOR_SCOPE)]
    if pfor:  # tf.vectorized_map's per-example fallback loops
        types = sorted({_NUMBERED.sub("", x[:-len(PFOR_SCOPE)].rsplit("/", 1)[-1])
                        for x in pfor})
        hints = [PFOR_HINTS[t] for t in types if t in PFOR_HINTS]
        fix = PFOR_FIX.format(ops=", ".join(types), them="them" if len(types) > 1 else "it",
                              hint=f" ({'; '.join(hints)})" if hints else "")
        return [IN_GRAPH_LOOP.advice(
            "warning", f"An in-graph loop (tf.vectorized_map's per-example fallback for "
            f"{', '.join(types)}: {', '.join(scopes)}) runs in each step, {timed}.",
            evidence, threshold, fix)]
    if any(CTC_DENSE_SCOPE in x for x in scopes):
        return [IN_GRAPH_LOOP.advice(
            "warning", f"In-graph loops{where} run in each step, {timed}.", evidence,
            threshold, CTC_FIX)]
    return [IN_GRAPH_LOOP.advice(
        "warning", f"An in-graph loop{where} runs in each step, {timed}.", evidence,
        threshold)]
