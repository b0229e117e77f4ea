"""What the window's steps are: markers no tool takes, windows of calls, Python in the step.

A step marker without `_r` (`Trace("train", step_num=i)`, as older guides write it) is no
root: XProf and tfobs find no step. A window of `predict`, serving or `evaluate` calls has
no training step: its figures are per call. Host Python inside the marked step (numpy
preprocessing, `tf.numpy_function` / `tf.py_function` in the step's graph) shows as
'All Others' (time no TensorFlow op covers) and as Python ops on the step's threads.
"""

from __future__ import annotations

import dataclasses

from tfobs.analysis.advice.rule import (
    GPU,
    HIGH_PCT,
    JAX_DOCS,
    LOADER_WAIT_FIX,
    MODERATE_PCT,
    OTHER_THREAD_SHARE,
    PROFILER,
    TFDATA,
    Rule,
    other_thread_share,
    step_pct,
)
from tfobs.analysis.calls import KERAS_JAX_TRAIN_STEP
from tfobs.analysis.step_notes import KERAS_TENSORBOARD_MARKER
from tfobs.analysis.xla_cpu_work import DISPATCH_NOTE_START, OUTSIDE_SHARE
from tfobs.summary import Advice, Steps, WindowSummary

MARKERS_WITHOUT_ROOT = Rule(
    "markers_without_root", "steps",
    "no step found, and events carry `step_num` without the `_r` stat that makes a step "
    "marker a root (XProf and tfobs both ignore them)",
    "add `_r=1` to the marker: tf.profiler.experimental.Trace('train', step_num=i, _r=1) "
    "(any name works once `_r=1` is there), or mark steps with `with tfobs.step(i):`",
    f"{PROFILER}: Profiling custom training loops (tf.profiler.experimental.Trace)",
    jax_fix=(
        "mark each step with jax.profiler.StepTraceAnnotation('train', step_num=i) (it adds "
        "_r=1), or TraceAnnotation('train', step_num=i, _r=1), or `with tfobs.step(i):`"))
# The same in a Keras fit whose own callback writes the markers (one Trace per batch).
KERAS_UNROOTED_FIX = (
    "add `_r=1` where the markers are made (a callback's on_train_batch_begin: "
    "tf.profiler.experimental.Trace('train', step_num=batch, _r=1), entered there and "
    "exited in on_train_batch_end), or pass tfobs.KerasCallback() in fit(callbacks=[...]) "
    "in its place; XProf then finds the steps and judges the input")
# Keras's own TensorBoard callback writes them: its markers cannot take `_r`; a root
# marker beside them can.
KERAS_TENSORBOARD_FIX = (
    "Keras's TensorBoard(profile_batch=...) marks each profiled batch "
    "Trace('Profiled batch', step_num=batch) without _r=1, which no option adds: pass "
    "tfobs.KerasCallback() in fit(callbacks=[...]) beside it (its step markers are roots), "
    "and XProf finds the steps and judges the input")
CALLS_ONLY = Rule(
    "calls_without_steps", "steps",
    "no training step in the window, but tf.function or signature calls from Python "
    "(Model.predict, a serving signature, Model.evaluate; a tf.compat.v1 Session.run)",
    "read the figures per call (tfobs: steps.calls); to time each request or batch as a "
    "step, wrap it in tf.profiler.experimental.Trace('serve', step_num=i, _r=1)",
    f"{PROFILER}: Profiling custom training loops (tf.profiler.experimental.Trace)",
    jax_fix=(
        "read the figures per call (tfobs: steps.calls); to time each request or batch as a "
        "step, wrap it in jax.profiler.StepTraceAnnotation('serve', step_num=i)"))
# Calls of Keras 3's JAX `train_step` without a marker: a `fit` window, not a serving one.
KERAS_JAX_FIX = (
    "these calls are Keras 3's JAX-backend Model.fit (its jitted train_step, one call per "
    "batch), which writes no step marker: pass tfobs.KerasCallback() in fit(callbacks=[...]) "
    "or call tfobs.enable() before fit, so each batch is marked "
    "(jax.profiler.StepTraceAnnotation) and timed as a step by tfobs and XProf")


def marker_fix(name: str, jax: bool) -> str:
    """The fix where an annotation without a step number holds each call: number it."""
    how = (f"jax.profiler.StepTraceAnnotation({name!r}, step_num=i) in place of "
           f"jax.profiler.TraceAnnotation({name!r}) (or TraceAnnotation({name!r}, "
           "step_num=i, _r=1))" if jax else
           f"tf.profiler.experimental.Trace({name!r}, step_num=i, _r=1)")
    return (f"make {name!r} the step marker: {how}, or `with tfobs.step(i):`; XProf and "
            "tfobs then time each one as a step and judge the input")


# A coordinator's calls are round trips to the workers: mark its steps, read the workers.
DISPATCHED_FIX = (
    "mark each step on the coordinator, `with tfobs.step(i):` around its schedule(...) and "
    "join() (tfobs then times the coordinator's steps); each worker's capture reports the "
    "step function's runs (steps.calls, source remote)")
PYTHON_IN_STEP = Rule(
    "python_in_step", "steps",
    "py_function / numpy_function ops run by the step's own graph (outside tf.data) >= 3 % "
    "of step time; the message adds the step's 'All Others' (Python between the ops); or, "
    "on a host-only capture with the Python tracer on (JAX's default), Python functions "
    "innermost >= 3 % of step time (XProf counts them as host compute)",
    "replace tf.numpy_function / tf.py_function in the step with TensorFlow ops, or move "
    "that work into tf.data (Dataset.map with num_parallel_calls=tf.data.AUTOTUNE, "
    "prefetch) so it runs ahead of the step; keep numpy preprocessing out of the marked "
    "step the same way",
    f"{TFDATA}: Vectorizing mapping; {GPU}: 2. Debug the performance of one GPU")
# Another Python thread running Python through the steps: the GIL the step's Python waits for.
THREAD_CONTENTION = Rule(
    "python_thread_contention", "steps",
    "on a host-only capture with the Python tracer on, a Python thread other than the "
    "steps' own runs Python (Python functions innermost, and the short silences between "
    "its events) through >= 50 % of step time",
    "quiet that thread: where it polls (a loop checking a flag, a queue or a file), block on "
    "a queue.Queue or threading.Event with a timeout instead, or sleep between its checks; "
    "where it works (an asynchronous checkpoint writer, a logger, a metrics exporter), run "
    "that work less often (a larger save interval) or in another process "
    "(multiprocessing); Python threads take turns on one GIL, so moving more of the step's "
    "work to a background Python thread would not help",
    f"{GPU}: 2. Debug the performance of one GPU")
# The other thread is a checkpoint library's asynchronous writer: fewer saves, not a
# rewritten thread.
WRITER_FIX = (
    "the thread writes the job's checkpoints in the background: save less often (orbax "
    "CheckpointManagerOptions(save_interval_steps=N); see checkpoint_writes), and keep what "
    "each save writes small (the parameters and optimizer state, not derived values)")
