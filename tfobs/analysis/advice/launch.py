"""Kernel launch: XProf's 'Kernel Launch' statement, tfobs's small-kernel figures (GPU) and
ops run eagerly outside tf.function (each one its own launch).

XProf: kernel launch share of step time >= 3 % moderate, >= 15 % high; when tf.data is in
use it adds that the launch time may come from CPU contention with tf.data and names
TF_GPU_THREAD_MODE=gpu_private. Small kernels: the share of kernels shorter than their own
launch overhead (tfobs's device figures, after Holistic Trace Analysis). Eager ops: time of
`EagerLocalExecute` ops against host op time, over XProf's 10 % eager threshold. Retracing:
tf.function graph building inside steps (TensorFlow's `tf.function-graph_building` mark),
which XProf counts as host compute without a word; a trace at a fit's or an epoch's start
lies outside steps and is not counted.
"""

from __future__ import annotations

import re

import numpy as np

from tfobs.analysis.advice.rule import (
    GPU,
    JAX_DOCS,
    PROFILER,
    Rule,
    category_advice,
    on_gpu,
    one_digit,
    step_gaps,
    steps_run,
    tfdata_in_use,
)
from tfobs.analysis.calls import KERAS_TF_PREDICT
from tfobs.summary import Advice, WindowSummary

KERNEL_LAUNCH = Rule(
    "kernel_launch_bound", "kernel launch",
    "'Kernel Launch' >= 3 % of step time (XProf: moderate >= 3 %, high >= 15 %)",
    "launch fewer, larger kernels: compile with XLA (jit_compile=True), use tf.function, "
    "larger batches; with tf.data on the same CPUs set TF_GPU_THREAD_MODE=gpu_private",
    f"{GPU}: 2. Debug the performance of one GPU; 3. Enable mixed precision and XLA",
    jax_fix=(
        "launch fewer, larger kernels: put the whole step under one jax.jit (not a Python "
        "loop of small jitted calls), use jax.lax.scan for loops, larger batches"))
SMALL_KERNELS = Rule(
    "small_kernels", "kernel launch",
    "GPU job, >= 50 % of kernels shorter than their launch overhead and the GPU idle "
    "waiting for launches >= 10 % of its time",
    "give each kernel more work: larger batches, vectorized ops, fused ops, XLA "
    "(jit_compile=True)",
    f"{GPU}: 2. Debug the performance of one GPU (small kernels); 3. Enable XLA",
    jax_fix=(
        "give each kernel more work: larger batches, jax.vmap instead of Python loops over "
        "examples, and one jax.jit around the step so XLA fuses its ops"))
# XLA's CPU runtime (a host-only JAX job) runs a compiled program thunk by thunk, each op
# paying a fixed cost (its dispatch, the hand-off between the runtime's threads) of about a
# microsecond: the CPU's launch-bound tiny kernels. A step of a few hundred ops is an
# ordinary model's (a Flax TrainState with Adam: about 250, per-example gradients: about 330);
# hundreds more averaging a few microseconds are a program of small ops. (The test
# captures: every other JAX CPU step averages 5.5 us an op or more, most 11-66 us, at most
# 328 ops a step; the step of 144 small leaves, 572 ops of 2.1 us.)
SMALL_CPU_OPS_PER_STEP = 400
SMALL_CPU_OP_S = 5e-6  # the ops' mean duration
SMALL_CPU_WORK_SHARE = 1 / 3  # of the step: XLA's CPU runtime running the program
# Where most of the small ops start inside control-flow ops' runs they are a compiled
# loop's iterations (optax's L-BFGS: 3,572 of 5,180 ops a step, its loops 27 of 47 ms; a
# vmapped Newton solve: 928 of 968, in 0.4 of 6.3 ms): the loops' time says whether they
# matter, and no parameter stacking makes them fewer.
SMALL_CPU_LOOP_OPS = 0.5  # of the ops
SMALL_CPU_LOOP_FIX = (
    "give each iteration more work or run fewer of them: solve independent problems in one "
    "loop (jax.vmap over them, or a batch axis, so each iteration's ops run on all of them "
    "at once, rather than one loop per problem or a Python loop of jitted solves), stop "
    "sooner (a looser tolerance, a warm start from the last solution, a lower iteration "
    "cap: count the iterations a step runs); for a loop of a fixed count, lax.fori_loop / "
    "lax.scan with "
    "unroll=k lets XLA fuse k iterations' ops into fewer, larger ones")
SMALL_CPU_OPS = Rule(
    "small_xla_cpu_ops", "kernel launch",
    f"host-only JAX job, >= {SMALL_CPU_OPS_PER_STEP} XLA ops (the compiled program's thunks) "
    f"per step averaging under {SMALL_CPU_OP_S * 1e6:g} us, XLA's CPU runtime busy >= 1/3 of "
    "the step: a program of many small ops; where most of them run inside the program's "
    "loops (control-flow ops: lax.while_loop, fori_loop, scan), those loops' runs >= 1/3 of "
    "the step instead, with the loop's fix",
    "give each op more work: stack same-shaped parameters (the blocks, layers or heads a "
    "Python loop inside the jitted function goes over, unrolled into the program) into one "
    "array with a leading axis and run them with jax.vmap, or jax.lax.scan over the stack "
    "(one copy of the body in the program), so a few large ops replace hundreds or "
    "thousands of small ones and the tree passed to and returned from each step has a few "
    "leaves, not hundreds",
    f"{JAX_DOCS}: Automatic vectorization (jax.vmap); Control flow (jax.lax.scan); {GPU}: "
    "2. Debug the performance of one GPU (small kernels, this rule's GPU side)")
LAUNCH_CONTENTION = Rule(
    "gpu_thread_contention", "gaps between steps",
    "GPU job with tf.data, the GPU idle waiting for kernel launches >= 3 % of its time",
    "set TF_GPU_THREAD_MODE=gpu_private so kernel launches get their own host threads",
    f"{GPU}: 2. Debug the performance of one GPU (GPU host thread contention)",
    jax_fix=(
        "leave the launching thread a core: give tf.data fewer threads "
        "(options.threading.private_threadpool_size) or feed from a loader with fewer "
        "workers, and put the next batch on the device ahead (jax.device_put) while the step "
        "runs"))
