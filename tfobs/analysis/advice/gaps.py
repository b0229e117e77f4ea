"""Time outside the device's work: XProf's 'All Others' and host time between steps.

'All Others' is XProf's statement and thresholds (3 % moderate, 15 % high of step time).
XProf leaves it out when its input verdict is POTENTIALLY input-bound (a verdict that rests
on 'All Others' alone); tfobs states it there too, since its fix (Python out of the step),
not the input pipeline's, is the one that verdict calls for. The gap
between one step's end marker and the next one's start (Keras callbacks, metrics, Python
between steps) is tfobs's figure: a gap in every step (per-batch work) is `step_gap`; a few
long pauses among steps that otherwise run back to back (an epoch's end, evaluation, a
checkpoint) are `step_pause`, whose fix is another.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

import numpy as np

from tfobs.analysis.advice.rule import (
    GPU,
    PROFILER,
    TFDATA,
    Rule,
    category_advice,
    iterator_each_step,
    other_thread_share,
    runtime_holds_other,
    step_field,
    step_gaps,
    step_total_s,
)
from tfobs.analysis.breakdown import MODERATELY_INPUT_PCT
from tfobs.analysis.calls import KERAS_JAX_TRAIN_STEP, KERAS_TF_PREDICT
from tfobs.analysis.xla_cpu_work import DISPATCH_NOTE_START
from tfobs.summary import Advice, Step, WindowSummary

ALL_OTHERS = Rule(
    "all_others_bound", "gaps between steps",
    "'All Others' >= 3 % of step time (XProf: moderate >= 3 %, high >= 15 %)",
    "move Python work out of the step: numpy preprocessing into tf.data (Dataset.map) or "
    "into the tf.function as TensorFlow ops, eager ops into tf.function, and run several "
    "steps per call (Keras: Model.compile(steps_per_execution=N); a loop of your own: a "
    "tf.function that runs several steps over the iterator)",
    f"{PROFILER}: Overview page (step-time graph); {GPU}: 2. Debug the performance of one GPU",
    jax_fix=(
        "move Python work out of the step: build the next batches ahead of it (a prefetching "
        "loader: tf.data or Grain with prefetch, or a background thread), keep the whole "
        "update in one jax.jit function, and read results on the host (float(loss), "
        "np.asarray) every N steps, not every step"))
STEP_GAP = Rule(
    "step_gap", "gaps between steps",
    "host time between one step's end and the next one's start >= 10 % of the step period "
    "(critical from 50 %); pauses of 10x the typical gap holding half of it are named, with "
    "step_pause's fix first",
    "lighten or drop per-batch Keras callbacks and metrics, or run several steps per call "
    "with Model.compile(steps_per_execution=N); in a hand-written loop (train_on_batch, "
    "tfobs.step), move the Python between calls (numpy batch building, predict_on_batch, "
    "logging) into the tf.function step or a tf.data pipeline",
    f"{GPU}: 2. Debug the performance of one GPU (gaps between steps); "
    f"{PROFILER}: Best practices (steps_per_execution)",
    jax_fix=(
        "move the Python between steps out of the loop: log and read device values "
        "(float(loss), jax.device_get) every N steps, build batches ahead on a loader thread, "
        "and run several steps per call where the loop allows (jax.lax.scan over steps inside "
        "one jax.jit)"))
STEP_PAUSE = Rule(
    "step_pause", "gaps between steps",
    "host time between steps >= 10 % of the step period, held by a few long pauses while "
    "the typical gap is under 10 % (epoch ends, evaluation, checkpoints); a warning from "
    "25 %",
    "find what runs in the pause (epoch-end callbacks, validation, checkpoint writes, a "
    "dataset iterator made anew each epoch) and run it less often or off the training thread",
    f"{GPU}: 2. Debug the performance of one GPU (gaps between steps)")
CHECKPOINT = Rule(
    "checkpoint_writes", "gaps between steps",
    "checkpoint writes (SaveV2, MergeV2Checkpoints) on the thread that runs the steps >= 5 % "
    "of the window, or the steps that save one longer than the typical step by >= 5 % of "
    "all step time (the save's Python and eager variable reads): training waits for each "
    "save",
    "write checkpoints less often (tf.train.CheckpointManager(checkpoint_interval=N) with "
    "save(check_interval=True), tf_keras ModelCheckpoint(save_freq=N)), or let the write "
    "run beside training: tf.train.CheckpointOptions(experimental_enable_async_checkpoint="
    "True); keep the checkpoint folder on a fast local disk",
    "Training checkpoints guide (tensorflow.org/guide/checkpoint); tf.train.CheckpointOptions "
    "(experimental_enable_async_checkpoint)",
    jax_fix=(
        "save less often (orbax CheckpointManager with "
        "CheckpointManagerOptions(save_interval_steps=N)) and keep the saves asynchronous "
        "(orbax's default): a save waits for the one before it to finish, and its writer "
        "thread's Python shares the GIL with the steps; keep the checkpoint folder on a fast "
        "local disk"))
INPUT_OUTSIDE = Rule(
    "input_outside_steps", "gaps between steps",
    "input wait (IteratorGetNext, or tfobs's event around a JAX job's tf.data next()) "
    "between the step markers >= 5 % of the step period: a "
    "batch fetched outside the marked step, which the breakdown and the input-bound verdict "
    "do not count",
    "fetch the batch inside the marked step: `with tfobs.step(i): train_step(next(it))` "
    "rather than marking inside `for batch in dataset:`; the input rules then see the wait",
    f"{PROFILER}: Input pipeline analyzer; {TFDATA}: Prefetching")
SUMMARY_WRITES = Rule(
    "summary_writes", "gaps between steps",
    "tf.summary writes (scalars, histograms, in the step's graph or a callback's) >= 5 % of "
    "the window",
    "write summaries every N steps, not every step: wrap them in "
    "tf.summary.record_if(lambda: step % N == 0) and keep histograms rare; with Keras's "
    "TensorBoard callback, update_freq='epoch' (or N batches) and histogram_freq=0 or a few "
    "epochs",
    "TensorBoard's tf.summary guide (tensorflow.org/api_docs/python/tf/summary/record_if); "
    "Keras TensorBoard callback (keras.io/api/callbacks/tensorboard)")
PRINT = Rule(
    "tf_print", "gaps between steps",
    "tf.print's ops (StringFormat, PrintV2) >= 5 % of step time",
    "print every N steps, not every step: inside the tf.function, `if step % N == 0: "
    "tf.print(...)` on a tensor step (AutoGraph makes it a tf.cond), or return the values "
    "and print them from Python every N steps; take debugging prints out once done",
    "tf.print (tensorflow.org/api_docs/python/tf/print); tf.function guide "
    "(tensorflow.org/guide/function): AutoGraph conditionals")
LONG_STEPS = Rule(
    "long_steps", "gaps between steps",
    "a few steps (<= 25 % of them, or a third every Nth step; >= 3x the typical step) hold "
    ">= 30 % of the steps' time beyond typical steps, and no input wait, checkpoint save or "
    "retrace explains it",
    "find what those steps run that the others do not (an evaluation, logging, a host sync "
    "or a save inside the marked step: open the trace at those step numbers) and move it out "
    "of the step or run it less often; judge the step itself by the typical steps",
    f"{GPU}: 2. Debug the performance of one GPU (step-time graph)")
RULES = (ALL_OTHERS, STEP_GAP, STEP_PAUSE, CHECKPOINT, SUMMARY_WRITES, PRINT, LONG_STEPS,
         INPUT_OUTSIDE)
LONG_FACTOR = 3.0  # of the median step
LONG_MAX_SHARE = 0.25  # of the steps: more than that is no "few"
# ... unless they come every Nth step (N >= 3, evenly spaced step numbers): work the loop
# runs every 4th step falls on 3 of a window's 9 to 11 kept steps (XProf drops the first
# and last), a third. Uneven long steps past a quarter are the host's jitter.
LONG_MAX_PART_PERIODIC = 3
LONG_EXCESS_SHARE = 0.3  # of the steps' time
# model.predict called inside some steps of a loop of one's own.
PREDICT_IN_STEPS_WORDS = (
    " Keras's predict function ({name}) ran {count} times in the window ({took} in all, "
    "against {excess} of excess in these steps): model.predict called from the loop, most "
    "likely in these steps; each call on NumPy arrays builds a new tf.data pipeline (its "
    "functions traced again) and runs one function call per batch{setup}.")
PREDICT_SETUP_WORDS = ", and that set-up, not the model's math, is most of the excess"
PREDICT_IN_LOOP_FIX = (
    "score data inside the training loop without model.predict: call the model in a "
    "tf.function on a tensor (infer = tf.function(lambda x: model(x, training=False)); "
    "infer(tf.constant(x)): one call, no pipeline built), or model.predict_on_batch(x) for "
    "one batch, and run it less often; judge the step itself by the typical steps")
LONG_MIN_STEPS = 8
# A tf.cond branch's scope in an op's name inside a tf.function (`cond/then/_0/...`,
# `cond/else/_1/...`): where the long steps' longest ops lie in one the typical steps'
# do not, the long steps are the steps that take that branch.
_COND_BRANCH = re.compile(r"^(.*?/(?:then|else)/_\d+)(?:/|$)")
COND_BRANCH_FIX = (
    "those steps take the branch {branch} of a tf.cond inside the step (a condition on the "
    "step count or the data: extra work every N steps) and the typical steps do not: make "
    "that branch cheaper or take it less often (a larger N); a tf.function of its own, "
    "called from Python every N steps outside the marked step, keeps it out of the step's "
    "averages but not out of the training time; judge the step itself by the typical steps")
# Where every step ran the same compiled programs (a host-only JAX job's XLA CPU ops), the
# long steps ran nothing the others did not: the same ops took longer.
SAME_PROGRAM_WORDS = (
    "The same compiled program ran in every step; its ops took longer in these steps{spread}: "
    "host contention (other processes or threads on the cores) or data-dependent ops.")
SAME_PROGRAM_FIX = (
    "the same compiled program ran in every step and its ops took longer in the long ones: "
    "check the host's load while the job runs (other processes on its cores: top, uptime); "
    "where several thread pools share the cores (XLA's Eigen pool, BLAS or LAPACK's, a data "
    "loader's), cap or pin them (XLA_FLAGS=--xla_cpu_multi_thread_eigen=false, "
    "OPENBLAS_NUM_THREADS or OMP_NUM_THREADS, taskset), or give the job cores of its own; "
    "judge the step itself by the typical steps")
GROWN_OP_FIX = (
    "{op} holds most of the long steps' excess while the same compiled program ran in every "
    "step: its time varies with its input (an iterative decomposition such as svd or eigh "
    "converging slowly on some matrices: a better-conditioned input or a cheaper formulation "
    "bounds it) or with the cores it gets (LAPACK's or XLA's threads contending with other "
    "processes or thread pools: check the host's load, cap the pools with "
    "XLA_FLAGS=--xla_cpu_multi_thread_eigen=false and OPENBLAS_NUM_THREADS or "
    "OMP_NUM_THREADS, pin the job with taskset); judge the step itself by the typical steps")
GROWN_OP_SHARE = 0.5  # of a long step's excess: one op's growth that is "most of it"
# The long steps' ops (their top events) grew by under this share of a long step's excess:
# the program's ops took no longer there, so the excess lies outside them (Python or other
# host work of those steps' own: a gc.collect() every fifth step, 108 ms against 0.85 ms
# of ops).
OUTSIDE_OPS_SHARE = 0.25
OUTSIDE_PROGRAM_WORDS = (
    "The same compiled program ran in every step and its ops took no longer in these steps "
    "({in_long} of ops against {in_typical} in the typical step): the excess lies outside "
    "the program, in host work of those steps' own{python}.")
OUTSIDE_PROGRAM_FIX = (
    "those steps run host work outside the compiled program that the others do not: open "
    "the trace at those step numbers (with the Python tracer on, the step's Python "
    "functions name it: a gc.collect(), an evaluation, a save or a host sync every N "
    "steps) and move it out of the step or run it less often; judge the step itself by the "
    "typical steps")
JAX_WAITED_SHARE = 0.25  # of the step period: a JAX typical step that waits for its work
# of the typical step: its compiled program's ops inside the marker (it waited for them)
JAX_OPS_HELD_SHARE = 0.25
LONG_MIN_EXCESS_S = 1e-3  # a window's worth: microsecond steps' jitter is no finding
PRINT_SHARE = 0.05  # of step time
SUMMARY_SHARE = 0.05  # of the window
PAUSE_WARNING_SHARE = 0.25  # of the step period: step_pause is a warning from here

GAP_SHARE = 0.10
GAP_CRITICAL_SHARE = 0.5  # of the step period: most of the wall time is outside the steps
PAUSE_FACTOR = 10  # a gap this many times the typical one is a pause
CHECKPOINT_SHARE = 0.05  # of the window (write ops) or of all step time (the saving steps)
# 'All Others' held by the steps that save a checkpoint: the save's Python, not the step's.
CHECKPOINT_OTHER_SHARE = 0.5
# The share of the gaps' time in which no line of the host plane has any event, from which
# the gaps hold nothing the capture shows. On the test captures: 95-100 % where a sleep or
# a callback's untraced Python fills them, at most 73 % where the loop's own work shows.
EMPTY_GAP_IDLE = 0.9
# The calls of Keras's fit loop (Keras 3 on TensorFlow, tf_keras, Keras 3 on JAX): its
# per-batch callbacks and logs run in the gaps, as Python the tracer alone shows.
KERAS_FIT_CALLS = ("multi_step_on_iterator", "one_step_on_iterator", "train_function",
                   KERAS_JAX_TRAIN_STEP)

RUNTIME_FIX = (
    "most of that 'All Others' is the step's own compiled work, which XLA's CPU runtime ran "
    "on threads XProf links to no step: that share of the step is computation, not "
    "Python (python_in_step, where listed, sizes the step's own Python). Make the "
    "computation cheaper as for host compute (larger batches per call, fewer and fused "
    "ops: one jax.jit around the whole update), then move the Python that is left out of "
    "the step")

# 'All Others' mostly TensorFlow converting NumPy arrays or Python values into tensors
# inside the steps (`steps.tensor_conversion_s`: a loop handing NumPy batches to its step, or
# assigning them to variables with `v.assign(array)`): a copy per call on the step's thread.
CONVERSION_OTHER_SHARE = 0.5
CONVERSION_STEP_SHARE = 0.05  # and this much of the step at least
CONVERSION_FIX = (
    "hand the step tensors that are ready, not NumPy arrays: feed it from tf.data "
    "(tf.data.Dataset.from_tensor_slices(...).batch(...).prefetch(2), iterated in the loop "
    "or passed to the tf.function), which makes the next batch's tensor while the step "
    "runs; where the step reads its batch from tf.Variables assigned from NumPy every step "
    "(v.assign(array)), pass the batch to the tf.function as an argument from tf.data "
    "instead; data that fits in memory: tf.convert_to_tensor once before the loop and "
    "slice the tensor in the step")
# 'All Others' of a loop that makes a dataset iterator in every step: the Python that
# builds each iterator and drops the last one runs in the step, beside the ops.
ITERATOR_FIX = (
    "the steps make a new dataset iterator each and drop the last one "
    "(tfdata_iterator_per_step): the Python that builds and deletes them runs in every "
    "step, and goes with the iterator ops' own time once one iterator is made before the "
    "loop; do that first, then judge 'All Others' again")
# XProf's sentence (kAllOthersPythonExplanation), after the percentage.
# 'All Others' under another Python thread's GIL (python_thread_contention): moving the
# step's Python to a background thread, the usual fix, adds to the cause.
CONTENTION_FIX = (
    "another Python thread runs Python through most of the steps (python_thread_contention): "
    "the step's Python waits for the GIL there; quiet that thread first (block or sleep "
    "instead of polling; run its work less often or in another process), then judge 'All "
    "Others' again")

# 'All Others' held by every Nth step: work the loop runs every N steps inside the marker
# (`if step % N == 0: model.save_weights(...)`, an evaluation, a log), no Python of every
# step.
PERIODIC_MIN_STEPS = 6
PERIODIC_OTHER_SHARE = 0.5  # of all the steps' 'All Others'
PERIODIC_STEP_SHARE = 0.2  # of the typical step, each time
PERIODIC_OTHER_FIX = (
    "find what the loop runs every {n} steps (`if step % {n} == 0:`: model.save_weights or "
    "a checkpoint, an evaluation, a metrics log) and make it cheaper or rarer: save less "
    "often, or with tf.train.Checkpoint and CheckpointOptions(enable_async=True) (Keras 3's "
    "save_weights writes its .weights.h5 from Python on the training thread), evaluate "
    "on fewer batches, log scalars kept on the device; moving the step's own Python out "
    "does not touch it")
ALL_OTHERS_TEXT = (" % of the total step time sampled is spent on 'All Others' time. "
                   "This could be due to Python execution overhead.")


def check(s: WindowSummary) -> list[Advice]:
    out: list[Advice] = []
    # A coordinator's steps are all 'other' (waiting for its workers): no Python to move.
    if s.steps.method != "markers_remote":
        found = category_advice(ALL_OTHERS, s, "other", "'All Others'", ALL_OTHERS_TEXT)
        if found and other_thread_share(s.steps):  # the step's Python waits for the GIL
            found = dataclasses.replace(found, fix=CONTENTION_FIX)
        elif found and iterator_each_step(s):  # a new iterator made in each step
            found = dataclasses.replace(found, fix=ITERATOR_FIX)
        out += ([_periodic_in_other(s, _saving_in_other(
            s, _conversion_in_other(s, _runtime_in_other(s, found))))] if found else [])
    saving = _checkpoint(s)
    # The save that explains 'All Others' comes before it: its fix is the one to act on.
    out = saving + out if out and out[0].fix == _checkpoint_fix(s) else out + saving
    gap = _gap(s)
    if gap is not None:
        out.append(gap)
    out += _summaries(s)
    out += _prints(s)
    out += _long_steps(s)
    period = s.steps.interval_s
    outside = s.steps.input_between_s
    if period > 0 and 100 * outside / period >= MODERATELY_INPUT_PCT:
        out.append(INPUT_OUTSIDE.advice(
            "warning",
            f"{1e3 * outside:.2f} ms of input wait per step ({100 * outside / period:.1f} % of "
            f"the {1e3 * period:.2f} ms step period) lies between the step markers: the "
            "breakdown and the input-bound verdict do not count it.",
            {"input_between_s": outside, "period_s": period,
             "input_between_pct": 100 * outside / period},
            f"input wait between steps >= {MODERATELY_INPUT_PCT:g} % of the step period "
            "(XProf's moderately input-bound share)"))
    return out


def _runtime_in_other(s: WindowSummary, found: Advice) -> Advice:
    """all_others_bound where most of 'All Others' is compiled work XProf links to no step:
    the message says how much of it, and the fix is the computation's."""
    if not runtime_holds_other(s):
        return found
    other, runtime = s.breakdown_s["other"], s.steps.work_in_other_s
    return dataclasses.replace(
        found,
        message=(f"{found.message} Of it, {1e3 * runtime:.2f} ms per step (of "
                 f"{1e3 * other:.2f} ms) is XLA's CPU runtime running the step's compiled "
                 "work on threads XProf links to no step."),
        evidence={**found.evidence, "work_in_other_s": runtime, "other_s": other},
        fix=RUNTIME_FIX)