MARKERS_TIME_DISPATCH = Rule(
    "markers_time_dispatch", "steps",
    "host-only capture: XLA's CPU runtime ran at least half its work in the window outside "
    "every step, and more of it than the marked steps' own time (the markers close before "
    "the asynchronously dispatched step runs)",
    "wait for the step's result inside its marker: `state = step(state, batch)` then "
    "`jax.block_until_ready(state)` before the `with jax.profiler.StepTraceAnnotation(...)` "
    "(or `with tfobs.step(i):`) block ends; XProf reads the same markers. Blocking each "
    "step gives up the overlap of the next step's Python with this step's work: where that "
    "overlap matters, mark N steps as one and block once per N",
    f"{PROFILER}: Profiling custom training loops")
# A jitted step dispatches one program (two or three with a jitted metric or update); a step
# run op by op dispatches one per jax.numpy operation: 13 on a 3-op least-squares step,
# 199 on a loop of tiny multiply/add ops. One function called many times per step is a
# coarse marker or a micro-step loop, not this.
OP_BY_OP_CALLS = 8
OP_BY_OP_FUNCTIONS = 2
JAX_CALL_PREFIX = "PjitFunction("
OP_BY_OP = Rule(
    "jax_op_by_op", "steps",
    f"JAX capture: >= {OP_BY_OP_CALLS} jitted calls (`PjitFunction(...)`) per step, of >= "
    f"{OP_BY_OP_FUNCTIONS} functions: "
    "the step runs as one small XLA program per operation (jax.numpy outside jax.jit)",
    "jit the whole step: the loss, its gradient and the update in one function under "
    "jax.jit (a loop of small operations inside it as jax.lax.scan or fori_loop), so each "
    "step dispatches one compiled program; outside jax.jit every jax.numpy call is "
    "dispatched, and its first call compiled, on its own. Where the update is one jit "
    "already, the calls listed run beside it: arithmetic over the parameters (multiply, "
    "add: a tree_map outside jit for an average of the weights, weight decay or "
    "clipping) belongs in the jitted step, returned with the update; for the batch's "
    "indexing and building (x[idx], jnp.array), pass the indices into the jitted step and "
    "gather there, or index NumPy arrays on the host",
    f"{PROFILER}: Profiling custom training loops; JAX documentation: Just-in-time "
    "compilation (jax.jit)")
# The same in a Keras fit on the JAX backend: Keras jits the step unless told not to.
KERAS_OP_BY_OP_FIX = (
    "let Keras compile the step: Model.compile(..., jit_compile=True) (the JAX backend's "
    "default; jit_compile=False or run_eagerly=True runs every layer's jax.numpy ops one "
    "by one, each dispatched on its own); where a layer cannot be traced, fix or wrap that "
    "layer rather than turning compilation off for the model")
# A Python loop around one jitted function whose results the host reads each time (an
# environment stepped in numpy between calls of a jitted policy: 65 calls a step; SciPy's
# optimizer calling a jitted objective: 29 a step): one function >= OP_BY_OP_CALLS calls a
# step and >= LOOP_SHARE of them, with a host read among the step's Python. Not
# operations dispatched one by one: the loop belongs inside the program.
LOOP_SHARE = 1 / 3
HOST_READS = ("_value", "__int__", "__float__", "__array__", "item", "tolist")
LOOP_FIX = (
    "move the loop into the jitted function: write what the Python loop steps through (an "
    "environment, a solver's iterations) in jax.numpy and run it with jax.lax.scan, "
    "fori_loop or while_loop inside one jit, so each step dispatches one program and reads "
    "its results once; a host optimizer (scipy.optimize) has counterparts that run inside "
    "jit (optax.lbfgs in a while_loop, jax.scipy.optimize.minimize); where the loop must "
    "stay on the host, give each call more work (many environments at once, jax.vmap over "
    "them) so there are fewer round trips")
# The window's jitted calls at >= OP_BY_OP_CALLS a step while the steps' own thread makes
# fewer inside them (`steps.jitted_calls_in_steps`): the calls run on another thread (a
# loader normalising each batch with jax.numpy outside jit: 9.7 a step, 1 in the step).
OTHER_THREAD_CALLS_FIX = (
    "the step itself is one jitted program; the other thread's calls (a loader's jax.numpy "
    "outside jit) are each a small program dispatched on its own, under the GIL the "
    "step's thread also needs: do that array work in NumPy on the host, or hand the raw "
    "batch to the jitted step and do it there (one program, no extra dispatches)")
# A parameter-server coordinator whose marked step schedules one step function and waits
# for it (join() or a RemoteValue's fetch() every step): the step functions' seconds over
# the span they run in, the mean number in flight, stay under one (ps_chief: 0.79; the
# same job scheduling 60 before one join: 1.83; tf_keras fit, which joins per epoch: 1.75).
PS_IN_FLIGHT = 1.0
PS_CALLS_PER_STEP = (0.8, 1.25)
PS_GUIDE = ("Distributed training with TensorFlow (tensorflow.org/guide/"
            "distributed_training): ParameterServerStrategy; Parameter server training "
            "tutorial (tensorflow.org/tutorials/distribute/parameter_server_training): "
            "Dispatch training steps to remote workers")
PS_JOIN_EACH_STEP = Rule(
    "ps_join_each_step", "steps",
    "parameter-server coordinator (steps timed by its markers, source 'dispatched'): one "
    f"step function per marked step ({PS_CALLS_PER_STEP[0]:g}-{PS_CALLS_PER_STEP[1]:g}), "
    "each step at least as long as the function's run, and under "
    f"{PS_IN_FLIGHT:g} of them in flight on average (the coordinator waits for each)",
    "schedule several steps before waiting: ClusterCoordinator.schedule(step_fn, ...) "
    "returns at once, so call it for many steps (an epoch, or every 50-100 steps) and then "
    "join() once; read the losses from the returned RemoteValues after the join, not "
    "inside the loop (fetch() waits as join() does). The workers then run step functions "
    "side by side, and the coordinator's dispatch overlaps their work",
    PS_GUIDE)
RULES = (MARKERS_WITHOUT_ROOT, CALLS_ONLY, PYTHON_IN_STEP, THREAD_CONTENTION,
         MARKERS_TIME_DISPATCH, OP_BY_OP, PS_JOIN_EACH_STEP)
# Rules whose figures a window of dispatch-only steps makes meaningless: the time around
# the markers is the compiled work itself, not Python (see markers_time_dispatch).
SUPERSEDED_BY_DISPATCH = ("all_others_bound", "step_gap")
DISPATCH_VERDICT_FIX = (
    "the verdict is XProf's, read from steps that time the dispatch, not the work: read "
    "markers_time_dispatch first, then judge the input again from steps that wait for "
    "their work")
# Python functions the tracer saw inside the step (no TensorFlow op: a data loader, numpy).
TRACED_FIX = (
    "move that Python out of the step: load and preprocess the next batches ahead of it "
    "(tf.data with prefetch; for a Python loader, a background thread that keeps a few "
    "batches ready: a prefetching generator on the training thread, like flax's "
    "prefetch_to_device, still builds each batch inside the step), and vectorize "
    "per-sample Python; a "
    "time.sleep or queue get among the functions is the step waiting for its data. "
    "The Python tracer itself slows each Python call: profile once with it off to size "
    "the rest")