EAGER = Rule(
    "eager_ops", "kernel launch",
    "ops run eagerly (outside tf.function) > 10 % of host op time (XProf's threshold)",
    "wrap the eagerly run code (metrics, updates) in tf.function, or move it into the "
    "model's train_step; where the model's math runs eagerly, make the step a tf.function; "
    "where most of it is _EagerConst (NumPy inputs converted at each call), pass tensors "
    "(tf.data, or tf.convert_to_tensor once before the loop); where most of it runs between "
    "the steps, lighten the callbacks there (checkpoint saving, per-batch logging)",
    f"{PROFILER}: Overview page (recommendation: tf.function); tf.function guide "
    "(tensorflow.org/guide/function)")
RETRACING = Rule(
    "tf_function_retracing", "kernel launch",
    "tf.function graph building (tracing, and the new function's set-up in its first call), "
    "or a JAX jit compile, inside steps >= 10 % of step time: a function traced or compiled "
    "again while training",
    "pass tensors, not Python numbers or new Python objects, to the tf.function; give it an "
    "input_signature (None for dimensions that vary) or reduce_retracing=True. TensorFlow's "
    "log names the function ('triggered tf.function retracing')",
    "tf.function guide (tensorflow.org/guide/function): Controlling retracing",
    jax_fix=(
        "a jitted function compiles again for every new value of a static argument "
        "(static_argnums / static_argnames), every new input shape or dtype and every new "
        "input tree (a dict batch whose keys change, such as a mask or weight key present "
        "only on some batches: pass the same keys every step, an all-ones mask or weights "
        "of 1 where there is none), and a "
        "jax.jit(...) made inside the loop (a new lambda or partial each step) compiles on "
        "every call, its cache keyed on the function object: make the jitted function once, "
        "outside the loop; pass numbers that change as traced arguments, pad or bucket shapes "
        "to a few sizes and warm each before training (one call per bucket shape, or each "
        "shape's executable from jitted.lower(*args).compile(), called directly: a bucket's "
        "first use otherwise compiles mid-training), keep dtypes fixed; an epoch's last, "
        "smaller batch: drop it, or pad it to the full batch with a mask (sample weights of "
        "0); jax.config.update('jax_log_compiles', True) logs each compile and its cause"),
    jax_guide=f"{JAX_DOCS}: Just-in-time compilation (static arguments, caching)")
# XLA's CPU backend sorts by calling the program's compiled comparator once per comparison
# (tens of nanoseconds each): jnp.sort / jnp.argsort of 256 rows of 8,192 scores took 0.6-2.9 s
# on the project's VM, where lax.top_k (XLA's TopK custom call) of the same rows took 19-45
# ms and a rank by counting (jnp.sum(s > s_pos, axis=1)) 3 ms. A sort holding this share of
# the step is that sort's cost, not the model's.
CPU_SORT_SHARE = 0.3  # of step time, the sort ops' summed over the kept steps
_SORT_OP = re.compile(r"^sort(\.\d+)?$")
CPU_SORT = Rule(
    "xla_cpu_sort", "kernel launch",
    f"host-only JAX job, XLA sort ops (`sort`, `sort.N`: jnp.sort, jnp.argsort, "
    f"lax.sort) hold >= {100 * CPU_SORT_SHARE:g} % of step time",
    "avoid the full sort in the step: for the k largest or smallest, jax.lax.top_k(x, k) "
    "(on negated values for the smallest; XLA's CPU TopK kernel, no comparator calls); "
    "for one value's rank among a row, count: jnp.sum(row > value, axis=-1); for a "
    "quantile or a median of a fixed array, sort once outside the loop, or take it from "
    "lax.top_k on a subsample; sort only on the host (np.argsort on a copy) where the "
    "order is needed every few steps, not every step. XLA's CPU backend sorts by calling "
    "the compiled comparator for every comparison, tens of times slower than numpy's sort",
    f"{JAX_DOCS}: jax.lax.top_k; jax.numpy.argsort; the profiling guide "
    "(docs.jax.dev/en/latest/profiling.html: the trace viewer names each XLA op)")
RULES = (KERNEL_LAUNCH, SMALL_KERNELS, SMALL_CPU_OPS, CPU_SORT, LAUNCH_CONTENTION, EAGER,
         RETRACING)

SMALL_RATIO = 0.5
SMALL_IDLE_SHARE = 0.10
CONTENTION_IDLE_SHARE = 0.03
EAGER_PCT = 10.0  # XProf's kEagerReportThresholdInPercent
# A model's own math: eager ops of these types mean the step (or the model call) itself runs
# eagerly, not a metric or an update beside a tf.function step.
MODEL_MATH_OPS = frozenset({
    "MatMul", "BatchMatMulV2", "BatchMatMulV3", "_FusedMatMul", "Einsum", "Conv2D", "Conv3D",
    "DepthwiseConv2dNative", "Conv2DBackpropInput", "Conv2DBackpropFilter"})
EAGER_STEP_FIX = (
    "decorate the training step (or the model call) with @tf.function; Keras's fit, evaluate "
    "and predict do that themselves unless Model.compile(run_eagerly=True) or "
    "tf.config.run_functions_eagerly(True) turns it off: remove those")
# tf.debugging.enable_check_numerics() left on: each eagerly run op's output is checked by
# an eager CheckNumericsV2 (and each graph op's by a DebugNumericSummaryV2 in the graph).
CHECK_NUMERICS_OP = "CheckNumerics"  # CheckNumericsV2, CheckNumerics
CHECK_NUMERICS_SHARE = 0.5  # of the eager op time
CHECK_NUMERICS_FIX = (
    "turn the NaN/Inf checks off for training runs: tf.debugging.disable_check_numerics() "
    "(or remove tf.debugging.enable_check_numerics()); they check every op's output, eager "
    "and in every tf.function's graph (DebugNumericSummaryV2 ops)")
# The model's math run eagerly inside steps that also call a tf.function once each: the
# step function is compiled, code beside it in the step (an accuracy check, a metric from
# the model's outputs) is not.
EAGER_MATH_BESIDE_FIX = (
    "compute it inside the step's tf.function (return the metric with the loss) or wrap "
    "that code in @tf.function too, and read it every N steps; the step function itself is "
    "compiled already")