def _conversion_in_other(s: WindowSummary, found: Advice) -> Advice:
    """all_others_bound where most of 'All Others' is TensorFlow converting NumPy arrays
    or Python values into tensors in the steps: the message says how much, and the fix is
    to hand the step tensors."""
    other, conversion = s.breakdown_s.get("other", 0.0), s.steps.tensor_conversion_s
    if (other <= 0 or conversion < CONVERSION_OTHER_SHARE * other
            or conversion < CONVERSION_STEP_SHARE * s.steps.mean_s
            or found.fix == CONTENTION_FIX):
        return found
    return dataclasses.replace(
        found,
        message=(f"{found.message} In the steps, {1e3 * conversion:.2f} ms per step (against "
                 f"{1e3 * other:.2f} ms of 'All Others') is TensorFlow converting NumPy "
                 "arrays or Python values into tensors (convert_to_tensor, tf.constant: a "
                 "copy of each array per call)."),
        evidence={**found.evidence, "tensor_conversion_s": conversion, "other_s": other},
        fix=CONVERSION_FIX)


def _saving_in_other(s: WindowSummary, found: Advice) -> Advice:
    """all_others_bound where most of 'All Others' lies in the steps that save a checkpoint:
    the message says how much, and the fix is the checkpoint's."""
    other = step_total_s(s, "other")
    held = s.ops.checkpoint_steps_other_s
    if other <= 0 or held < CHECKPOINT_OTHER_SHARE * other:
        return found
    return dataclasses.replace(
        found,
        message=(f"{found.message} Of it, {1e3 * held:.1f} ms ({100 * held / other:.0f} %) "
                 f"is in the {s.ops.checkpoint_steps} step(s) that save a checkpoint: the "
                 "save's own Python, not the step's (checkpoint_writes)."),
        evidence={**found.evidence, "checkpoint_steps_other_s": held, "other_total_s": other},
        fix=_checkpoint_fix(s))