# The step's own Python sleeping (`$time sleep` the function with the most of the step's
# Python): a wait on nothing, whose cause is the job's own code. A step that polls for its
# batch is waiting for its data; a rate limit (a fixed period per step) is no wait for data
# at all, and moving batches ahead of it would change nothing.
SLEEP_FUNCTION = "time sleep"
SLEEP_FIX = (
    "time.sleep holds the step without work: find where the step calls it. Where it paces "
    "the loop (a rate limit: a sleep for the rest of a fixed period per step), the step's "
    "own work is the rest of its time and the step time measures the limit, not the model: "
    "profile a window with the limit off to size the work; where it polls for a batch "
    "(check, sleep, check again), the step is waiting for its data: have a loader thread "
    "fill a queue.Queue a few batches ahead and block in get() rather than sleep; where it "
    "is a retry's backoff, the step waits for what it retries. The Python tracer itself "
    "slows each Python call: profile once with it off to size the rest")
# The step's own wait for its compiled program (`block_until_ready` the function with the
# most of the step's Python, and no other cause named): the Python tracer leaves the wait's
# frame innermost where none of the program's ops is open (its start and end, hand-offs
# between ops) and while it walks the waited tree's leaves; python_time leaves out the
# rest of the wait. No loader's work: loading batches ahead would change nothing.
WAIT_FUNCTION = "block_until_ready"
WAIT_GUIDE = f"{JAX_DOCS}: Asynchronous dispatch"
WAIT_FILES = ("api.py", "array.py")
# Its walk over the waited tree costs microseconds a leaf (3-9 us under the tracer: 0.02-
# 0.03 ms a step for the 4-6 leaves of an MLP or RNN): waiting on one array instead saves
# that and no more, so it comes last, for trees of thousands of leaves.
WAIT_FIX = (
    "the step waits for its own compiled program in block_until_ready: loading batches "
    "ahead would not reach it. That wait's own time is the gaps between the program's ops "
    "(its start, end and hand-offs), which fewer, larger ops shrink; wait less often: "
    "JAX's asynchronous dispatch runs the next step's Python while this one computes when "
    "the loop blocks or reads metrics every N steps, not every step. The wait also walks "
    "the leaves of the tree it is given in Python, microseconds a leaf: waiting on one "
    "array (the loss) instead of the whole state saves that, which matters for trees of "
    "thousands of leaves only. The Python tracer itself slows each Python call: profile "
    "once with it off to size the rest")

# A host-only job whose step waits for its program while another Python thread of the job
# works (a loader's or augmentation pool's NumPy) for this share of the steps' time, short of
# contention's (OTHER_THREAD_SHARE), and the steps not input-bound: that work takes the
# cores the program computes on.
BESIDE_SHARE = 0.25
BESIDE_FIX = (
    "the job's other threads work on the cores the step's compiled program computes on (a "
    "host-only job: NumPy releases the GIL, not the cores): a loader or augmentation pool "
    "that keeps batches ready takes that time from the step. Make each batch cheaper "
    "(vectorised NumPy, augmentation cached or computed once, or moved into the jitted step, "
    "where XLA runs it with the step's own work), or keep fewer worker threads, just enough "
    "to stay ahead; worker processes help only where the machine has cores to spare")

# Reading device values on the host, by JAX's Python (float(loss): array.py) or by NumPy
# (np.asarray(loss): the array's C++ __array__, `steps.python_device_read_s`).
DEVICE_READ_FIX = (
    "keep metrics on the device (accumulate them in the jitted step) and read them every N "
    "steps, not every step; read a vector once (np.asarray(v), jax.device_get), never "
    "element by element (float(v[i]) in a loop is one copy per element)")
DEVICE_READ_SHARE = 1 / 3  # of the traced Python, from which the reads are named

# Python the JAX stack itself runs in the step, known by file and function (the tracer
# names files by their base name only): a loader's fix would not reach it.
# A jitted call JAX runs through its Python dispatch (pjit.py, pxla.py), not its C++ one.
_SLOW_DISPATCH = (
    "JAX's Python dispatch path: jitted calls that left their C++ fast path (a host "
    "callback in the step, or an argument re-checked on every call)",
    "keep host callbacks out of the jitted step and pass it arrays of a fixed dtype and "
    "sharding, not Python scalars, so each call takes the compiled fast path")
# The job's own jax.device_put of host batches in the step (a sharding's split done in JAX's
# Python, pxla.py shard_args under api.py device_put), not a jitted call's dispatch.
_DEVICE_PUT = (
    "jax.device_put of host arrays in the step (JAX's Python checking each array and "
    "splitting it over the devices of its sharding, pxla.py shard_args)",
    "put the next batches on the devices ahead of the step: a thread or prefetching "
    "iterator calling jax.device_put a batch or two ahead (e.g. "
    "flax.jax_utils.prefetch_to_device), or data that fits kept on the devices once and "
    "indexed inside jax.jit")
# A function lowered and compiled inside the step: each jax.jit(...) made in the loop (a new
# lambda or partial: its cache is keyed on the function object) compiles at its first call,
# with the arrays it closes over baked into the program as constants.
_COMPILING = (
    "JAX lowering and compiling a function inside the step (its compile cache key "
    "serializing the new program: see tf_function_retracing)",
    "make each jax.jit(...) once, outside the loop, and pass what changes (the weights, a "
    "learning rate) as arguments: a jit of a new lambda or functools.partial each call "
    "compiles every time, and the arrays it closes over are baked into the program as "
    "constants (a larger program to compile, a new one whenever they change); keep the "
    "jitted function's input shapes, dtypes and static arguments the same each step")
# A function traced to a jaxpr with no compile after it: jax.make_jaxpr, jax.eval_shape, a
# jitted function's .trace / .lower, called in the step (a shape check or a size log).
_TRACING_ONLY = (
    "JAX tracing a function in the step without running it (jax.make_jaxpr, "
    "jax.eval_shape, jitted.trace / .lower: each call traces the Python function again)",
    "call jax.make_jaxpr, jax.eval_shape or .lower() once, before the loop, and keep what "
    "they return (a step's shapes and program do not change between steps of one input "
    "shape); where a compile follows the tracing, see tf_function_retracing")
# Equinox's filter_jit splits the model into arrays and the rest, and joins them again, in
# Python on every call (equinox/_jit.py, _filters.py; the module's own attribute reads).
_EQUINOX_FILTER = (
    "equinox's filter_jit splitting and rejoining the model's pytree in Python on every "
    "call (eqx.partition / eqx.combine over every leaf)",
    "partition the model once (params, static = eqx.partition(model, eqx.is_array)) and "
    "jax.jit a step that takes and returns params and the optimizer state, calling "
    "eqx.combine(params, static) inside it, so no call walks the model in Python "
    "(filter_jit pays that walk at every call)")