# `_EagerConst`: TensorFlow turning a NumPy array or Python value into a tensor where one is
# passed to a tf.function or an op (a copy per call); most of the eager time in a custom
# loop that feeds its step NumPy slices.
EAGER_CONVERSION_OP = "_EagerConst"
EAGER_CONVERSION_SHARE = 0.5  # of the eager op time
EAGER_CONVERSION_FIX = (
    "pass tensors, not NumPy arrays or Python values: feed the step from tf.data "
    "(tf.data.Dataset.from_tensor_slices(...).batch(...), iterated in the loop), or convert "
    "the data once with tf.convert_to_tensor before the loop; each call with a NumPy array "
    "converts (copies) it into a new tensor")
# Eager ops mostly outside the steps: Keras callbacks (weights saved every few batches,
# metrics read into logs, TensorBoard writes) or the loop's own Python between the steps;
# tf.function around the step would not remove them.
# Variable updates run eagerly beside a compiled step: a moving average of the weights
# (tf.train.ExponentialMovingAverage.apply, assign_moving_average) or a hand-written update
# called outside the step's tf.function dispatches a few ops per variable from Python, and
# that dispatch, not the ops, is the cost.
EAGER_UPDATE_TYPES = frozenset({
    "AssignSubVariableOp", "AssignAddVariableOp", "AssignVariableOp"})
EAGER_UPDATE_OPS = EAGER_UPDATE_TYPES | {
    "Sub", "Mul", "AddV2", "Add", "ReadVariableOp", "Maximum", "Minimum", "RealDiv"}
EAGER_UPDATE_SHARE = 0.8  # of the eager op time, in these op types
EAGER_UPDATE_FIX = (
    "call the update inside the step's tf.function (ema.apply(variables) after "
    "optimizer.apply_gradients in it, or a tf.function of its own called once per step): "
    "one call per step instead of one Python dispatch per op and variable; under Keras 3 "
    "fit, keras.optimizers.*(use_ema=True) keeps the average inside the step")
# A GradientTape outside the step's tf.function: the tape runs the function's backward as a
# call of its own (`__inference___backward_<f>_*`, one per step) and the optimizer's update
# after it runs eagerly, one Python dispatch per op and variable; not a moving average.
EAGER_TAPE_FIX = (
    "put the whole training step in one tf.function: the forward pass, the GradientTape, "
    "tape.gradient and optimizer.apply_gradients inside it (@tf.function def train_step(x, "
    "y): with tf.GradientTape() as tape: loss = ...; grads = tape.gradient(loss, "
    "model.trainable_variables); optimizer.apply_gradients(zip(grads, "
    "model.trainable_variables)); return loss), called once per step; compiling the forward "
    "pass alone leaves the backward a separate call and the update eager")
EAGER_BETWEEN_SHARE = 0.5  # of the eager op time
EAGER_BETWEEN_FIX = (
    "lighten what runs between the steps: where a checkpoint callback saves every few "
    "batches, save less often (ModelCheckpoint(save_freq='epoch') or a larger save_freq in "
    "batches); move per-batch callback work to on_epoch_end (EarlyStopping's and "
    "ReduceLROnPlateau's checks read and assign variables eagerly), log and read metrics "
    "every N batches, and run several steps per call (Model.compile(steps_per_execution=N))")
# Eager ops between the steps where a few long pauses (a checkpoint save every N batches,
# an epoch's end: validation, EarlyStopping's and ReduceLROnPlateau's checks) hold most of
# the time between them: work paid once per pause, not at every batch.
PAUSE_FACTOR = 10  # a gap this many times the typical one is a pause (step_pause's)
EAGER_PAUSE_FIX = (
    "this is paid once per pause, not at every batch (the gap every batch pays is small): "
    "read step_pause for what the pauses run; save less often (ModelCheckpoint(save_freq="
    "'epoch') or a larger save_freq in batches; save_weights_only=True writes the weights "
    "alone, not the whole .keras archive) and validate less often (fit(validation_freq="
    "N)); work at an epoch's end weighs against the steps as much as the epoch is short, "
    "so judge the steps from a window inside an epoch")
# Eager ops before the window's first measured step (in no step, or in the dropped first
# one): set-up a capture caught once (a capture begun before training: variables made,
# Normalization.adapt, weights loaded, a first evaluation), not the steps.
EAGER_SAVE_FIX = (
    "these eager ops are the checkpoint save's, which tf.function would not remove: save less "
    "often (tf.train.CheckpointManager(checkpoint_interval=N) with save(check_interval=True), "
    "ModelCheckpoint(save_freq=N)) or asynchronously "
    "(tf.train.CheckpointOptions(experimental_enable_async_checkpoint=True))")
EAGER_BEFORE_FIX = (
    "the steps do not pay it: read them from a window of steps alone (start the profiler "
    "after the set-up, e.g. TensorBoard(profile_batch=(10, 20)); tfobs's own windows open "
    "at a step); where the set-up runs again (each epoch), move it out of the loop or into "
    "a tf.function")
# Variables made eagerly (VarHandleOp, then VarIsInitializedOp as a tf.Variable is
# created) in a window where a tf.function was traced: a model or an optimizer built at a
# function's first call (Keras 3 builds the optimizer's slots in the first step after
# compile, under tf.init_scope), paid once; tf.function would not remove it.
VARIABLE_MADE_TYPES = frozenset({"VarHandleOp", "VarIsInitializedOp"})
VARIABLE_MADE_SHARE = 0.5  # of the eager op time
EAGER_VARIABLES_FIX = (
    "nothing to move into tf.function: variables are made once per model or optimizer "
    "built (a new model for each trial of a search; compile again, e.g. after changing "
    "trainable, makes a new "
    "optimizer and a new train function, built at the next fit's first step); build them "
    "before the steps that matter (model.build, optimizer.build(model.trainable_variables)) "
    "and judge the steps from a window after each fit's first step; where variables are "
    "made at every step, make them once before the loop")
# The model's math run eagerly between the steps: the training step is compiled, the code
# around it (an evaluation pass in a custom loop, a callback calling the model) is not.
EAGER_MATH_BETWEEN_FIX = (
    "wrap what calls the model between the steps in @tf.function too (an evaluation step, "
    "a metric computed from model outputs), or run it every N steps; Keras's evaluate and "
    "predict compile theirs unless run_eagerly=True")