def _periodic_in_other(s: WindowSummary, found: Advice) -> Advice:
    """all_others_bound where most of 'All Others' lies in every Nth step (a weight save, an
    evaluation or a log the loop runs `if step % N == 0` inside the marker): the message
    names those steps and what each costs, and the fix is the periodic work's, not the
    per-step Python's. Left to the rules that already name such steps (a checkpoint's)."""
    if found.fix != ALL_OTHERS.fix:
        return found
    periodic = periodic_other_steps(s)
    if periodic is None:
        return found
    period, nums, excess, held, other = periodic
    shown = ", ".join(str(n) for n in nums[:8]) + (", ..." if len(nums) > 8 else "")
    return dataclasses.replace(
        found,
        message=(f"{found.message} Of it, {1e3 * held:.1f} ms ({100 * held / other:.0f} %) "
                 f"is in every {period}th step (steps {shown}): {1e3 * excess:.1f} ms "
                 "beyond the other steps' 'All Others' each time, work the loop runs every "
                 f"{period} steps inside the step marker, not Python of every step."),
        evidence={**found.evidence, "periodic_every": float(period),
                  "periodic_other_s": held, "periodic_excess_s": excess,
                  "other_total_s": other},
        fix=PERIODIC_OTHER_FIX.format(n=period))