# A SciPy optimizer driving a jitted objective: its iterations run on the host, each
# objective call a jitted call whose value and gradient are copied back.
_HOST_OPTIMIZER = (
    "a SciPy optimizer running on the host (scipy.optimize: its iterations in SciPy's code, "
    "each objective call a jitted call and a copy back)",
    "run the optimizer on the device, inside jit: optax.lbfgs (or another optax solver) in "
    "a jax.lax.while_loop, or jax.scipy.optimize.minimize(method='BFGS'), so the whole fit "
    "is one compiled program; where SciPy must stay, hand it the value and gradient of one "
    "jitted value_and_grad call, read once per call")
# gc.collect() called by the job (the tracer names the C function `gc collect`; Python's
# own automatic collections are no call and leave no event): a full collection walks every
# object the process holds, 107-111 ms with 200,000 small dicts kept.
GC_FIX = (
    "take gc.collect() out of the loop or run it rarely (between epochs, every few thousand "
    "steps): each call walks every object the process holds; call gc.freeze() once after "
    "setup so long-lived objects (data sets, the model's Python, histories) leave later "
    "collections, and keep per-step Python objects out of long-lived lists (a log of dicts "
    "per step); a loader's fix would not reach it")
GC_GUIDE = "Python documentation (docs.python.org): gc, Garbage Collector interface (gc.freeze)"
MEMORY_PROFILE_FIX = (
    "take the memory profile once, at the step under study, or every N steps behind a flag, "
    "not every step: each call snapshots every live buffer and gzips it on the step's "
    "thread, and the step waits for it; a loader's fix would not reach it")
MEMORY_PROFILE_GUIDE = f"{JAX_DOCS}: Profiling device memory"
FRAMEWORK_PYTHON = (
    ("graphlib.py", ("_graph_flatten", "_graph_unflatten", "flatten", "unflatten"),
     "Flax NNX walking the model's object graph in Python on each nnx.jit call",
     "split the model once (graphdef, state = nnx.split(model)) and jax.jit a step that "
     "takes and returns the state, calling nnx.merge(graphdef, state) inside it (or wrap "
     "the jitted call in nnx.cached_partial), so no call walks the graph in Python"),
    # Tracing a function for a compile calls bind too: the tracer's own function names it
    # (framework_python leaves bind out where it is there).
    # Every function of partial_eval.py is tracing (JAX 0.10 names its per-primitive frame
    # default_process_primitive, older ones process_primitive).
    ("partial_eval.py", ("*",),
     "JAX tracing a function to compile it, inside the step (a new shape, dtype, input "
     "tree or static argument: see tf_function_retracing)",
     "keep the jitted function's inputs the same shapes and dtypes each step (padding to a "
     "few bucket sizes, each warmed by one call before training), a dict batch's keys the "
     "same every step, and its static arguments few (a learning rate as a traced argument, "
     "not static_argnums)"),
    # A compile's own Python: its cache key serializes the new program (cache_key.py
    # _serialize_ir), then XLA compiles it (compiler.py); the tracing before it calls bind.
    ("cache_key.py", ("*",), *_COMPILING),
    ("compiler.py", ("*",), *_COMPILING),
    ("core.py", ("bind", "bind_with_trace"),
     "JAX dispatching operations one at a time outside jit (a primitive's bind)",
     "move those operations (random.split, metric math, optimizer updates) into the jitted "
     "step: outside jit each one pays Python dispatch. Where they are the jitted step's own "
     "operations, jit was off for those steps (a `with jax.disable_jit():` block or "
     "jax.config.update('jax_disable_jit', True) left in the loop for debugging): take it "
     "out"),
    ("indexing.py", ("_rewriting_take", "_parse_indices", "to_static_slice", "_getitem"),
     "JAX indexing a jax.Array outside jit (x[:64]: each slice a program of its own)",
     "slice on the host before the batch goes to the device (numpy arrays, or the loader "
     "yielding batches), or inside the jitted step"),
    ("array.py", ("_value", "__int__", "__float__", "__array__", "item", "tolist"),
     "reading device values on the host (int(x), float(loss), np.asarray), each a wait for "
     "the device and a copy back", DEVICE_READ_FIX),
    ("pjit.py", ("cache_miss", "_pjit_call_impl_python"), *_SLOW_DISPATCH),
    ("pjit.py", ("_trace_for_jit",), *_TRACING_ONLY),
    ("api.py", ("make_jaxpr_f", "eval_shape"), *_TRACING_ONLY),
    # jax.device_get of a tree reads it leaf by leaf: each leaf a wait and a copy of its
    # own (a dict of 36 scalar metrics: 0.35 ms, against 0.03 ms for one array of 36).
    ("api.py", ("_device_get", "device_get"),
     "jax.device_get of a tree of device values (a metrics dict: each leaf waited for and "
     "copied back on its own)",
     "return the step's scalar metrics as one array (jnp.stack([...]) in the jitted step, "
     "the names kept in a host-side list) and read that array once, every N steps rather "
     "than every step: jax.device_get of a dict reads its leaves one by one"),
    ("_filters.py", ("combine", "_combine", "partition", "filter", "is_array"),
     *_EQUINOX_FILTER),
    ("_jit.py", ("_call", "__call__", "_preprocess", "_postprocess", "hashable_filter",
                 "hashable_partition", "hashable_combine"), *_EQUINOX_FILTER),
    ("_module.py", ("__getattribute__",), *_EQUINOX_FILTER),
    ("pxla.py", ("__call__", "shard_args"), *_SLOW_DISPATCH),
    # A device memory profile (a pprof snapshot of every live buffer, gzipped on the host)
    # taken each step: a debugging line left in the loop, no loader's work.
    ("profiler.py", ("device_memory_profile", "save_device_memory_profile"),
     "JAX's device memory profile taken in the step (jax.profiler.device_memory_profile / "
     "save_device_memory_profile: a pprof snapshot of every live buffer, compressed on the "
     "host)",
     MEMORY_PROFILE_FIX),
    # SciPy's optimizers on the host: L-BFGS-B's compiled core (`scipy.optimize._lbfgsb
    # setulb`, a C function the tracer names by module) and their Python.
    ("scipy.optimize.", ("*",), *_HOST_OPTIMIZER),
    ("_lbfgsb_py.py", ("*",), *_HOST_OPTIMIZER),
    ("_differentiable_functions.py", ("*",), *_HOST_OPTIMIZER),
    ("_minimize.py", ("*",), *_HOST_OPTIMIZER),
    ("gc", ("collect",),
     "Python's garbage collector run by the job (gc.collect(): a full collection walks "
     "every object the process holds)", GC_FIX),
    ("array_constructors.py", ("*",),
     "jnp.array / jnp.asarray making device arrays from Python values in the step (a "
     "nested list is read one value at a time; a Python number, such as a step counter "
     "passed to jax.random.fold_in, is one more small array and copy each step)",
     "build batches as NumPy arrays (np.asarray(rows, np.float32) once, or a loader that "
     "yields arrays) and hand those to the jitted step; keep counters and keys on the "
     "device (carry them in the jitted step's state, fold_in inside jit)"),
)
# jnp.copy of device arrays outside jit runs through array_constructors.py's array (one
# `PjitFunction(copy)` program per array): a copy of the parameters each step, such as a
# backup kept because the step donates them, is no array made from Python values. On the
# project's VM (the MLP 128-512-512-10): 2.5-2.6 ms a step with the copy of its 6 leaves,
# 2.1 ms with one jitted copy of the tree, 1.7 ms with the step not donating (the old
# buffers kept, no copy), against 1.8 ms donated without a copy.
DEVICE_COPY_FIX = (
    "drop the per-leaf copies: to keep the parameters for a rollback, call the step without "
    "donating them (jax.jit without donate_argnums: the old buffers stay alive, no copy made); "
    "where a copy must be made, copy the whole tree in one jitted call "
    "(jax.jit(lambda t: jax.tree.map(jnp.copy, t))), one program instead of one per array")