# Eager queue dequeues (tf.queue.FIFOQueue and kin, filled by other code): the step waits
# there for its batch. XProf counts that wait as eager host op time, not input, so its
# verdict reads "not" input-bound; tf.function around the step would not remove it.
QUEUE_WAIT_OP = "QueueDequeue"  # QueueDequeueV2, QueueDequeueManyV2, QueueDequeueUpToV2
QUEUE_WAIT_SHARE = 0.5  # of the eager op time
QUEUE_WAIT_FIX = (
    "the step waits for a queue that other code fills: make the producer keep up (more "
    "producer threads, less Python per batch), or feed the step from tf.data instead "
    "(Dataset.from_generator or from_tensor_slices, then map(num_parallel_calls="
    "tf.data.AUTOTUNE) and prefetch(tf.data.AUTOTUNE)), which prepares batches while the "
    "step runs; this wait is input time that XProf's input-bound verdict does not count")
RETRACING_PCT = 10.0  # of step time: one retrace at an epoch's odd last batch stays under

# XProf's sentences (KernelLaunchAnalysis, kKernelLaunchTfDataContention).
KERNEL_LAUNCH_TEXT = " % of the total step time sampled is spent on 'Kernel Launch'."
TFDATA_CONTENTION_TEXT = (" It could be due to CPU contention with tf.data. In this case, you "
                          "may try to set the environment variable "
                          "TF_GPU_THREAD_MODE=gpu_private.")


def check(s: WindowSummary) -> list[Advice]:
    tfdata = tfdata_in_use(s)
    found = category_advice(
        KERNEL_LAUNCH, s, "kernel_launch", "'Kernel Launch'",
        KERNEL_LAUNCH_TEXT + (TFDATA_CONTENTION_TEXT if tfdata else ""),
        {"tfdata_in_use": float(tfdata)})
    out: list[Advice] = [found] if found else []
    out += _eager(s)
    out += _retracing(s)
    if not on_gpu(s):
        return out + _small_cpu_ops(s) + _cpu_sort(s)
    for d in s.devices:
        idle = d.idle_s.get("kernel_launch", 0.0) / d.span_s if d.span_s > 0 else 0.0
        ev = {"small_kernel_ratio": d.small_kernel_ratio, "mean_kernel_s": d.mean_kernel_s,
              "launch_delay_mean_s": d.launch_delay_mean_s, "launch_idle_share": idle,
              "kernel_count": float(d.kernel_count)}
        if d.small_kernel_ratio >= SMALL_RATIO and idle >= SMALL_IDLE_SHARE:
            out.append(SMALL_KERNELS.advice(
                "warning",
                f"{d.device}: {100 * d.small_kernel_ratio:.0f} % of {d.kernel_count} kernels "
                f"run shorter than their launch (mean {1e6 * d.mean_kernel_s:.1f} us); the GPU "
                f"waits for launches {100 * idle:.0f} % of the time.",
                ev, f"small kernels >= {100 * SMALL_RATIO:g} % and launch idle >= "
                    f"{100 * SMALL_IDLE_SHARE:g} % (tfobs)"))
        if tfdata and idle >= CONTENTION_IDLE_SHARE:
            out.append(LAUNCH_CONTENTION.advice(
                "info",
                f"{d.device} waits for kernel launches {100 * idle:.0f} % of the time while "
                "tf.data runs on the same host CPUs.",
                ev, f"launch idle >= {100 * CONTENTION_IDLE_SHARE:g} % with tf.data in use "
                    "(tfobs; XProf names the fix at >= 3 % 'Kernel Launch')"))
    return out


def _small_cpu_ops(s: WindowSummary) -> list[Advice]:
    """small_xla_cpu_ops: a host-only JAX step whose compiled program runs many small ops
    (`steps.xla_cpu_ops`, their mean), with XLA's CPU runtime busy a good share of it."""
    st = s.steps
    if s.environment.framework != "jax" or not st.count or st.mean_s <= 0:
        return []
    share = st.work_in_steps_s / st.mean_s
    if st.xla_cpu_ops < SMALL_CPU_OPS_PER_STEP or share < SMALL_CPU_WORK_SHARE:
        return []
    mean = st.xla_cpu_op_s / st.xla_cpu_ops
    if mean >= SMALL_CPU_OP_S:
        return []
    if st.xla_cpu_loop_ops >= SMALL_CPU_LOOP_OPS * st.xla_cpu_ops:
        return _small_cpu_loop_ops(s, mean, share)
    return [SMALL_CPU_OPS.advice(
        "warning",
        f"Each step's compiled program runs {st.xla_cpu_ops:,.0f} XLA ops on the CPU averaging "
        f"{1e6 * mean:.1f} us (half of them under {1e6 * st.xla_cpu_op_median_s:.1f} us): XLA's "
        f"CPU runtime runs the program {1e3 * st.work_in_steps_s:.2f} ms of the "
        f"{1e3 * st.mean_s:.2f} ms step ({100 * share:.0f} %), each op paying the runtime's "
        "fixed cost (its dispatch, the hand-off between its threads): many small ops, as a "
        "Python loop over blocks or layers unrolled into the jitted function, or a tree of "
        "many small parameters each updated by ops of its own, makes them.",
        {"xla_cpu_ops_per_step": st.xla_cpu_ops, "xla_cpu_op_median_s": st.xla_cpu_op_median_s,
         "xla_cpu_op_mean_s": mean, "xla_cpu_work_s_per_step": st.work_in_steps_s,
         "xla_cpu_work_share": share},
        f">= {SMALL_CPU_OPS_PER_STEP} ops per step averaging < {SMALL_CPU_OP_S * 1e6:g} us, "
        "runtime busy >= 1/3 of the step (tfobs)")]