def periodic_other_steps(s: WindowSummary
                         ) -> tuple[int, list[int], float, float, float] | None:
    """(N, the step numbers, their mean 'All Others' beyond the median step's, the 'All
    Others' they hold, all steps' 'All Others') where the steps whose 'All Others' stands
    out are every Nth step of the kept ones (N >= 2, every such step among them, at least
    two) and hold PERIODIC_OTHER_SHARE of it; None otherwise."""
    items = s.steps.items
    if len(items) < PERIODIC_MIN_STEPS:
        return None
    nums = [st.step_num for st in items]
    if len(set(nums)) != len(nums):
        return None
    other = np.fromiter((st.breakdown_s.get("other", 0.0) for st in items), float, len(items))
    total = float(other.sum())
    excess = other - float(np.median(other))
    if total <= 0 or excess.max() <= 0:
        return None
    picked = np.flatnonzero(excess >= 0.5 * excess.max()).tolist()
    if len(picked) < 2 or 2 * len(picked) > len(items):
        return None
    # As columns: a window of thousands of steps (numbers past int64 stay Python ints).
    num = np.array(nums)
    period = int(np.gcd.reduce(np.diff(num[picked])))
    if period < 2:
        return None
    beat = (num - num[picked[0]]) % period == 0
    beat[picked] = False
    if beat.any():  # a step on the beat whose 'All Others' does not stand out
        return None
    held = float(other[picked].sum())
    mean_excess = float(excess[picked].mean())
    typical = float(np.median([st.duration_s for st in items]))
    if held < PERIODIC_OTHER_SHARE * total or mean_excess < PERIODIC_STEP_SHARE * typical:
        return None
    return period, [nums[k] for k in picked], mean_excess, held, total


def _checkpoint_fix(s: WindowSummary) -> str:
    """checkpoint_writes' fix in the job's framework's terms."""
    return CHECKPOINT.jax_fix if s.environment.framework == "jax" else CHECKPOINT.fix


def _checkpoint(s: WindowSummary) -> list[Advice]:
    """Checkpoint writes the steps' thread waited for, against the window, and what the
    steps that save one take beyond the typical step, against all step time."""
    seconds, writes = s.ops.checkpoint_s, s.ops.checkpoint_writes
    share = seconds / s.duration_s if s.duration_s > 0 else 0.0
    step_total = step_total_s(s)
    excess, saving = s.ops.checkpoint_steps_excess_s, s.ops.checkpoint_steps
    excess_share = excess / step_total if step_total > 0 else 0.0
    if seconds <= 0 or max(share, excess_share) < CHECKPOINT_SHARE:
        return []
    around = ("the checkpoint library's Python" if s.environment.framework == "jax"
              else "its write ops, and the save's Python and eager variable reads around them")
    steps_cost = (f" The {saving} step(s) that save one run {1e3 * excess / saving:.1f} ms "
                  f"longer each than the typical step: {1e3 * excess:.1f} ms, "
                  f"{100 * excess_share:.0f} % of the steps' time ({around})."
                  if saving and excess > 0 else "")
    return [CHECKPOINT.advice(
        "warning",
        f"Checkpoint writes{' on the training thread' if s.steps.count else ''} took "
        f"{1e3 * seconds:.1f} ms of the "
        f"{s.duration_s:.2f} s window ({100 * share:.1f} %): {writes} writes, "
        f"{1e3 * seconds / max(writes, 1):.1f} ms each.{steps_cost}",
        {"checkpoint_s": seconds, "checkpoint_writes": float(writes),
         "checkpoint_share": share, "checkpoint_steps": float(saving),
         "checkpoint_steps_excess_s": excess, "checkpoint_steps_share": excess_share},
        f"checkpoint writes >= {100 * CHECKPOINT_SHARE:g} % of the window, or the saving "
        f"steps' excess >= {100 * CHECKPOINT_SHARE:g} % of step time (tfobs)")]