def _device_copies(st: Steps) -> str:
    """What the step's jnp.copy calls are, where the job copies device arrays outside jit in
    every step (`PjitFunction(copy)` called at least once a step), else ''."""
    c = next((c for c in st.calls if c.source == "python" and c.count >= st.count
              and c.name == f"{JAX_CALL_PREFIX}copy)"), None)
    if c is None:
        return ""
    return (f"jnp.copy of device arrays outside jit ({c.count} calls in the window, "
            f"{1e3 * c.mean_s:.2f} ms each: each array copied by a program of its own, "
            "through jnp.array; a tree_map(jnp.copy) over the parameters, such as a backup "
            "kept because the step donates them)")


# Files whose Python is a function traced or compiled: the bind calls under them are
# tracing, and a loader's fix does not reach them.
_TRACING = ("partial_eval.py", "cache_key.py", "compiler.py")
_COMPILE_FIXES = ({fix for file, _, _, fix in FRAMEWORK_PYTHON if file in _TRACING}
                  | {_TRACING_ONLY[1]})
# Python no loader runs: the step's fix is the cause's own, not loading batches ahead.
_NOT_LOADER_FIXES = _COMPILE_FIXES | {MEMORY_PROFILE_FIX, GC_FIX, _HOST_OPTIMIZER[1],
                                      DEVICE_COPY_FIX}
# The guide of a cause whose fix is its own (the tf.data guide is no help there).
_OWN_GUIDES = {MEMORY_PROFILE_FIX: MEMORY_PROFILE_GUIDE, GC_FIX: GC_GUIDE}
# Python run by JAX's host callbacks: the compiled step stops while it runs.
CALLBACK_SHARE = 1 / 3  # of the traced Python, from which the callbacks are named
CALLBACK_FIX = (
    "each JAX host callback stops the compiled step to run Python, and sends every call of "
    "it down JAX's slower Python dispatch: take jax.debug.print and io_callback logging out "
    "of the training step (return the values from the step and print or log them on the "
    "host every N steps), and keep other io_callback / pure_callback work out of it "
    "(precompute it, or do it in the input pipeline). A callback behind lax.cond (every N "
    "steps) saves its own time only: a program that holds a host callback leaves JAX's "
    "fast dispatch at every call, whether the callback runs or not")

# Python inside a tf.data iterator's next(): a JAX step fed by tf.data waiting for its batch.
TFDATA_NEXT_SHARE = 1 / 3  # of the traced Python, from which the wait is named
TFDATA_NEXT_FIX = (
    "the step waits for tf.data's next batch, which XProf counts as host compute "
    "(jax.profiler records none of tf.data's own events, so its input verdict cannot see "
    "the wait): make the pipeline keep up (Dataset.map(..., num_parallel_calls=tf.data.AUTOTUNE), "
    "prefetch(tf.data.AUTOTUNE) last, cache() after deterministic work, batch before a "
    "vectorizable map) and take the next batch while the step runs (a background thread "
    "or a prefetching iterator); timing next(it) alone shows what the pipeline delivers")

PYTHON_OP_PCT = MODERATE_PCT