def _cpu_sort(s: WindowSummary) -> list[Advice]:
    """xla_cpu_sort: a host-only JAX step whose time is XLA's sort ops (the steps' longest
    events, `steps.items[].top_events`, named `sort` or `sort.N`)."""
    st = s.steps
    if s.environment.framework != "jax" or not st.count or st.mean_s <= 0 or not st.items:
        return []
    total = sum(it.duration_s for it in st.items)
    by_name: dict[str, float] = {}
    for it in st.items:
        for e in it.top_events:
            if e.kind == "op" and _SORT_OP.match(e.name):
                by_name[e.name] = by_name.get(e.name, 0.0) + e.duration_s
    sort_s = sum(by_name.values())
    if total <= 0 or sort_s / total < CPU_SORT_SHARE:
        return []
    share = min(sort_s / total, 1.0)
    names = ", ".join(sorted(by_name, key=by_name.__getitem__, reverse=True))
    per = sort_s / len(st.items)
    return [CPU_SORT.advice(
        "critical" if share >= 0.5 else "warning",
        f"XLA's sort ({names}) takes {1e3 * per:.2f} ms of each {1e3 * st.mean_s:.2f} ms "
        f"step ({100 * share:.0f} %) on the CPU: a jnp.sort, jnp.argsort or lax.sort in the "
        "jitted step, which XLA's CPU backend runs by calling its comparator once per "
        "comparison.",
        {"sort_s_per_step": per, "sort_share": share},
        f"sort ops >= {100 * CPU_SORT_SHARE:g} % of step time on a host-only JAX capture "
        "(tfobs)")]


def _small_cpu_loop_ops(s: WindowSummary, mean: float, share: float) -> list[Advice]:
    """small_xla_cpu_ops where most of the small ops are a compiled loop's body (they start
    inside control-flow ops' runs): the loop's iterations, judged by the loops' own time."""
    st = s.steps
    loop_share = st.xla_cpu_loop_s / st.mean_s
    if loop_share < SMALL_CPU_WORK_SHARE:  # a loop of tiny ops that costs little
        return []
    return [SMALL_CPU_OPS.advice(
        "warning",
        f"Each step's compiled program runs {st.xla_cpu_ops:,.0f} XLA ops on the CPU averaging "
        f"{1e6 * mean:.1f} us (half of them under {1e6 * st.xla_cpu_op_median_s:.1f} us), "
        f"{st.xla_cpu_loop_ops:,.0f} of them inside the program's loops (a lax.while_loop, "
        "fori_loop or scan, or a library's: an optimizer's iterations, a line search, a "
        f"solver), whose runs take {1e3 * st.xla_cpu_loop_s:.2f} ms of the "
        f"{1e3 * st.mean_s:.2f} ms step ({100 * loop_share:.0f} %): every iteration runs the "
        "loop body's small ops, each paying the runtime's fixed cost (its dispatch, the "
        "hand-off between its threads).",
        {"xla_cpu_ops_per_step": st.xla_cpu_ops, "xla_cpu_op_median_s": st.xla_cpu_op_median_s,
         "xla_cpu_op_mean_s": mean, "xla_cpu_work_s_per_step": st.work_in_steps_s,
         "xla_cpu_work_share": share, "xla_cpu_loop_ops_per_step": st.xla_cpu_loop_ops,
         "xla_cpu_loop_s_per_step": st.xla_cpu_loop_s, "xla_cpu_loop_share": loop_share},
        f">= {SMALL_CPU_OPS_PER_STEP} ops per step averaging < {SMALL_CPU_OP_S * 1e6:g} us, "
        f">= {100 * SMALL_CPU_LOOP_OPS:g} % of them in loops whose runs take >= 1/3 of the "
        "step (tfobs)", SMALL_CPU_LOOP_FIX)]