def _summaries(s: WindowSummary) -> list[Advice]:
    """tf.summary writes against the window (XProf counts them as host compute)."""
    seconds = s.ops.summary_writes_s
    if seconds <= 0 or s.duration_s <= 0 or seconds / s.duration_s < SUMMARY_SHARE:
        return []
    share = seconds / s.duration_s
    per = f", {1e3 * seconds / s.steps.count:.2f} ms per step" if s.steps.count else ""
    return [SUMMARY_WRITES.advice(
        "warning",
        f"tf.summary writes took {1e3 * seconds:.1f} ms of the {s.duration_s:.2f} s window "
        f"({100 * share:.1f} %{per}): summaries written often.",
        {"summary_writes_s": seconds, "summary_writes_share": share},
        f"tf.summary writes >= {100 * SUMMARY_SHARE:g} % of the window (tfobs)")]


def _every_nth(items: Sequence[Step], at: np.ndarray) -> bool:
    """Whether the steps `at` (2 or more) are every Nth step, N >= 3: evenly spaced numbers."""
    gaps = np.diff([items[k].step_num for k in at.tolist()])
    return bool(gaps.size) and int(gaps.min()) == int(gaps.max()) >= 3


def _long_steps(s: WindowSummary) -> list[Advice]:
    """A few steps far longer than the typical one that hold much of the time: the window's
    averages mix two kinds of step, and what the long ones run is the finding."""
    items = s.steps.items
    if len(items) < LONG_MIN_STEPS:
        return []
    durations = step_field(s.steps, "duration_s")
    typical = float(np.median(durations))
    # A JAX step returns once dispatched and the step that reads a value waits for the
    # ones before it (float(loss) every N steps): uneven markers are that, not the steps.
    # Such typical steps are dispatch alone, a sliver of the period; a typical step that
    # waits for its own work (block_until_ready) holds most of it, and a long step there
    # runs something the others do not (an evaluation every N steps).
    # The mean period holds the long steps themselves: typical steps that hold their own
    # compiled work (their ops inside the marker) waited for it, however long the others.
    if (s.environment.framework == "jax" and typical < JAX_WAITED_SHARE * s.steps.interval_s
            and not _typical_steps_hold_their_ops(s, durations, typical)):
        return []
    long = np.flatnonzero(durations >= LONG_FACTOR * typical)
    total = float(durations.sum())
    if not long.size or total <= 0 or (long.size > LONG_MAX_SHARE * len(items) and (
            long.size * LONG_MAX_PART_PERIODIC > len(items) or not _every_nth(items, long))):
        return []
    excess = float(durations[long].sum()) - long.size * typical
    if excess < LONG_EXCESS_SHARE * total or excess < LONG_MIN_EXCESS_S:
        return []
    # Where the excess is a category a rule already reads (the input wait of a pipeline
    # refilling, a checkpoint save, a function traced or compiled again), that rule says it.
    by_category = {c: float(sum(items[k].breakdown_s.get(c, 0.0) for k in long.tolist()))
                   - long.size * float(np.median([st.breakdown_s.get(c, 0.0) for st in items]))
                   for c in ("input", "host_compute", "device_compute", "other")}
    explained = max(by_category["input"], s.ops.checkpoint_steps_excess_s,
                    s.ops.graph_building_s + s.ops.graph_instantiation_s)
    if explained >= 0.5 * excess:
        return []
    where = max(by_category, key=by_category.__getitem__)
    label = {"input": "input wait", "host_compute": "host compute",
             "device_compute": "device compute", "other": "'All Others' (Python)"}[where]
    nums = ", ".join(str(items[k].step_num) for k in long.tolist()[:8])
    more = ", ..." if long.size > 8 else ""
    branch = _long_cond_branch(s, long.tolist())
    taken = (f" Their longest ops run in a tf.cond branch ({branch}) that the typical steps "
             "do not take." if branch else "")
    evidence = {"long_steps": float(long.size), "typical_step_s": typical,
                "long_excess_s": excess, "long_excess_share": excess / total}
    fix = COND_BRANCH_FIX.format(branch=branch) if branch else ""
    predict = next((c for c in s.steps.calls if c.name == KERAS_TF_PREDICT
                    and c.source == "python" and c.count >= long.size), None)
    if not branch and predict is not None:
        taken = PREDICT_IN_STEPS_WORDS.format(
            name=predict.name, count=predict.count, took=_took(predict.total_s),
            excess=_took(excess),
            setup=PREDICT_SETUP_WORDS if predict.total_s < 0.5 * excess else "")
        evidence["predict_calls"] = float(predict.count)
        fix = PREDICT_IN_LOOP_FIX
    elif not branch and s.steps.xla_cpu_program_sets == 1:  # no program of their own
        grown = _grown_op(s, long.tolist(), excess / long.size)
        evidence["same_programs"] = 1.0
        held = _ops_held(s, long.tolist())
        if held is not None and held[0] - held[1] < OUTSIDE_OPS_SHARE * excess / long.size:
            top = s.steps.python_traced_top
            taken = " " + OUTSIDE_PROGRAM_WORDS.format(
                in_long=_took(held[0]), in_typical=_took(held[1]),
                python=(f" (the steps' Python, most in {', '.join(top)}: python_in_step)"
                        if top else ""))
            evidence.update(long_ops_s=held[0], typical_ops_s=held[1])
            fix = OUTSIDE_PROGRAM_FIX
        elif isinstance(grown, tuple):
            op, in_long, in_typical, lowest, highest = grown
            taken = (f" The same compiled program ran in every step; one of its ops holds "
                     f"most of the excess: {op} took {_took(in_long)} on average in these "
                     f"steps against {_took(in_typical)} in the typical step ({_took(lowest)} "
                     f"to {_took(highest)} over the steps).")
            evidence.update(grown_op_long_s=in_long, grown_op_typical_s=in_typical)
            fix = GROWN_OP_FIX.format(op=op)
        else:
            taken = " " + SAME_PROGRAM_WORDS.format(
                spread=", no one op holding most of the excess" if grown else "")
            fix = SAME_PROGRAM_FIX
    return [LONG_STEPS.advice(
        "warning",
        f"{long.size} of {len(items)} steps (steps {nums}{more}) take "
        f"{1e3 * float(durations[long].mean()):.2f} ms on average against "
        f"{1e3 * typical:.2f} ms for the typical step: their excess, mostly {label}, is "
        f"{100 * excess / total:.0f} % of the steps' time, so the window's averages mix two "
        "kinds of step." + taken,
        evidence,
        f"steps >= {LONG_FACTOR:g}x the median, at most {100 * LONG_MAX_SHARE:g} % of the "
        f"steps (a third every Nth step), their excess >= {100 * LONG_EXCESS_SHARE:g} % of "
        "step time (tfobs)",
        fix)]