def check(s: WindowSummary) -> list[Advice]:
    st = s.steps
    out: list[Advice] = []
    if not st.count and st.unrooted_markers:
        out.append(MARKERS_WITHOUT_ROOT.advice(
            "warning",
            f"{st.unrooted_markers} events carry step_num but no _r stat, so no step was "
            "found: a step marker must be a root (_r=1).",
            {"unrooted_markers": float(st.unrooted_markers)},
            "no step found and markers without _r (XProf: ProcessRootEvent takes only roots)"))
    elif st.method == "inferred" and st.unrooted_markers:
        out.append(MARKERS_WITHOUT_ROOT.advice(
            "warning",
            f"{st.unrooted_markers} events carry step_num but no _r stat, so XProf finds no "
            "step (and no input verdict): a step marker must be a root (_r=1). tfobs timed "
            "the steps by Keras's training function instead.",
            {"unrooted_markers": float(st.unrooted_markers)},
            "steps only inferred and markers without _r (XProf: ProcessRootEvent takes only "
            "roots)",
            KERAS_TENSORBOARD_FIX if f"'{KERAS_TENSORBOARD_MARKER}'" in st.note
            else KERAS_UNROOTED_FIX))
    if not st.count and st.calls:
        c = st.calls[0]
        dispatched = c.source == "dispatched"
        keras_jax = c.source == "python" and c.name == KERAS_JAX_TRAIN_STEP
        out.append(CALLS_ONLY.advice(
            "warning" if keras_jax or c.marker else "info",
            (f"No step marker: the window holds {c.count} calls of {c.name!r} (Keras's "
             f"JAX-backend fit, unmarked), {c.per_s:.1f} per s, {1e3 * c.mean_s:.2f} ms "
             "of dispatch per call." if keras_jax else
             f"No training step: the window holds {c.count} calls of {c.name!r}, "
             f"{c.per_s:.1f} per s, {1e3 * c.mean_s:.2f} ms per call"
             + (", each run on another task (a parameter-server coordinator)." if dispatched
                else f", each inside an annotation {c.marker!r} ({c.count} of them, "
                f"{1e3 * c.marker_mean_s:.2f} ms each): a step marker without a step "
                "number, which neither XProf nor tfobs takes as a step." if c.marker
                else ".")),
            {"calls": float(c.count), "calls_per_s": c.per_s, "call_s": c.mean_s}
            | ({"marker_s": c.marker_mean_s} if c.marker else {}),
            "no step found, function calls present",
            DISPATCHED_FIX if dispatched else KERAS_JAX_FIX if keras_jax
            else marker_fix(c.marker, s.environment.framework == "jax") if c.marker
            else ""))
    if st.count and st.mean_s > 0 and dispatch_only(st):
        total = st.work_outside_s / st.work_outside_ratio
        out.append(MARKERS_TIME_DISPATCH.advice(
            "warning",
            f"The marked steps close before their compiled work runs: "
            f"{100 * st.work_outside_ratio:.0f} % of the window's {1e3 * total:.3f} ms of work "
            f"on XLA's CPU threads ran outside every step, whose markers hold "
            f"{1e3 * st.mean_s * st.count:.3f} ms (JAX's asynchronous dispatch); step time, "
            "breakdown and input verdict describe the dispatch.",
            {"work_outside_s": st.work_outside_s, "work_outside_ratio": st.work_outside_ratio,
             "steps_s": st.mean_s * st.count},
            f"XLA CPU work outside every step >= {100 * OUTSIDE_SHARE:g} % of it and >= the "
            "steps' own time (tfobs)"))
    other = other_thread_share(st)
    if other:
        thread = f"'{st.python_other_thread}'" if st.python_other_thread else "with no name"
        most = (f" (most in {', '.join(st.python_other_thread_top)})"
                if st.python_other_thread_top else "")
        # A checkpoint library's writer thread (orbax's asynchronous save): the saves are
        # the work to make rarer, which checkpoint_writes sizes.
        writer = s.ops.checkpoint_writes > 0 and any(
            "checkpoint" in f.partition(" ")[0].lower() for f in st.python_other_thread_top)
        out.append(THREAD_CONTENTION.advice(
            "warning",
            f"A Python thread other than the steps' own (thread {thread}) ran Python "
            f"through {100 * other:.0f} % of the steps' time{most}: Python threads take turns "
            "on one GIL, so the step's Python and its framework's dispatch wait their turn, "
            "which the breakdown shows as host compute and 'All Others'."
            + (" The thread is a checkpoint library's writer (checkpoint_writes)." if writer
               else ""),
            {"other_thread_pct": 100 * other,
             "other_thread_s_per_step": st.python_other_thread_s},
            f"another Python thread's Python >= {100 * OTHER_THREAD_SHARE:g} % of step time "
            "(tfobs, Python tracer on)",
            WRITER_FIX if writer else ""))
    op_by_op = (_op_by_op(st, s.environment.keras) if st.count and st.interval_s > 0
                else None)
    if op_by_op is not None:
        out.append(op_by_op)
    joined = _join_each_step(st)
    if joined is not None:
        out.append(joined)
    if st.count and st.mean_s > 0:
        other_pct = step_pct(s, "other")
        op_pct = 100.0 * st.python_op_s / st.mean_s
        traced_pct = 100.0 * st.python_traced_s / st.mean_s
        # Markers that time the dispatch alone: the steps' pace is their period, which holds
        # the queued work (0.01 ms of Python in 0.09 ms markers, 2.2 ms steps apart).
        dispatched = dispatch_only(st) and (
            100.0 * st.python_traced_s < PYTHON_OP_PCT * st.interval_s)
        if op_pct < PYTHON_OP_PCT and traced_pct >= PYTHON_OP_PCT and not dispatched:
            beside = st.python_other_thread_s / st.mean_s
            host_busy = (beside if s.environment.device_count == 0
                         and s.input_bound.verdict == "not"
                         and BESIDE_SHARE <= beside < OTHER_THREAD_SHARE else 0.0)
            out.append(_traced(st, traced_pct,
                               op_by_op.fix if op_by_op and op_by_op.fix
                               != OTHER_THREAD_CALLS_FIX else "",
                               s.environment.framework == "jax",
                               s.ops.graph_building_s / st.count, host_busy))
        if op_pct >= PYTHON_OP_PCT:
            out.append(PYTHON_IN_STEP.advice(
                "warning" if op_pct + other_pct >= HIGH_PCT else "info",
                f"{op_pct + other_pct:.1f} % of step time is host Python inside the step: "
                f"{op_pct:.1f} % in py_function / numpy_function ops of the step's graph, "
                f"{other_pct:.1f} % with no TensorFlow op running ('All Others': numpy or "
                "Python between the calls).",
                {"python_op_pct": op_pct, "other_pct": other_pct,
                 "python_op_s_per_step": st.python_op_s},
                f"Python ops in the step >= {PYTHON_OP_PCT:g} % of step time (tfobs); "
                f"warning from {HIGH_PCT:g} % with 'All Others'"))
    return out


def _join_each_step(st: Steps) -> Advice | None:
    """ps_join_each_step: a coordinator's marked steps that each dispatch one step function
    and wait for it (the functions' runs one at a time); None otherwise."""
    if st.method != "markers_remote" or not st.calls or st.interval_s <= 0:
        return None
    c = st.calls[0]
    if c.source != "dispatched" or c.mean_s <= 0:
        return None
    in_flight = c.mean_s * c.per_s  # the runs' seconds over the span they run in
    per_step = c.per_s * st.interval_s
    lo, hi = PS_CALLS_PER_STEP
    if not (lo <= per_step <= hi and in_flight < PS_IN_FLIGHT and st.mean_s >= c.mean_s):
        return None
    return PS_JOIN_EACH_STEP.advice(
        "warning",
        f"Each marked step dispatches one {c.name!r} to the workers and waits for it: "
        f"{in_flight:.2f} of them run at a time on average, so the step functions run one "
        f"after another (with several workers, all but one idle), each "
        f"{1e3 * st.mean_s:.2f} ms step holding one {1e3 * c.mean_s:.2f} ms run and "
        f"{1e3 * (st.mean_s - c.mean_s):.2f} ms of the coordinator's own dispatch and wait.",
        {"calls_in_flight": in_flight, "calls_per_step": per_step, "call_s": c.mean_s,
         "step_s": st.mean_s},
        f"one dispatched step function per step ({lo:g}-{hi:g}), the step >= its run, < "
        f"{PS_IN_FLIGHT:g} in flight on average (tfobs)")