def _eager(s: WindowSummary) -> list[Advice]:
    """Eager op time against host op time, with XProf's threshold and sentence start."""
    if s.ops.eager_s <= 0:
        return []
    # Eagerly run ops are not rows of the host op table (XProf's neither), so host op time
    # is the table's plus theirs: a window of both is never "100 % eager".
    pct = 100.0 * s.ops.eager_s / (s.ops.host_s + s.ops.eager_s)
    if pct <= EAGER_PCT:
        return []
    names = ", ".join(f"{o.name} ({o.count}x)" for o in s.ops.eager_top[:3])
    per = max(s.steps.count, 1)
    math = [o.op_type for o in s.ops.eager_top if o.op_type in MODEL_MATH_OPS]
    waited = sum(o.self_s for o in s.ops.eager_top if o.op_type.startswith(QUEUE_WAIT_OP))
    wait_share = waited / s.ops.eager_s
    converted = sum(o.self_s for o in s.ops.eager_top if o.op_type == EAGER_CONVERSION_OP)
    share = converted / s.ops.eager_s
    between = s.ops.eager_between_steps_s / s.ops.eager_s if s.steps.count else 0.0
    before = s.ops.eager_before_steps_s / s.ops.eager_s if s.steps.count else 0.0
    checks = sum(o.self_s for o in s.ops.eager_top
                 if o.op_type.startswith(CHECK_NUMERICS_OP)) / s.ops.eager_s
    saving = s.ops.checkpoint_steps_eager_s / s.ops.eager_s
    made = _variables_made_s(s) / s.ops.eager_s
    severity = "warning"
    # The first of these that holds says what the eager time is, and names its fix.
    if checks >= CHECK_NUMERICS_SHARE:  # debugging left on
        step_eager, fix = (f" {100 * checks:.0f} % of it is CheckNumericsV2: "
                           "tf.debugging.enable_check_numerics() is on.", CHECK_NUMERICS_FIX)
    elif saving >= EAGER_BETWEEN_SHARE:  # a checkpoint save's variable reads, counted there
        severity = "info"
        step_eager, fix = (f" {100 * saving:.0f} % of it runs in the steps that save a "
                           "checkpoint: the save reads every variable eagerly "
                           "(checkpoint_writes counts the save's whole cost).",
                           EAGER_SAVE_FIX)
    elif before >= EAGER_BETWEEN_SHARE:  # set-up before the steps, once in this window
        severity = "info"
        step_eager, fix = (f" {100 * before:.0f} % of it ({1e3 * s.ops.eager_before_steps_s:.2f}"
                           " ms) runs before the window's first measured step: set-up "
                           "the capture caught (variables made, Normalization.adapt, "
                           "weights loaded, a first evaluation), not the steps.",
                           EAGER_BEFORE_FIX)
    elif made >= VARIABLE_MADE_SHARE and s.ops.graph_builds:  # built at a first call
        severity = "info"
        step_eager, fix = (f" {100 * made:.0f} % of it makes variables (VarHandleOp, "
                           "VarIsInitializedOp, their first AssignVariableOp) where a "
                           "tf.function was traced in this window: a model's or an "
                           "optimizer's variables created (a new model, or at a "
                           "function's first call: Keras 3 builds the optimizer's in the "
                           "first step after compile), once per build, not at every step.",
                           EAGER_VARIABLES_FIX)
    elif math and between >= EAGER_BETWEEN_SHARE:  # an evaluation or callback outside steps
        step_eager, fix = (f" {100 * between:.0f} % of it, the model's math among it "
                           f"({', '.join(math)}), runs between the steps, not in them: code "
                           "outside the step calls the model eagerly (an evaluation loop, "
                           "a callback).", EAGER_MATH_BETWEEN_FIX)
    elif math and (compiled := _per_step_function(s)):
        step_eager, fix = (f" The model's own math runs eagerly ({', '.join(math)}) in the "
                           f"steps beside their tf.function ('{compiled}', called once per "
                           "step): code in the step outside that function calls the model "
                           "eagerly.", EAGER_MATH_BESIDE_FIX)
    elif math:
        step_eager, fix = (f" The model's own math runs eagerly ({', '.join(math)}): the step "
                           "itself is no tf.function.", EAGER_STEP_FIX)
    elif wait_share >= QUEUE_WAIT_SHARE:
        step_eager, fix = (f" {100 * wait_share:.0f} % of it is queue dequeues "
                           f"({1e3 * waited / per:.2f} ms per step): the steps wait for their "
                           "batches in a tf.queue, input wait that XProf counts as host op "
                           "time.", QUEUE_WAIT_FIX)
    elif share >= EAGER_CONVERSION_SHARE and between >= EAGER_BETWEEN_SHARE:
        step_eager, fix = (f" {100 * share:.0f} % of it is {EAGER_CONVERSION_OP}, "
                           f"{100 * between:.0f} % between the steps: values turned into "
                           "tensors around the steps (Keras fit's per-batch logs and "
                           "callbacks, or a loop converting its batches before the step).",
                           EAGER_BETWEEN_FIX + "; in a loop of your own, hand the step "
                           "tensors (a tf.data pipeline) rather than NumPy arrays")
    elif share >= EAGER_CONVERSION_SHARE:
        step_eager, fix = (f" {100 * share:.0f} % of it is {EAGER_CONVERSION_OP}: NumPy arrays "
                           "or Python values turned into tensors where they are passed to a "
                           "tf.function or an op.", EAGER_CONVERSION_FIX)
    elif (tape := _tape_outside_step_function(s, between)) is not None:
        step_eager, fix = tape, EAGER_TAPE_FIX
    elif (update := _eager_update_beside_step(s, between)) is not None:
        step_eager, fix = update, EAGER_UPDATE_FIX
    elif between >= EAGER_BETWEEN_SHARE and (pauses := _pauses(s))[0]:
        step_eager, fix = (f" {100 * between:.0f} % of it runs between the steps, and "
                           f"{pauses[0]} pause(s) hold {100 * pauses[1]:.0f} % of the time "
                           "between them: work done every few batches or at an epoch's end "
                           "(a checkpoint save, validation, epoch-end callbacks), not at "
                           "every batch.", EAGER_PAUSE_FIX)
    elif between >= EAGER_BETWEEN_SHARE:
        step_eager, fix = (f" {100 * between:.0f} % of it runs between the steps (Keras "
                           "callbacks, logging, weight saving), not in them.", EAGER_BETWEEN_FIX)
    else:
        step_eager, fix = "", ""
    return [EAGER.advice(
        severity,
        f"{one_digit(pct)}% of Op time on the host used eager execution "
        f"({1e3 * s.ops.eager_s / per:.2f} ms "
        f"{'per step' if s.steps.count else 'in the window, which has no step'}; "
        f"top: {names}).{step_eager}",
        {"eager_pct_of_host_op_time": pct, "eager_s_per_step": s.ops.eager_s / per,
         "model_math_eager": float(bool(math)), "conversion_share": share,
         "between_steps_share": between, "before_steps_share": before,
         "check_numerics_share": checks, "checkpoint_steps_share": saving,
         "queue_wait_share": wait_share},
        f"eager op time > {EAGER_PCT:g} % of host op time (XProf)", fix=fix)]


def _variables_made_s(s: WindowSummary) -> float:
    """Eager seconds of variables being made: VarHandleOp and VarIsInitializedOp, and the
    AssignVariableOps of their initial values (as many as the handles made; an eager
    update's assigns, with no handle made, are not these)."""
    top = {o.op_type: o for o in s.ops.eager_top}
    made = sum(o.self_s for t, o in top.items() if t in VARIABLE_MADE_TYPES)
    handles, assign = top.get("VarHandleOp"), top.get("AssignVariableOp")
    if handles is not None and assign is not None and assign.count:
        made += assign.self_s * min(1.0, handles.count / assign.count)
    return made


def _pauses(s: WindowSummary) -> tuple[int, float]:
    """(gaps between the steps PAUSE_FACTOR times the typical one or more, their share of
    all the gaps' time) where such pauses hold most of it; (0, 0.0) otherwise."""
    if len(s.steps.items) < 3:
        return 0, 0.0
    _, gap = step_gaps(s.steps)
    typical, total = float(np.median(gap)), float(gap.sum())
    long = gap[gap >= PAUSE_FACTOR * typical] if typical > 0 else gap[:0]
    held = float(long.sum()) / total if total > 0 else 0.0
    return (int(long.size), held) if long.size and held >= 0.5 else (0, 0.0)


def _tape_outside_step_function(s: WindowSummary, between: float) -> str | None:
    """The words for eager ops in steps that each take their tf.function's gradient from a
    GradientTape outside it (a backward call per step, `ops.eager_backward_calls`), else
    None."""
    compiled = _per_step_function(s)
    backward = s.ops.eager_backward_calls
    if not compiled or between >= EAGER_BETWEEN_SHARE or backward < s.steps.count:
        return None
    top = s.ops.eager_top
    counts = ", ".join(f"{o.count / backward:.0f} {o.name}" for o in top[:4])
    return (f" Each step calls its tf.function ('{compiled}') under a GradientTape outside "
            f"it: tape.gradient runs the function's backward pass as a call of its own "
            f"({backward} in the steps) and the optimizer's update after it runs eagerly, "
            f"one Python dispatch per op and variable ({counts} a step).")