def _typical_steps_hold_their_ops(s: WindowSummary, durations: np.ndarray, typical: float
                                  ) -> bool:
    """Whether the typical steps (under LONG_FACTOR x the median) hold their compiled
    program's ops: the median step's op time in its top events >= JAX_OPS_HELD_SHARE of the
    median step. An asynchronously dispatched step holds none of them (they run after its
    marker closes), counted inside the step's own span; False where the window did not keep
    the steps' top events to tell."""
    items = s.steps.items
    short = [k for k in range(len(items)) if durations[k] < LONG_FACTOR * typical]
    seen = [k for k in short if items[k].top_events]
    if not seen or 2 * len(seen) < len(short):
        return False
    def held_s(k: int) -> float:  # op time inside the step's own span
        start, end = items[k].start_ns, items[k].start_ns + 1e9 * items[k].duration_s
        return sum(max(0.0, min(end, e.start_ns + 1e9 * e.duration_s) - max(start, e.start_ns))
                   for e in items[k].top_events if e.kind == "op") / 1e9

    held = [held_s(k) for k in seen]
    return float(np.median(held)) >= JAX_OPS_HELD_SHARE * typical


def _ops_held(s: WindowSummary, long: list[int]) -> tuple[float, float] | None:
    """The op time (the steps' top events) of the long steps, on average, and of the
    typical ones, their median; None where the window did not keep the steps' top events
    to tell."""
    items = s.steps.items
    wanted = set(long)
    seen = [k for k in range(len(items)) if k not in wanted and items[k].top_events]
    if 2 * len(seen) < len(items) - len(wanted) or not all(items[k].top_events for k in long):
        return None

    def ops_s(k: int) -> float:
        return sum(e.duration_s for e in items[k].top_events if e.kind == "op")

    return (float(np.mean([ops_s(k) for k in long])),
            float(np.median([ops_s(k) for k in seen])))