def _op_by_op(st: Steps, keras: bool = False) -> Advice | None:
    """jax_op_by_op: the window's jitted calls per step (each function's calls per second
    over its own span, times the step period; functions called at least once per step),
    where most are not one function's."""
    # Only functions called in every step: a one-off call (a metric read after the loop)
    # has a "rate" of one over its own duration, thousands per step.
    jitted = [c for c in st.calls if c.source == "python"
              and c.name.startswith(JAX_CALL_PREFIX) and c.count >= st.count]
    per_step = sum(c.per_s for c in jitted) * st.interval_s
    if len(jitted) < OP_BY_OP_FUNCTIONS or per_step < OP_BY_OP_CALLS:
        return None
    top = sorted(jitted, key=lambda c: -c.count)[:4]
    names = ", ".join(c.name[len(JAX_CALL_PREFIX):-1] for c in top)
    call_s = sum(c.per_s * c.mean_s for c in jitted) * st.interval_s  # call time per step
    if 0 < st.jitted_calls_in_steps < OP_BY_OP_CALLS:  # not the steps' own calls
        return OP_BY_OP.advice(
            "info",
            f"The window's jitted calls come to {per_step:.0f} per step of {len(jitted)} "
            f"functions ({names}, ...), but {st.jitted_calls_in_steps:.1f} per step start "
            "inside the steps on their own thread: the rest run on another thread (a "
            "loader running jax.numpy outside jit, each call a small program of its own), "
            "not as the step's operations.",
            {"jitted_calls_per_step": per_step, "jitted_functions": float(len(jitted)),
             "jitted_call_s_per_step": call_s,
             "jitted_calls_in_steps": st.jitted_calls_in_steps},
            f">= {OP_BY_OP_CALLS} jitted calls per step of >= {OP_BY_OP_FUNCTIONS} functions, "
            f"under {OP_BY_OP_CALLS} of them inside the steps on their thread (tfobs)",
            OTHER_THREAD_CALLS_FIX)
    looped = top[0].per_s * st.interval_s
    if (looped >= OP_BY_OP_CALLS and looped >= LOOP_SHARE * per_step
            and _reads_on_host(st.python_traced_top)):
        name = top[0].name[len(JAX_CALL_PREFIX):-1]
        return OP_BY_OP.advice(
            "warning",
            f"Each step calls the jitted {name!r} {looped:.0f} times "
            f"({100 * looped / per_step:.0f} % of its {per_step:.0f} jitted calls, of "
            f"{len(jitted)} functions: {names}) and reads results back on the host: a Python "
            f"loop around a jitted function, not one program a step; {1e3 * call_s:.2f} ms "
            f"of its {1e3 * st.interval_s:.2f} ms period in those calls, each a dispatch and "
            "a round trip the loop waits for.",
            {"jitted_calls_per_step": per_step, "jitted_functions": float(len(jitted)),
             "jitted_call_s_per_step": call_s, "loop_calls_per_step": looped},
            f">= {OP_BY_OP_CALLS} jitted calls per step of >= {OP_BY_OP_FUNCTIONS} functions; "
            f"one function >= {OP_BY_OP_CALLS} a step and >= {100 * LOOP_SHARE:.0f} % of them, "
            "with a host read in the step (tfobs)", LOOP_FIX)
    return OP_BY_OP.advice(
        "warning",
        f"Each step dispatches {per_step:.0f} jitted programs of {len(jitted)} functions "
        f"({names}, ...): the step runs JAX operation by operation, {1e3 * call_s:.2f} ms of "
        f"its {1e3 * st.interval_s:.2f} ms period in those calls (their dispatch: each "
        "small program's own pass over its arrays comes on top).",
        {"jitted_calls_per_step": per_step, "jitted_functions": float(len(jitted)),
         "jitted_call_s_per_step": call_s},
        f">= {OP_BY_OP_CALLS} jitted calls per step of >= {OP_BY_OP_FUNCTIONS} functions "
        "(tfobs)", KERAS_OP_BY_OP_FIX if keras else "")


def _reads_on_host(top: tuple[str, ...]) -> bool:
    """Whether the step's top Python holds a read of device values on the host
    ("array.py:615 _value")."""
    for label in top:
        where, _, function = label.partition(" ")
        if where.split(":")[0] == "array.py" and function in HOST_READS:
            return True
    return False


def dispatch_only(st: Steps) -> bool:
    """Whether the reduction found the steps timing their dispatch (its note says so)."""
    return st.work_outside_ratio > 0 and DISPATCH_NOTE_START in st.note


def framework_python(top: tuple[str, ...], compiled: bool = False
                     ) -> list[tuple[str, str]]:
    """(what, fix) of each FRAMEWORK_PYTHON entry among the step's top Python functions
    ("graphlib.py:882 _graph_flatten"), in FRAMEWORK_PYTHON's order, each cause once (two
    files may hold one: pjit.py, pxla.py). `compiled`: JAX compiled inside the steps for
    at least as long as they ran Python, so a primitive's bind there is the tracing before
    the compile (its own frames may fall outside the top three), not dispatch outside jit,
    and pjit.py's `_trace_for_jit` the compile's tracing, not a trace without a run."""
    seen = set()
    for label in top:
        where, _, function = label.partition(" ")
        seen.add((where.split(":")[0], function))
    files = {file for file, _ in seen}
    found = [(file, what, fix) for file, functions, what, fix in FRAMEWORK_PYTHON
             if any((file, f) in seen for f in functions)
             or ("*" in functions and (file in files or file.endswith(".") and any(
                 f.startswith(file) for f in files)))]
    # pxla.py's shard_args beside api.py's device_put and no jitted call on JAX's Python
    # path (pjit.py's, pxla.py's __call__): a jax.device_put of host arrays with a sharding
    # in the step, split over the devices in JAX's Python (a 2x2 mesh, 256-row batches:
    # 0.5 ms a step), not a jitted call's slow dispatch.
    if ({("pxla.py", "shard_args"), ("api.py", "device_put")} <= seen and not any(
            (file, f) in seen for file, f in (("pjit.py", "cache_miss"),
                                              ("pjit.py", "_pjit_call_impl_python"),
                                              ("pxla.py", "__call__")))):
        found = [(file, *_DEVICE_PUT) if fix == _SLOW_DISPATCH[1] else (file, what, fix)
                 for file, what, fix in found]
    # pjit.py's _trace_for_jit traces for a compile as well as for make_jaxpr / .lower:
    # where the steps compiled, its tracing is the compile's, not a trace without a run.
    if compiled or any(file in _TRACING for file, _, _ in found):
        trace = next(e for e in FRAMEWORK_PYTHON if e[0] == "partial_eval.py")
        found = [(trace[0], trace[2], trace[3]) if file == "pjit.py" and fix == _TRACING_ONLY[1]
                 else (file, what, fix) for file, what, fix in found]
        found = sorted(found, key=lambda e: [f for f, *_ in FRAMEWORK_PYTHON].index(e[0]))
    tracing = any(fix in _COMPILE_FIXES for _, _, fix in found)
    if compiled and not tracing and any(file == "core.py" for file, _, _ in found):
        trace = next(e for e in FRAMEWORK_PYTHON if e[0] == "partial_eval.py")
        found = [(trace[0], trace[2], trace[3]) if file == "core.py" else (file, what, fix)
                 for file, what, fix in found]
        tracing = True
    causes = [(what, fix) for file, what, fix in found if not (tracing and file == "core.py")]
    return list(dict.fromkeys(causes))


def _waits_first(top: tuple[str, ...]) -> bool:
    """Whether the step's Python is most in JAX's `block_until_ready` ("api.py:2479
    block_until_ready")."""
    if not top:
        return False
    where, _, function = top[0].partition(" ")
    return function == WAIT_FUNCTION and where.split(":")[0] in WAIT_FILES