def _eager_update_beside_step(s: WindowSummary, between: float) -> str | None:
    """What the eager ops are where they update variables in the steps beside the steps'
    own tf.function (the words for the message), else None: the time the steps spend
    outside that function, against the eager ops' own op time."""
    compiled = _per_step_function(s)
    top = s.ops.eager_top
    if not compiled or between >= EAGER_BETWEEN_SHARE or not s.steps.count:
        return None
    held = sum(o.self_s for o in top if o.op_type in EAGER_UPDATE_OPS)
    writes = [o for o in top if o.op_type in EAGER_UPDATE_TYPES]
    if not writes or held < EAGER_UPDATE_SHARE * s.ops.eager_s:
        return None
    call = next(c for c in s.steps.calls if c.source == "python" and c.name == compiled)
    per_call = call.total_s / call.count
    outside = s.steps.mean_s - per_call  # the steps call it once each
    per = max(s.steps.count, 1)
    counts = ", ".join(f"{o.count / steps_run(s):.0f} {o.name}" for o in top[:4])
    words = (f" They update variables in the steps beside the steps' tf.function "
             f"('{compiled}', {1e3 * per_call:.2f} ms a call): {counts} a step, the pattern "
             "of a moving average of the weights (tf.train.ExponentialMovingAverage.apply, "
             "assign_moving_average) or a hand-written update called outside the function.")
    if outside > 0:
        words += (f" The steps spend {1e3 * outside:.2f} ms "
                  f"({100 * outside / s.steps.mean_s:.0f} %) outside '{compiled}', against "
                  f"{1e3 * s.ops.eager_s / per:.2f} ms of eager op time: the cost is "
                  "dispatching the ops one by one from Python.")
    return words


def _per_step_function(s: WindowSummary) -> str:
    """The tf.function the steps call at least once each (the steps' own compiled step),
    or ""."""
    called = [c for c in s.steps.calls if c.source == "python" and c.count >= s.steps.count]
    return max(called, key=lambda c: c.total_s).name if called and s.steps.count else ""


# XLA compiling a TensorFlow program again: jit_compile=True (or auto-clustering) compiles one
# executable per concrete input shape, a relaxed tf.function signature notwithstanding.
XLA_RECOMPILE_FIX = (
    "give the XLA-compiled function fixed shapes: batch with drop_remainder=True, pad varying "
    "dimensions to a few sizes (padded_batch with padded_shapes, "
    "bucket_by_sequence_length), or leave XLA off (jit_compile=False) for a function whose "
    "shapes must vary; an input_signature or reduce_retracing stops tf.function's tracing, "
    "not XLA's per-shape compiles")


# Traces in a window that also writes checkpoint files: a SavedModel export traces the
# model's functions (and its save and restore functions) on every call.
# Keras's predict function in the window: model.predict on NumPy arrays builds a new
# tf.data pipeline per call and traces its functions, none of them the step's.
PREDICT_TRACES_WORDS = (
    " Keras's predict function ({name}) ran {count} times in the window: each model.predict "
    "call on NumPy arrays builds a new tf.data pipeline and traces its functions again.")
PREDICT_TRACES_FIX = (
    "where the window runs model.predict in the loop, its traces are the pipeline predict "
    "builds per call, not the step's function: call the model in a tf.function on a tensor "
    "(infer = tf.function(lambda x: model(x, training=False)); infer(tf.constant(x))) or "
    "model.predict_on_batch(x), and run it less often; else: ")
EXPORT_FIX = (
    "where the traces come with the checkpoint writes, they are a SavedModel export "
    "(tf.saved_model.save, Keras model.export) tracing the model's functions each time: "
    "export less often or once after training, and save tf.train.Checkpoint (no tracing) "
    "to resume from; else: ")


# tf.distribute's own traces: an eager strategy.gather under MirroredStrategy (or
# MultiWorkerMirroredStrategy) runs CollectiveAllReduce._batch_all_gather, which wraps its
# work in a new tf.function (`compute_gathered_values`) on every call, so every call traces,
# whatever the caller passes.
DISTRIBUTE_EAGER_TRACES = frozenset({"compute_gathered_values"})
DISTRIBUTE_GATHER_FIX = (
    "the traces are tf.distribute's own: strategy.gather called eagerly (outside "
    "tf.function) builds a new tf.function on every call (compute_gathered_values). Gather "
    "inside the step's tf.function (return strategy.gather(...) from it), or gather less "
    "often; an input_signature or reduce_retracing on your function does not stop these")


# jax.clear_caches() drops every jitted function's traces and executables: the next call of
# each traces, lowers and compiles again, whatever its arguments.
JAX_CLEAR_CACHES_FIX = (
    "the job calls jax.clear_caches() between the steps (the Python tracer shows it): it "
    "drops every compiled function, so each jitted function's next call traces and compiles "
    "again; take it out of the training loop (or call it only after training). A jax.jit(f) "
    "made again over the same f does not compile again by itself")


def _clears_caches(s: WindowSummary) -> bool:
    return any(n.endswith(" clear_caches") or n.endswith(" clear_all_caches")
               for n in s.steps.python_between_top + s.steps.pause_top)


# The single trace's likely cause, and its fix.
LAST_BATCH = ("an epoch's last, smaller batch where the dataset does not "
              "batch(..., drop_remainder=True)")
# Keras fit's train function: compile() (run again to fine-tune after changing trainable,
# or with a new optimizer) makes a new one, traced at the next fit's first step, once.
KERAS_FIT_FUNCTIONS = ("multi_step_on_iterator", "one_step_on_iterator")
KERAS_NEW_FUNCTION_FIX = (
    "where the trace is Keras fit's first step after compile() (compiled again, e.g. to "
    "fine-tune after changing trainable: a new train function, traced once), it is paid "
    "once per compile and needs no change; else ")