def _took(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else f"{1e3 * seconds:.2f} ms"


def _grown_op(s: WindowSummary, long: list[int], excess_s: float
              ) -> tuple[str, float, float, float, float] | bool:
    """The op (by its top events' name) whose time in the long steps grew by at least
    `GROWN_OP_SHARE` of a long step's excess (`excess_s`) over the typical steps': (its
    name, mean seconds in the long steps, median in the typical ones, least and most in
    any step); True where no op did (the excess is spread over the ops), False where the
    window did not keep the steps' top events to tell (a long window keeps its longest)."""
    items = s.steps.items
    wanted = set(long)
    typical = [k for k in range(len(items)) if k not in wanted]
    seen = [k for k in typical if items[k].top_events]
    if 2 * len(seen) < len(typical) or not all(items[k].top_events for k in long):
        return False

    def ops(k: int) -> dict[str, float]:
        took: dict[str, float] = {}
        for ev in items[k].top_events:
            if ev.kind == "op":
                took[ev.name] = took.get(ev.name, 0.0) + ev.duration_s
        return took

    in_long, in_typical = [ops(k) for k in long], [ops(k) for k in seen]
    best: tuple[float, str] | None = None
    for name in sorted(set().union(*in_long)):
        grew = (float(np.mean([t.get(name, 0.0) for t in in_long]))
                - float(np.median([t.get(name, 0.0) for t in in_typical])))
        if best is None or grew > best[0]:
            best = (grew, name)
    if best is None or best[0] < GROWN_OP_SHARE * excess_s:
        return True
    name = best[1]
    every = [t[name] for t in in_long + in_typical if name in t]
    return (name, float(np.mean([t.get(name, 0.0) for t in in_long])),
            float(np.median([t.get(name, 0.0) for t in in_typical])), min(every), max(every))


def _long_cond_branch(s: WindowSummary, long: list[int]) -> str:
    """The tf.cond branch (`cond/then/_0`) whose ops are among the longest events of every
    long step and of no typical step, "" where there is none."""
    items = s.steps.items

    def branches(k: int) -> set[str]:
        return {m.group(1) for ev in items[k].top_events if ev.kind == "op"
                and (m := _COND_BRANCH.match(ev.name.split(":", 1)[0]))}

    wanted = set(long)
    typical: set[str] = set()
    seen = 0  # typical steps whose top events the window kept (a long window keeps its
    # longest events only): a branch is "not taken" only where they were looked at
    for k in range(len(items)):
        if k not in wanted:
            typical |= branches(k)
            seen += bool(items[k].top_events)
    if 2 * seen < len(items) - len(wanted):
        return ""
    common: set[str] | None = None
    for k in long:
        found = branches(k) - typical
        common = found if common is None else common & found
    return min(common, key=len) if common else ""


def _prints(s: WindowSummary) -> list[Advice]:
    """tf.print's ops against the steps' time (XProf counts them as host compute)."""
    step_s = step_total_s(s)
    if s.ops.print_s <= 0 or step_s <= 0 or s.ops.print_s / step_s < PRINT_SHARE:
        return []
    share = s.ops.print_s / step_s
    return [PRINT.advice(
        "warning",
        f"tf.print's ops (StringFormat, PrintV2) take {1e3 * s.ops.print_s / s.steps.count:.2f}"
        f" ms per step, {100 * share:.1f} % of step time: the step formats and prints values "
        "every time it runs.",
        {"print_s": s.ops.print_s, "print_share": share},
        f"tf.print ops >= {100 * PRINT_SHARE:g} % of step time (tfobs)")]


# What the commonest events that begin in a pause between steps are, for a reader.
PAUSE_EVENTS = {
    "TFE_DeleteTensorHandle": "tensors freed: an iterator or a dataset torn down",
    "TFE_Py_FastPathExecute_C": "ops run eagerly from Python",
    "multi_step_on_iterator": "a Keras function call: validation or evaluation",
    "one_step_on_iterator": "a Keras function call: validation or evaluation",
    "MakeIterator": "a dataset iterator made",
    "AnonymousIteratorV3": "a dataset iterator made",
}


def _pause_contents(s: WindowSummary) -> str:
    """" The longest pause holds: ..." from the events that begin in it, "" without."""
    st = s.steps
    if not st.pause_top:
        return ""
    named = ", ".join(
        f"{n} {1e3 * t:.2f} ms" + (f" ({PAUSE_EVENTS[n]})" if n in PAUSE_EVENTS else "")
        for n, t in zip(st.pause_top, st.pause_top_s, strict=True))
    return f" The longest pause holds: {named}."


def _gap(s: WindowSummary) -> Advice | None:
    items = s.steps.items
    if len(items) < 2:
        return None
    apart, gap = step_gaps(s.steps)
    gaps = gap.tolist()
    period = (items[-1].start_ns - items[0].start_ns) / 1e9 / (len(items) - 1)
    mean_gap = sum(gaps) / len(gaps)
    share = mean_gap / period if period > 0 else 0.0
    if share < GAP_SHARE:
        return None
    evidence = {"gap_s": mean_gap, "period_s": period, "gap_share": share}
    threshold = f"gap between steps >= {100 * GAP_SHARE:g} % of the step period (tfobs)"
    # The median gap against the median period says whether every step pays the gap.
    # numpy's median (statistics' would load fractions and decimal: 4 ms of a small answer)
    typical = float(np.median(gaps))
    typical_period = float(np.median(apart))
    if typical_period <= 0 or typical / typical_period >= GAP_SHARE:
        # Long pauses on top of the per-batch gap (an epoch's end, a validation run) may
        # hold most of it: both are said, and both fixes given, the larger first.
        at = [j for j, g in enumerate(gaps) if g >= PAUSE_FACTOR * typical > 0]
        pauses = [gaps[j] for j in at]
        held = sum(pauses) / sum(gaps) if pauses else 0.0
        also, fix = "", ""
        empty = _empty_gaps(s)
        if held >= 0.5:
            (stride_words, stride_evidence), first = _periodic(
                [items[j].step_num for j in at], len(at), [it.step_num for it in items])
            also = (f" {len(pauses)} pause(s) of up to {1e3 * max(pauses):.1f} ms hold "
                    f"{100 * held:.0f} % of it (an epoch's end, a validation run, a "
                    f"checkpoint); the typical gap is {1e3 * typical:.2f} ms." + stride_words
                    + _pause_contents(s))
            fix = (f"{first}; then, for the gap every step pays: "
                   f"{empty[1] if empty else STEP_GAP.fix}")
            evidence = {**evidence, "typical_gap_s": typical, "pauses": float(len(pauses)),
                        "pause_share": held, **stride_evidence}
        python = s.steps.python_between_s
        if python >= 0.5 * mean_gap > 0 and s.steps.python_between_top:
            # The Python tracer saw what fills the gap on the steps' own thread.
            also += (f" {1e3 * python:.2f} ms of each gap is Python on the steps' thread "
                     f"(most in {', '.join(s.steps.python_between_top[:3])}): the loop's own "
                     "work between the steps, such as a Python data loader building the "
                     "next batch, which XProf counts as no input.")
            evidence = {**evidence, "python_between_s": python}
        if empty:
            also += empty[0]
            fix = fix or empty[1]
            evidence = {**evidence, "gap_idle_ratio": s.steps.gap_idle_ratio}
        return STEP_GAP.advice(
            "critical" if share >= GAP_CRITICAL_SHARE else "warning",
            f"{100 * share:.0f} % of each step period ({1e3 * mean_gap:.2f} ms of "
            f"{1e3 * period:.2f} ms) is host time between steps, outside the training step."
            + also, evidence, threshold + f"; critical from {100 * GAP_CRITICAL_SHARE:g} %",
            fix)
    k = max(range(len(gaps)), key=gaps.__getitem__)
    at = [j for j, g in enumerate(gaps) if g >= GAP_SHARE * typical_period]
    long = len(at)
    evidence = {**evidence, "typical_gap_s": typical, "longest_gap_s": gaps[k], "pauses": long}
    (periodic, extra), fix = _periodic([items[j].step_num for j in at], long,
                                       [it.step_num for it in items])
    evidence.update(extra)
    # Markers that time the dispatch, the longest pause a wait for device values: the loop
    # waiting for the queued steps' own work, no work of the pause's to run less often.
    queued = _pause_waits_for_queued_steps(s)
    # A few pauses are worth a look; holding a quarter of the time or more, they cost more
    # than most of what the warnings name.
    return STEP_PAUSE.advice(
        "info" if queued or share < PAUSE_WARNING_SHARE else "warning",
        f"{100 * share:.0f} % of the step period ({1e3 * mean_gap:.2f} ms of {1e3 * period:.2f}"
        f" ms) is host time between steps, held by {long} pause(s) of {len(gaps)} gaps: the "
        f"longest {1e3 * gaps[k]:.1f} ms, between steps {items[k].step_num} and "
        f"{items[k + 1].step_num}; the typical gap is {1e3 * typical:.2f} ms."
        + periodic + _pause_contents(s) + (QUEUED_PAUSE if queued else ""), evidence,
        threshold + ", the median gap under it",
        QUEUED_PAUSE_FIX if queued else "" if fix == STEP_PAUSE.fix else fix)


# The longest pause of a window whose markers time the dispatch (markers_time_dispatch),
# most in a wait for device values (block_until_ready, float(loss)): the steps' compiled work
# queued by JAX's asynchronous dispatch, run while the loop waits. An epoch of 4 queued
# steps waited for once at its end: a 9.3 ms pause against 0.09 ms markers, the epoch's
# wall time 2.3-2.4 ms a step.
_WAIT_IN_PAUSE = re.compile(r"\$(?:api|array)\.py:\d+ (?:block_until_ready|_value|__float__|"
                            r"__int__|__array__|item|tolist)$")
QUEUED_PAUSE = (
    " That pause is the loop waiting for the steps' own compiled work, queued by JAX's "
    "asynchronous dispatch while the markers timed the dispatch alone (markers_time_dispatch):"
    " the steps' time, not work of its own.")
QUEUED_PAUSE_FIX = (
    "nothing runs in the pause to make rarer: it is where the queued steps compute. Read "
    "markers_time_dispatch first: wait for each step's result inside its marker (or mark "
    "the steps between two waits as one), so the steps' time is measured where it is spent")


def _pause_waits_for_queued_steps(s: WindowSummary) -> bool:
    """Whether the steps time their dispatch and the longest pause between them is most a
    wait for device values (`Steps.pause_top`)."""
    st = s.steps
    return (st.work_outside_ratio > 0 and DISPATCH_NOTE_START in st.note
            and bool(st.pause_top) and bool(_WAIT_IN_PAUSE.match(st.pause_top[0])))


# Where the gaps hold no event, the capture cannot say what runs there: the Python tracer
# can, and a pause the job makes on purpose is no cost of its steps.
TRACER_ON = ("profile once with the Python tracer on (tfobs: python_tracer_level=1, or "
             "TFOBS_PYTHON_TRACER_LEVEL=1{own})")
PACED_FIX = (
    "{see}. If it is a deliberate pause (a sleep or rate limit pacing the loop, a wait for "
    "requests or for another process), the step time is not the bottleneck: the job runs at "
    "the pace it sets, and a faster step does not make it faster; if it is work of the "
    "loop's own, {move}")


def _empty_gaps(s: WindowSummary) -> tuple[str, str] | None:
    """(words for step_gap's message, its fix) where the gaps between the steps hold no
    event on any thread of the host (`Steps.gap_idle_ratio`); None where they hold some."""
    idle = s.steps.gap_idle_ratio
    if idle < EMPTY_GAP_IDLE:
        return None
    jax = s.environment.framework == "jax"
    traced = bool(s.steps.python_traced_top) or s.environment.keras
    keras = any(c.name in KERAS_FIT_CALLS for c in s.steps.calls)
    what = ("waiting (a time.sleep, a rate limit, a lock, another process): the Python "
            "tracer was on and saw no Python there either" if traced else
            "running Python the profile does not trace (the Python tracer was off), or "
            "waiting (a time.sleep, a rate limit, a lock, another process)")
    words = (f" {100 * idle:.0f} % of the gaps' time holds no event on any thread of the "
             f"host: no {'JAX' if jax else 'TensorFlow'} or tf.data work runs there; the host "
             f"is {what}.")
    own = ("; jax.profiler.trace traces Python by default" if jax else
           "; TensorFlow's own profiler: tf.profiler.experimental.ProfilerOptions("
           "python_tracer_level=1)")
    see = TRACER_ON.format(own=own)
    if keras:  # Keras's own per-batch Python: its callbacks' fix holds
        return (words + " In a Keras fit that is most likely its per-batch callbacks.",
                f"{STEP_GAP.jax_fix if jax else STEP_GAP.fix}; to see which callback holds "
                f"the gap, {see}")
    move = ("move it out of the loop: read device values (float(loss), jax.device_get) "
            "every N steps and build batches ahead on a loader thread" if jax else
            "move it into the tf.function step or a tf.data pipeline (numpy batch "
            "building, logging every N steps), or run several steps per call")
    see = ("The capture cannot say what the host waits for" if traced
           else f"{see[0].upper()}{see[1:]} to see what the gaps run")
    return words, PACED_FIX.format(see=see, move=move)


# Pauses at a fixed stride of steps: a callback or hook the job runs every N batches.
PERIODIC_MIN = 3  # pauses in one stride, from which they are a pattern
PERIODIC_FIX = (
    "what runs every {n} batches is the pause: where an epoch is {n} batches, the epoch's end "
    "(its callbacks, a validation run, a new iterator); else a checkpoint save every {n} "
    "batches (Keras 3's ModelCheckpoint(save_freq={n}) writes its .weights.h5 or .keras file "
    "from Python, which leaves no event in the capture: save_freq='epoch' or a larger N; "
    "keras.callbacks.BackupAndRestore(save_freq={n}) backs up the model and the optimizer's "
    "state the same way: save_freq='epoch', or a larger N that still bounds the work a "
    "preemption loses), a "
    "logger, an evaluation or a metric read every {n} batches; run it less often or off the "
    "training thread")


def _periodic(after: list[int], pauses: int, numbers: Sequence[int] = ()
              ) -> tuple[tuple[str, dict[str, float]], str]:
    """((words, evidence), the pauses' fix) where pauses after steps `after` fall every N
    steps (`_every`); ("", {}) and STEP_PAUSE's fix otherwise. `numbers`: the kept steps'
    numbers in order; where they skip at every such pause (7, 9; 11, 13; the loop's counter
    also counts what it runs there, an evaluation, as a step), the pauses fall every N step
    numbers but every N - skipped marked steps, and the batches between them are those."""
    every = _every(after)
    if every is None:
        return ("", {}), STEP_PAUSE.fix
    stride, run = every
    shown = f"{', '.join(map(str, run[:6]))}{', ...' if len(run) > 6 else ''}"
    missing = _skipped_at(run, numbers)
    if missing and stride - len(missing[0]) >= 1:
        batches = stride - len(missing[0])
        gone = [n for m in missing for n in m]
        words = (f" {len(run)} of them fall every {stride} step numbers (after steps {shown}),"
                 f" every {batches} marked steps: the step numbers skip "
                 f"{', '.join(map(str, gone[:6]))}{', ...' if len(gone) > 6 else ''} there "
                 "(the loop's counter also counts what runs in the pause, such as an "
                 f"evaluation, as a step): something runs every {batches} batches.")
        fix = PERIODIC_FIX.format(n=batches) + (
            f"; for the other pauses, {STEP_PAUSE.fix}" if pauses > len(run) else "")
        return (words, {"pause_every_steps": float(batches),
                        "pause_every_step_numbers": float(stride)}), fix
    words = (f" {len(run)} of them fall every {stride} steps (after steps {shown}): "
             f"something runs every {stride} batches.")
    fix = PERIODIC_FIX.format(n=stride) + (
        f"; for the other pauses, {STEP_PAUSE.fix}" if pauses > len(run) else "")
    return (words, {"pause_every_steps": float(stride)}), fix


def _skipped_at(run: list[int], numbers: Sequence[int]) -> list[list[int]]:
    """The step numbers missing after each step of `run` (pauses after those steps), where
    the steps' numbers otherwise go up by one and every pause of the run skips as many
    (one list a pause); [] where they do not."""
    nxt = dict(zip(numbers, numbers[1:], strict=False))
    if len(nxt) < 2 or any(n not in nxt for n in run):
        return []
    usual = [b - a for a, b in nxt.items() if a not in run]
    if not usual or any(d != 1 for d in usual):
        return []
    jumps = {nxt[n] - n for n in run}
    if len(jumps) != 1 or (jump := jumps.pop()) < 2:
        return []
    return [list(range(n + 1, n + jump)) for n in run]


def _every(after: list[int]) -> tuple[int, list[int]] | None:
    """(stride, the step numbers) of the most pauses, after steps `after`, that fall every
    N steps without a miss (N two or more; other pauses, an epoch's end, may sit between
    them), at least PERIODIC_MIN of them; the smaller stride on a tie."""
    best: tuple[int, list[int]] | None = None
    if len(after) < PERIODIC_MIN:
        return None
    for stride in range(2, (after[-1] - after[0]) // (PERIODIC_MIN - 1) + 1):
        by_phase: dict[int, list[int]] = {}
        for n in after:
            by_phase.setdefault(n % stride, []).append(n)
        for run in by_phase.values():
            whole = all(b - a == stride for a, b in zip(run, run[1:], strict=False))
            if whole and len(run) >= PERIODIC_MIN and (best is None or len(run) > len(best[1])):
                best = (stride, run)
    return best