def _traced(st: Steps, traced_pct: float, op_by_op: str = "", jax: bool = False,
            compile_s: float = 0.0, beside: float = 0.0) -> Advice:
    """python_in_step from the Python tracer's events, naming the host callbacks and the
    tf.data waits that hold a share of them, JAX's own dispatch of a step run op by op
    (`op_by_op`: the fix of jax_op_by_op where it fired; it comes first) and, in a JAX
    window (`jax`), the JAX stack's own Python."""
    callbacks = st.python_callback_s / st.python_traced_s
    tfdata = st.python_tfdata_next_s / st.python_traced_s
    other = other_thread_share(st)
    parts, fixes = [], []
    if other:
        parts.append(f"another Python thread ran Python through {100 * other:.0f} % of the "
                     "steps' time, so the step's own Python waits for the GIL "
                     "(python_thread_contention)")
        fixes.append(THREAD_CONTENTION.fix)
    looped = op_by_op == LOOP_FIX
    if op_by_op:
        parts.append("the step's Python loop around a jitted function is in it "
                     "(jax_op_by_op)" if looped else
                     "JAX dispatching the step operation by operation is in it "
                     "(jax_op_by_op)")
        fixes.append(op_by_op)
    if callbacks >= CALLBACK_SHARE:
        # More than the Python the tracer saw: callbacks XLA ran on its own threads.
        where = "of it" if callbacks <= 1 else "more, on XLA's threads,"
        parts.append(f"{1e3 * st.python_callback_s:.2f} ms per step {where} inside JAX host "
                     "callbacks (jax.debug.print, io_callback, pure_callback)")
        fixes.append(CALLBACK_FIX)
    if tfdata >= TFDATA_NEXT_SHARE:
        parts.append(f"{1e3 * st.python_tfdata_next_s:.2f} ms per step of it inside a "
                     "tf.data iterator's next(), waiting for the batch")
        fixes.append(TFDATA_NEXT_FIX)
    loader = st.python_loader_wait_s / st.python_traced_s
    if loader >= TFDATA_NEXT_SHARE:
        maker = (f" (that thread runs {', '.join(st.python_other_thread_top)})"
                 if st.python_other_thread_top else "")
        parts.append(f"{1e3 * st.python_loader_wait_s:.2f} ms per step of it waiting in "
                     "queue.get / Future.result for a batch another thread or process "
                     f"makes, not running Python{maker}")
        fixes.append(LOADER_WAIT_FIX)
    reads = st.python_device_read_s / st.python_traced_s
    if reads >= DEVICE_READ_SHARE:
        parts.append(f"{1e3 * st.python_device_read_s:.2f} ms per step of it in np.asarray "
                     "or np.array of device values (a jax.Array): each call waits for the "
                     "program computing the value, then copies it back, no Python a loader "
                     "would take over")
        fixes.append(DEVICE_READ_FIX)
    # The step's own sleep, where it is the most of the Python and no wait named above.
    sleeping = (bool(st.python_traced_top) and st.python_traced_top[0] == SLEEP_FUNCTION
                and not (callbacks >= CALLBACK_SHARE or tfdata >= TFDATA_NEXT_SHARE
                         or loader >= TFDATA_NEXT_SHARE))
    if sleeping:
        parts.append("most of it the step sleeping in time.sleep: a wait on nothing (a "
                     "rate limit pacing the loop, a poll for data between its checks, a "
                     "retry's backoff), not Python work")
        fixes.append(SLEEP_FIX)
    jax_own = False
    if jax:
        # JAX's compiles in the steps (per step) at least the steps' Python: the bind under
        # them is tracing, unless the step also dispatches op by op (jax_op_by_op).
        causes = framework_python(st.python_traced_top,
                                  not op_by_op and compile_s >= st.python_traced_s > 0)
        # The loop's reads of each call's result are the loop's (its fix moves them).
        read = next(e for e in FRAMEWORK_PYTHON if e[0] == "array.py")[3]
        causes = [(w, f) for w, f in causes if not (looped and f == read)]
        # jnp.array's Python under jnp.copy of device arrays: the copies, named as such.
        ctor = next(e for e in FRAMEWORK_PYTHON if e[0] == "array_constructors.py")
        copies = _device_copies(st) if (ctor[2], ctor[3]) in causes else ""
        if copies:
            causes = [(copies, DEVICE_COPY_FIX) if (w, f) == (ctor[2], ctor[3]) else (w, f)
                      for w, f in causes]
        for what, fix in causes:
            parts.append(f"among it, {what}")
            fixes.append(fix)
        # Tracing and compiling alone (Python JAX runs for a new program), or a memory
        # profile: Python of JAX's own, which loading batches ahead would not reach.
        jax_own = bool(causes) and all(fix in _NOT_LOADER_FIXES for _, fix in causes)
    waiting = jax and not fixes and _waits_first(st.python_traced_top)
    if waiting:
        parts.append("most of it in block_until_ready, the step waiting for its own "
                     "program where none of its ops ran and walking the waited tree's "
                     "leaves: no Python a loader would take over")
        if beside:  # `beside`: another thread's share of the steps' time on a host-only job
            most = (f" (most in {', '.join(st.python_other_thread_top)})"
                    if st.python_other_thread_top else "")
            parts.append(f"meanwhile another Python thread of the job ran Python through "
                         f"{100 * beside:.0f} % of the steps' time{most}, on the cores the "
                         "program the step waits for computes on")
            fixes.append(BESIDE_FIX)
        fixes.append(WAIT_FIX)
    held_pct = max(traced_pct, 100.0 * st.python_callback_s / st.mean_s)
    found = PYTHON_IN_STEP.advice(
        "warning" if held_pct >= HIGH_PCT else "info",
        f"{traced_pct:.1f} % of step time runs Python functions inside the step "
        f"({1e3 * st.python_traced_s:.2f} ms per step; most in "
        f"{', '.join(st.python_traced_top)}), which XProf counts as host compute "
        "(the Python tracer's events)" + "".join(f"; {p}" for p in parts) + ".",
        {"python_traced_pct": traced_pct,
         "python_traced_s_per_step": st.python_traced_s,
         "callback_share": callbacks, "tfdata_next_share": tfdata,
         "loader_wait_share": loader,
         **({"other_thread_pct": 100 * other} if other else {}),
         **({"beside_thread_pct": 100 * beside} if waiting and beside else {}),
         **({"device_read_share": reads} if reads >= DEVICE_READ_SHARE else {})},
        f"Python functions innermost in the step >= {PYTHON_OP_PCT:g} % of step time "
        f"(tfobs, Python tracer on); warning from {HIGH_PCT:g} %",
        # The usual fix moves Python to a background thread: the cause, under contention.
        # Where host callbacks hold the Python, loading batches ahead is beside the point.
        # A loader that already works ahead and does not keep up: loading ahead is no fix.
        "; then ".join(fixes if other or callbacks >= CALLBACK_SHARE
                       or loader >= TFDATA_NEXT_SHARE or reads >= DEVICE_READ_SHARE
                       or sleeping or waiting or jax_own or looped
                       else [*fixes, TRACED_FIX])
        if fixes else TRACED_FIX)
    # The wait's fix is JAX's asynchronous dispatch, not tf.data's guide; so is a read's;
    # a loop's is jit's, a memory profile's or a gc.collect()'s their own pages.
    reading = reads >= DEVICE_READ_SHARE and not (other or callbacks >= CALLBACK_SHARE
                                                  or loader >= TFDATA_NEXT_SHARE)
    if looped:  # the loop's fix, first, is jit's
        return dataclasses.replace(found, guide=OP_BY_OP.guide)
    if waiting or reading:
        return dataclasses.replace(found, guide=WAIT_GUIDE)
    if fixes and fixes[0] in _OWN_GUIDES and all(fix in _NOT_LOADER_FIXES for fix in fixes):
        return dataclasses.replace(found, guide=_OWN_GUIDES[fixes[0]])
    return found