LAST_BATCH_FIX = (
    "; where the new shape is an epoch's last, smaller batch, batch the dataset with "
    "batch(..., drop_remainder=True) (or pad that batch to the full size with a mask), so "
    "every step has one shape")


# jax.numpy's own jitted functions (the names JAX 0.10 gives their `PjitFunction(f)` calls):
# called outside jit, each compiles once per new input shape, so an array whose shape
# changes every step (a list of losses stacked as it grows) compiles them every step.
JAX_NUMPY_FUNCTIONS = frozenset({
    "stack", "concatenate", "append", "_mean", "_std", "_var", "_average", "_median",
    "_reduce_sum", "_reduce_max", "_reduce_min", "_reduce_prod", "_cumsum", "_where",
    "clip", "sort", "argsort", "_argmax", "_argmin", "_einsum", "matmul", "dot"})
JAX_NUMPY_SHAPES_FIX = (
    "jax.numpy called outside jit compiles each operation for every new input shape: an "
    "array that grows each step (a list of losses stacked again, a buffer appended to) "
    "compiles them in every step. Keep running metrics in fixed shapes (a sum and a count, "
    "or a preallocated array written at the step's index) or compute them inside the "
    "jitted step, and read them every N steps; else: ")


def _retracing(s: WindowSummary) -> list[Advice]:
    """tf.function traces in the window against its step time (XProf counts them as host
    compute and says nothing)."""
    if s.ops.graph_building_s <= 0 or not s.steps.count:
        return []
    per = s.steps.count
    step_s = sum(st.duration_s for st in s.steps.items)
    # A function traced again is instantiated on its first call: that set-up is the
    # trace's cost too.
    setup_s = s.ops.graph_instantiation_s
    cost_s = s.ops.graph_building_s + setup_s
    pct = min(100.0, 100.0 * cost_s / step_s) if step_s > 0 else 0.0
    if pct < RETRACING_PCT:
        return []
    jax = s.environment.framework == "jax"
    fs = s.ops.compiled_functions if jax else ()
    what = ("tf.function built a graph" if not jax else "JAX compiled a jitted function"
            if not fs else "JAX compiled jitted " + ", ".join(fs[:3])
            + (f" and {len(fs) - 3} more" if len(fs) > 3 else ""))
    numpy_own = [f for f in fs if f in JAX_NUMPY_FUNCTIONS]
    again = "compiled" if jax else "traced"
    xla = not jax and 2 * s.ops.xla_compiles >= s.ops.graph_builds
    if xla:
        what, again = "XLA compiled a TensorFlow program", "compiled"
    export = not jax and not xla and s.ops.checkpoint_writes > 0
    cleared = jax and _clears_caches(s)
    gather = [c for c in s.steps.calls if not jax and c.name in DISTRIBUTE_EAGER_TRACES
              and 2 * c.count >= s.ops.graph_builds]
    # One build may be a function's first call inside the window (an evaluation step's
    # first compile): worth a look; two or more are a function built again and again.
    # The message then names an epoch's last batch: the fix gives its remedy (JAX's fix
    # has its own).
    last_batch = LAST_BATCH_FIX if s.ops.graph_builds == 1 and not jax else ""
    predict = next((c for c in s.steps.calls if not jax and not xla and not export
                    and not gather and c.name == KERAS_TF_PREDICT and c.source == "python"),
                   None)
    # One trace in steps of Keras fit: the job passes no Python values to that function.
    recompiled = last_batch and any(c.name in KERAS_FIT_FUNCTIONS for c in s.steps.calls)
    return [RETRACING.advice(
        "warning" if s.ops.graph_builds >= 2 else "info",
        f"{what} {'once' if s.ops.graph_builds == 1 else f'{s.ops.graph_builds} times'} "
        f"in {per} steps "
        f"({1e3 * cost_s / per:.2f} ms per step, {one_digit(pct)} % of step time"
        + (f": {1e3 * s.ops.graph_building_s:.1f} ms tracing and {1e3 * setup_s:.1f} ms "
           + ("instantiating the new function in its first call, before its first kernel"
              if s.ops.graph_instantiations == 1 else
              f"instantiating {s.ops.graph_instantiations} new functions in their first "
              "calls, before their first kernel")
           + " (graph optimization, kernel creation)" if setup_s > 0 else "")
        + (f"): a function is {again} again while training" if s.ops.graph_builds >= 2
           else f"): a function's first call in this window, a batch of a new shape "
                f"({LAST_BATCH}), or, where windows keep showing one, a "
                f"function {again} again and again")
        + (" (jit_compile=True compiles once per new input shape)." if xla else ".")
        + (f" The window also writes {s.ops.checkpoint_writes} checkpoint(s) (SaveV2): a "
           "SavedModel export traces as it saves." if export else "")
        + (f" tf.distribute's {gather[0].name} runs {gather[0].count} times "
           f"({1e3 * gather[0].mean_s:.2f} ms each): an eager strategy.gather traces a new "
           "function per call." if gather else "")
        + (" jax.clear_caches() runs between the steps." if cleared else "")
        + (PREDICT_TRACES_WORDS.format(name=predict.name, count=predict.count)
           if predict else ""),
        {"graph_building_pct": pct, "graph_building_s_per_step": s.ops.graph_building_s / per,
         "graph_instantiation_s_per_step": setup_s / per,
         "graph_builds": float(s.ops.graph_builds),
         # TensorFlow's XLA compiles: in a JAX window every build is one, and 0 misread
         **({} if jax else {"xla_compiles": float(s.ops.xla_compiles)})},
        f"graph building (and the new function's first-run set-up) >= {RETRACING_PCT:g} % "
        "of step time (tfobs)",
        XLA_RECOMPILE_FIX if xla else DISTRIBUTE_GATHER_FIX if gather
        else JAX_CLEAR_CACHES_FIX if cleared
        else (f"{', '.join(numpy_own)} are jax.numpy's own: " + JAX_NUMPY_SHAPES_FIX
              + RETRACING.jax_fix) if numpy_own
        else (EXPORT_FIX + RETRACING.fix + last_batch) if export
        else (PREDICT_TRACES_FIX + RETRACING.fix + last_batch) if predict
        else (KERAS_NEW_FUNCTION_FIX + RETRACING.fix + last_batch) if recompiled
        else (RETRACING.fix + last_batch) if last_batch else "")]
