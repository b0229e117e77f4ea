"""WindowSummary: the plain data one profile window reduces to.

This is the contract between stages: `analysis` builds it, exporters and the CLI only read
it. Frozen dataclasses, JSON round-trip through `to_dict()` / `WindowSummary.from_dict()`.
Times are seconds (float) unless a name says `_ns`; `_ns` fields are wall-clock nanoseconds
since the Unix epoch, so spans and exemplars can be placed on a real timeline.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

SCHEMA_VERSION = 1

# The steps' top events a window's summary holds in all: each step's `top_n` longest, and
# of those the window's longest this many, the spans one window's trace can hold
# (`trace_max_spans`'s default). A window of thousands of small steps keeps a bounded
# summary: its tens of thousands of top events cost more to build, send and read back
# than the rest of the reduction, and no trace could carry them.
MAX_TOP_EVENTS = 512

# Every fixed label set and outcome is one Literal here; its tuple is read from it, so the
# two cannot drift. Exporters, the catalog and the analysis read these, never restate them.
# (The label tuples are typed as plain strings: they key dicts of figures built from
# captures, where any name may appear.)

# XProf's step-time categories, snake case (DESIGN.md "Metric naming").
Category = Literal[
    "input",
    "output",
    "kernel_launch",
    "host_compute",
    "device_compute",
    "device_to_device",
    "device_collectives",
    "compile",
    "other",
]
CATEGORIES: tuple[str, ...] = typing.get_args(Category)

Verdict = Literal["highly", "moderately", "potentially", "not", "unknown"]
VERDICTS: tuple[str, ...] = typing.get_args(Verdict)
# How a window's steps were found: step markers; markers grouped by XProf's per-iteration
# rule (a Keras loop run inside a tf.function); markers timed without local work (a
# parameter-server coordinator); inferred from Keras's step functions; none found.
StepMethod = Literal["markers", "markers_tf_loop", "markers_remote", "inferred", "none"]
STEP_METHODS: tuple[str, ...] = typing.get_args(StepMethod)

# Host input time by kind (XProf's input-pipeline analysis).
InputKind = Literal[
    "demanded_file_read", "advanced_file_read", "preprocessing", "enqueue", "unclassified"
]
INPUT_KINDS: tuple[str, ...] = typing.get_args(InputKind)
# Why a GPU was idle (HTA's idle-time breakdown), and which way a copy went.
IdleCause = Literal["kernel_launch", "input", "short_gap", "other"]
IDLE_CAUSES: tuple[str, ...] = typing.get_args(IdleCause)
CopyDirection = Literal["h2d", "d2h", "d2d"]
COPY_DIRECTIONS: tuple[str, ...] = typing.get_args(CopyDirection)

# The advice rules' stable ids (tfobs_advice_active{rule}, alert annotations, docs/advice.md),
# in the advice table's order; each rule of `analysis.advice` carries one (a test holds the
# two equal). Here, not in the analysis, so the exporters in the training process read the
# set without loading the reduction.
RuleId = Literal[
    "input_bound",
    "tfdata_py_function",
    "tfdata_map_serial",
    "tfdata_one_thread",
    "tfdata_no_prefetch",
    "tfdata_map_function",
    "tfdata_file_read",
    "tfdata_from_generator",
    "tfdata_per_replica_input",
    "tfdata_slowest_stage",
    "output_bound",
    "tfdata_shares_cores",
    "tfdata_ignore_errors",
    "tfdata_shard_after_read",
    "tfdata_iterator_per_step",
    "all_others_bound",
    "step_gap",
    "step_pause",
    "checkpoint_writes",
    "summary_writes",
    "tf_print",
    "long_steps",
    "input_outside_steps",
    "kernel_launch_bound",
    "small_kernels",
    "small_xla_cpu_ops",
    "xla_cpu_sort",
    "gpu_thread_contention",
    "eager_ops",
    "tf_function_retracing",
    "host_ops_on_gpu_job",
    "extra_copies",
    "host_to_device_copies",
    "low_16bit_compute",
    "tensor_core_unused",
    "layout_transposes",
    "float64_compute",
    "memory_near_capacity",
    "memory_fragmentation",
    "device_collectives_bound",
    "host_collectives_bound",
    "uneven_replicas",
    "markers_without_root",
    "calls_without_steps",
    "python_in_step",
    "python_thread_contention",
    "markers_time_dispatch",
    "jax_op_by_op",
    "ps_join_each_step",
    "optimizer_update",
    "sparse_gradient_dense",
    "padded_batch_loop",
    "in_graph_loop",
    "keras_metrics_cost",
]
RULE_IDS: tuple[str, ...] = typing.get_args(RuleId)
Severity = Literal["info", "warning", "critical"]  # least severe first
SEVERITIES: tuple[str, ...] = typing.get_args(Severity)

# What became of a profile window (tfobs_windows_total{outcome}).
Outcome = Literal[
    "captured",  # profiled, reduced and published
    "skipped_busy",  # another profiler session was active (the user's own, TensorBoard, ...)
    "skipped_budget",  # the duty-cycle budget had no room for it
    "empty",  # the capture held no complete step
    "dropped_too_large",  # over the byte/event budget; dropped instead of reduced
    "failed",  # capture or reduction raised; counted in tfobs_errors_total{stage}
]
OUTCOMES: tuple[Outcome, ...] = typing.get_args(Outcome)
# What tfobs dropped to bound its memory or time (tfobs_dropped_total{what}); late_rendering:
# a scrape answered with the page's previous rendering, the fresh one being held
# (http_limits.Limits.render_late_s).
DropWhat = Literal["window", "spans", "keep", "late_rendering"]
DROP_WHATS: tuple[DropWhat, ...] = typing.get_args(DropWhat)
# Where an error inside tfobs happened (tfobs_errors_total{stage}).
ErrorStage = Literal[
    "schedule",  # deciding or opening a window on the training thread
    "capture",  # the profiler: start, stop, export, or no profiler for the framework
    "reduce",  # a capture that does not reduce (wherever it ran)
    "reduce_helper",  # the reduce helper process died, hung or ran out of memory
    "keep",  # keeping a capture in keep_dir
    "listener",  # a window listener (on_window) raised
    "source",  # stopping a figure source
    "nvml",  # an NVML read
    "gpm",  # a GPM (Tensor Core activity) read
    "tfmemory",  # TensorFlow's device memory read
    "export_prometheus",  # rendering or publishing the Prometheus figures
    "export_otel",  # publishing over OTLP
    "remote_capture",  # a capture asked for over HTTP
    "http_server",  # the metrics server's loop
    "http_accept",  # accepting a connection
    "http_refused",  # a connection refused unread (over the limits)
    "http_blocked",  # an address or network blocked for its strikes (a block begun)
    "http_protocol",  # a malformed request
    "http_auth",  # a failed authentication
]
ERROR_STAGES: tuple[ErrorStage, ...] = typing.get_args(ErrorStage)
# Why a window traced fewer steps than planned (tfobs_windows_cut_total{cause}).
CutCause = Literal[
    "time",  # the time cap learned from earlier windows' capture bytes per second
    "live_bytes",  # malloc's live bytes (the trace's buffers) over max_capture_bytes / 4
    "rss",  # RSS over its bound (max_capture_bytes; a quarter where live bytes are unknown)
]


@dataclass(frozen=True)
class TimedEvent:
    """One event placed on the wall clock (an op, a kernel, a tf.data stage)."""

    name: str
    kind: str  # "op" | "kernel" | "tfdata" | "memcpy"
    start_ns: int
    duration_s: float
    device: str = ""


@dataclass(frozen=True)
class Step:
    step_num: int
    start_ns: int
    duration_s: float
    breakdown_s: dict[str, float] = field(default_factory=dict)
    # Longest events of this step (for trace spans); bounded by the reducer's `top_n`,
    # and in all by its `max_top_events` (the window's longest: Steps.top_events_left_out).
    top_events: tuple[TimedEvent, ...] = ()
    # GPU captures: the step timed by device activity alone, as XProf 2.24.2 times GPU steps
    # (first to last device event launched from the step); 0.0 without a GPU.
    device_span_s: float = 0.0
    # The step marker's name ("train", "test", a loop's own "batch"): XProf names the step
    # "train 9". Train and test steps of one loop can share numbers; this tells them apart.
    marker: str = ""


@dataclass(frozen=True)
class FunctionCalls:
    """The calls of one `tf.function` (or SavedModel signature) made from Python in the
    window: what an inference, serving or evaluation window holds instead of steps."""

    name: str
    count: int
    per_s: float  # calls per second, from the first call's start to the last call's end
    mean_s: float  # time per call
    total_s: float
    # "python": called from Python on this host; "remote": a function another task sent
    # (a parameter-server worker running the coordinator's `schedule`d step function);
    # "dispatched": called from Python here and run on another task (the coordinator's
    # `schedule`: its time is the round trip, the work is in the workers' captures).
    source: str = "python"
    # In a window without steps, the busiest function's row: a user's annotation around
    # each of its calls, one call each (`TraceAnnotation("train_step")` with no step number:
    # no tool takes it as a step), and the mean time of its events.
    marker: str = ""
    marker_mean_s: float = 0.0


@dataclass(frozen=True)
class Steps:
    count: int = 0
    method: str = "none"  # one of STEP_METHODS
    mean_s: float = 0.0
    items: tuple[Step, ...] = ()
    note: str = ""  # e.g. why steps were inferred or dropped
    # Mean time from one step's start to the next (consecutive steps), and the share of
    # it that no step covers (callbacks, Python between steps): 1 - mean_s / interval_s.
    interval_s: float = 0.0
    outside_ratio: float = 0.0
    # Mean input wait (IteratorGetNext) per gap between consecutive steps: a batch fetched
    # outside the step markers, which no step's breakdown counts.
    input_between_s: float = 0.0
    # The window's tf.function / signature calls from Python, most time first (bounded):
    # inference (`predict`, serving) and evaluation windows have calls, not training steps.
    calls: tuple[FunctionCalls, ...] = ()
    # Would-be step markers that no tool takes: events with `step_num` but no `_r` stat.
    unrooted_markers: int = 0
    # Time per step of the ops that call Python (py_function, numpy_function) outside
    # tf.data that start in the kept steps: Python run by the step's own graph.
    python_op_s: float = 0.0
    # Host-only captures profiled with the Python tracer on (JAX's default): time per step
    # whose innermost event on the steps' thread is a Python function (XProf counts it as
    # host compute), and the functions with the most of it. 0 / () without the tracer, or
    # with a GPU (whose Python waits on the device there).
    python_traced_s: float = 0.0
    python_traced_top: tuple[str, ...] = ()
    # The part of python_traced_s run inside JAX's host callbacks (jax.debug.print,
    # io_callback, pure_callback: the compiled step stops to run Python), per step.
    python_callback_s: float = 0.0
    # Time per step inside a tf.data iterator's next(), where the capture holds no tf.data
    # event: a JAX step waiting for its batch from tf.data (jax.profiler records no
    # TensorFlow op, so XProf sees no input there). From tfobs's own event around next()
    # (live JAX windows), else from the Python tracer (then a part of python_traced_s).
    python_tfdata_next_s: float = 0.0
    # The part of python_traced_s per step waiting for a batch from another thread or process
    # of the job's (`queue.Queue.get`, `Future.result`): a Python loader slower than the step.
    python_loader_wait_s: float = 0.0
    # The part of python_traced_s per step in NumPy reads of device values (np.asarray or
    # np.array of a jax.Array): each waits for the program computing the value, then copies
    # it back (python_time._device_reads).
    python_device_read_s: float = 0.0
    # The same thread's Python between the steps (the Python tracer on): seconds per gap
    # between consecutive steps, and its functions with the most of it (a loop's own
    # loader: next() of a Python generator).
    python_between_s: float = 0.0
    python_between_top: tuple[str, ...] = ()
    # Python run inside the steps by the busiest Python thread other than the steps' own
    # (the Python tracer on, host-only captures): seconds per step, the thread's name and
    # its functions with the most of it.
    # Python threads share one GIL: a thread that keeps running Python (a polling loop)
    # makes the step's own Python wait. Waits that release the GIL are left out.
    python_other_thread_s: float = 0.0
    python_other_thread: str = ""
    python_other_thread_top: tuple[str, ...] = ()
    # Host-only captures: seconds per step of copies from host arrays into device buffers
    # (PjRt's `H2D Dispatch`: jax.device_put of a numpy batch), which XProf counts as host
    # compute.
    host_to_device_s: float = 0.0
    # Per step: JAX's jitted calls (`PjitFunction(...)`, outermost) that start inside the
    # kept steps on the steps' own threads; `calls` counts every thread's, a loader
    # thread's jax.numpy outside jit among them.
    jitted_calls_in_steps: float = 0.0
    # Per step: TensorFlow's own marks around turning NumPy arrays or Python values into
    # tensors (`convert_to_tensor`, `tf.constant`: a copy of each array) that start in the
    # kept steps, outermost: a loop handing NumPy to its step or assigning it to variables
    # (`v.assign(array)`) every step. Only their `_EagerConst` op is op time; the rest is
    # 'All Others' to XProf.
    tensor_conversion_s: float = 0.0
    # The events that begin in the longest gap between the kept steps on the steps'
    # threads, outermost, longest first (an epoch's end: validation calls, an iterator torn
    # down or made), and their seconds in it.
    pause_top: tuple[str, ...] = ()
    pause_top_s: tuple[float, ...] = ()
    # The share of the time between consecutive kept steps that no event on any line of
    # the host plane covers: the host idle (a sleep, a rate limit) or running what the
    # capture does not trace (Python with the tracer off). 0 where the gaps hold under 8 %
    # of the steps' span (not measured: no finding reads it there).
    gap_idle_ratio: float = 0.0
    # Host-only captures of a JAX job: seconds of XLA's CPU runtime work in the window that
    # ran outside every step, and its share of that runtime's work
    # (tfobs.analysis.xla_cpu_work).
    # Most of it, and more than the steps' own time: the markers time the dispatch of
    # asynchronously run steps, not their work (the note says so).
    work_outside_s: float = 0.0
    work_outside_ratio: float = 0.0
    # Per step: that runtime's work during the steps' unknown time, which XProf's breakdown
    # files under 'All Others' (work on threads no step is linked to: a JAX job's Eigen
    # threads), although it is the step's compiled work.
    work_in_other_s: float = 0.0
    # In-graph loops inside the steps (tf.map_fn, tf.while_loop, a Python loop AutoGraph
    # made one, a Keras RNN's loop over time steps): seconds per step during which the
    # executor runs their iterations past the first (`ExecutorState::Process` events with
    # `iter_num` > 0, each instant counted once over every thread), in no op row where
    # the body's ops are too small to write events; the part of it in the op events the
    # iterations did write (outermost); the median step's highest iteration
    # and the highest of any step; the loops' name scopes, most op time first (from the
    # ops the iterations ran, else from the tensors unstacked for them); whether the loop
    # is a Keras recurrent layer's. A steps_per_execution loop's own iterations are left
    # out (tfobs.analysis.loops).
    in_graph_loop_s: float = 0.0
    in_graph_loop_op_s: float = 0.0
    in_graph_loop_iterations: int = 0
    in_graph_loop_iterations_max: int = 0
    in_graph_loop_scopes: tuple[str, ...] = ()
    in_graph_loop_recurrent: bool = False
    # Per step: that runtime's work inside the steps (its threads' events, overlaps once),
    # and the compiled programs' ops that start in them (events with a `program_id`: XLA's
    # CPU thunks, on any thread): how many, their summed time and the median op's. Thousands
    # of ops of a few microseconds each are a program of small ops (an unrolled loop over
    # blocks, a tree of many small leaves), each paying the runtime's fixed cost per op.
    work_in_steps_s: float = 0.0
    xla_cpu_ops: float = 0.0
    xla_cpu_op_s: float = 0.0
    xla_cpu_op_median_s: float = 0.0
    # Per step: of those ops, the ones that start inside a control-flow op's run (a while
    # loop's or conditional's body: lax.while_loop, fori_loop, scan, cond), and those runs'
    # time (overlaps once). The control-flow ops themselves, whose events span their
    # bodies' ops, are in neither figure above.
    xla_cpu_loop_ops: float = 0.0
    xla_cpu_loop_s: float = 0.0
    # How many different sets of compiled programs (`program_id`s) those ops belong to over
    # the kept steps: 1 where every step ran the same programs (steps that differ in time
    # then differ in how long the same ops took), more where some steps ran a program the
    # others did not (an evaluation's); 0 without such ops (host-only JAX captures only).
    xla_cpu_program_sets: int = 0
    # Steps' top events left out of `items` beyond the window's bound (the reducer's
    # `max_top_events`, the trace's span cap): a window of thousands of steps keeps its
    # longest events, not every step's.
    top_events_left_out: int = 0


@dataclass(frozen=True)
class InputBound:
    ratio: float = 0.0  # input time / step time, 0..1
    verdict: str = "unknown"
    advice: str = ""  # XProf-style sentence


@dataclass(frozen=True)
class TfDataStage:
    # e.g. "Iterator::Root::Prefetch::Map"; the slowest stage may hold "[*]" (below)
    name: str
    self_s: float  # self time in the window
    count: int = 0

    @property
    def merged_note(self) -> str:
        """What "[*]" in the name means, for a reader; '' without one."""
        if "[*]" not in self.name:
            return ""
        return "[*]: its interleave cycle elements, epochs or flat_map elements together"


@dataclass(frozen=True)
class OpStat:
    name: str
    op_type: str
    on_device: bool
    count: int
    self_s: float
    total_s: float


@dataclass(frozen=True)
class InputPipeline:
    # Host input time by kind, seconds per step: demanded_file_read, advanced_file_read,
    # preprocessing, enqueue, unclassified (the Input Pipeline Analyzer's split).
    host_input_s: dict[str, float] = field(default_factory=dict)
    slowest_stage: TfDataStage | None = None  # tf.data bottleneck on the critical path
    stages: tuple[TfDataStage, ...] = ()
    top_input_ops: tuple[OpStat, ...] = ()
    # The same split as window totals in seconds (XProf's `input_time_breakdown`).
    host_input_total_s: dict[str, float] = field(default_factory=dict)
    # Self time of Python ops run by tf.data (`py_function`, `numpy_function`,
    # `from_generator`: EagerPyFunc / PyFunc ops), window total in seconds.
    python_op_s: float = 0.0
    # tf.distribute's per-replica input ran (MultiDeviceIterator ops): its iterators are
    # `::Generator` stages that run no Python, unlike `from_generator`'s.
    per_replica_input: bool = False
    # copy_to_device / prefetch_to_device ran (IteratorFromStringHandleV2 ops): its copy is
    # a `::Generator` stage too, that runs no Python.
    device_copy_input: bool = False
    # Window self time of ops XProf counts as host input by their type alone and tfobs
    # does not (`EagerService:Enqueue`, a parameter-server worker's queue of eager requests
    # from its coordinator: type "Enqueue"), and their names.
    xprof_only_input_s: float = 0.0
    xprof_only_input_ops: tuple[str, ...] = ()
    # TensorFlow ops tf.data's own threads run for its stages' functions (a parallel map's
    # parse_example, decoding, augmentation), in no stage's self time: window seconds, and
    # the longest op types.
    function_ops_s: float = 0.0
    function_ops_top: tuple[str, ...] = ()
    # The root prefetch's fetches inside the steps (its `buffered_elements` stat), how many
    # found a batch ready, window seconds of them all and of those that found its buffer
    # empty: a pipeline that keeps up leaves only the hand-over of ready batches as input
    # wait.
    prefetch_fetches: int = 0
    prefetch_ready: int = 0
    prefetch_s: float = 0.0
    prefetch_empty_s: float = 0.0
    # The longest of those fetches: seconds, its step's number (-1: none), whether it found
    # a batch ready, and what tf.data's threads ran during it (the stage, and the op of a
    # stage's function with its seconds there); the median fetch's seconds. A ready fetch
    # far longer than the others is no hand-over.
    prefetch_longest_s: float = 0.0
    prefetch_longest_step: int = -1
    prefetch_longest_ready: bool = False
    prefetch_longest_stage: str = ""
    prefetch_longest_op: str = ""
    prefetch_longest_op_s: float = 0.0
    prefetch_median_s: float = 0.0
    # The fetches that found a batch ready yet took five times the median fetch or more
    # and a millisecond or more:
    # how many, their window seconds, their steps' numbers, and the seconds tf.data's
    # threads ran stage functions' ops during them (summed over the fetches).
    prefetch_slow_ready: int = 0
    prefetch_slow_ready_s: float = 0.0
    prefetch_slow_ready_steps: tuple[int, ...] = ()
    prefetch_slow_ready_op_s: float = 0.0
    # tf.data's pool threads (`tf_data_private_threadpool`, where its parallel stages run)
    # that ran something in the window, and the busiest one's busy share of the window: one
    # thread busy throughout runs every parallel call in turn (a pool capped at one thread).
    pool_threads: int = 0
    pool_busy: float = 0.0
    # Those threads' busy time together, window seconds: the pipeline's work on the host's
    # cores beside the step.
    pool_busy_s: float = 0.0
    # A `for batch in dataset` loop inside a tf.function (a ReduceDataset op): window
    # seconds, inside the steps, of its batches' fetches and of the iterators made for it;
    # input XProf counts as host compute.
    in_graph_loop_input_s: float = 0.0
    in_graph_loop_iterators_s: float = 0.0
    # `iter(dataset)` run from Python inside the steps (`next(iter(dataset))` in a loop): how
    # many of the kept steps made a new iterator, and the window seconds of making them.
    step_iterators: int = 0
    step_iterators_s: float = 0.0
    # A loader that marks its own stages (grain: `_ipl_stage_*` stats), whose outermost
    # stage inside a step XProf times as input: seconds per step the steps spent in those
    # stages, and the stages' names (longest first, at most 3). 0 / () without one.
    loader_input_s: float = 0.0
    loader_stages: tuple[str, ...] = ()
    # The ignore_errors() stage that passed on the fewest of its input's elements (the rest
    # raised an error and were dropped): its name (`[*]` where several, an interleave's
    # elements, are one), its elements and its input's in the window, and the input's kind
    # (`ParallelMapV2`). "" / 0 where none passed on fewer than its input made.
    ignore_errors_stage: str = ""
    ignore_errors_passed: int = 0
    ignore_errors_input: int = 0
    ignore_errors_input_kind: str = ""
    # A Dataset.shard() stage with a record reader or a map below it (each worker reads and
    # maps every element and keeps one in num_shards): its name, those stages' kinds
    # (`TFRecord`, `ParallelMapV2`), and the window seconds of the stages below it. "" / () /
    # 0 where none.
    shard_after_read_stage: str = ""
    shard_after_read_readers: tuple[str, ...] = ()
    shard_after_read_s: float = 0.0


@dataclass(frozen=True)
class Ops:
    host_s: float = 0.0
    device_s: float = 0.0
    host_ratio: float = 0.0  # share of op time on the host
    top: tuple[OpStat, ...] = ()
    # Ops executed eagerly (outside tf.function) on the host: window seconds, longest types.
    eager_s: float = 0.0
    eager_top: tuple[OpStat, ...] = ()
    # The part of eager_s that ran outside the window's steps (Keras callbacks, logging,
    # weight saving between the steps of a fit): window seconds.
    eager_between_steps_s: float = 0.0
    # Eager op seconds before the window's first step kept (in no step, or in the dropped
    # first one): set-up the window caught (Normalization.adapt, variables made, weights
    # loaded, a first evaluation).
    eager_before_steps_s: float = 0.0
    # tf.function backward passes run from a GradientTape outside the function
    # (`EagerLocalExecute: __inference___backward_*`) inside the window's steps: how many.
    eager_backward_calls: int = 0
    # tf.function traces (graph building), or JAX jit compiles, inside the window's steps:
    # seconds, how many.
    graph_building_s: float = 0.0
    graph_builds: int = 0
    # Of graph_builds, XLA's own compiles of a TensorFlow program (jit_compile=True, auto-
    # clustering): one per new concrete input shape, even for a tf.function traced once.
    xla_compiles: int = 0
    # JAX: the jitted functions whose calls hold those compiles (`PjitFunction(f)` around
    # the lowering or compile, from the first step kept to the last), longest first.
    compiled_functions: tuple[str, ...] = ()
    # A function traced again then instantiated on its first call: the set-up of such calls
    # (`EagerLocalExecute: __inference_*` before its first `EagerKernelExecute`: Grappler,
    # kernel creation) where far above the window's typical call's and after a trace in
    # the same step; seconds inside the steps, how many. Not part of graph_building_s.
    graph_instantiation_s: float = 0.0
    graph_instantiations: int = 0
    # Time inside the steps during which a collective op runs on the host
    # (CollectiveReduceV2 and kin: tf.distribute's all-reduce across replicas, devices or
    # workers), window seconds; XProf counts it as host compute, its 'Device Collective
    # Communication' being device events only.
    host_collectives_s: float = 0.0
    # Checkpoint writes (SaveV2, MergeV2Checkpoints) on the threads that run the steps (every
    # thread where the window has no step): window seconds, how many writes. Not in eager_s.
    checkpoint_s: float = 0.0
    checkpoint_writes: int = 0
    # The whole save's cost in the steps that hold one (its Python and eager variable reads
    # besides the write ops): how many kept steps hold a write; their window seconds, and
    # their 'All Others' seconds, beyond as many typical steps (the others' median); eager
    # op seconds in the steps that hold a write.
    checkpoint_steps: int = 0
    checkpoint_steps_excess_s: float = 0.0
    checkpoint_steps_other_s: float = 0.0
    checkpoint_steps_eager_s: float = 0.0
    # tf.summary writes (scalars, histograms, a TensorBoard callback's), graph and eager:
    # window seconds.
    summary_writes_s: float = 0.0
    # The optimizers' update (ops under an optimizer's name scope, fused ResourceApply*
    # kernels), op self time in window seconds; of it, sparse gradients made dense
    # (UnsortedSegmentSum: an Embedding's IndexedSlices for a dense update).
    optimizer_s: float = 0.0
    optimizer_densify_s: float = 0.0
    # The optimizers' name scopes the update ran under, as the ops name them ("adagrad" is
    # Keras 3's Adagrad, "Adagrad" tf_keras's), most time first, at most 3.
    optimizer_scopes: tuple[str, ...] = ()
    # Candidate samplers that ran (LogUniformCandidateSampler and kin: a sampled softmax or
    # NCE loss), their op types: the output layer's gradient is then a gather's too.
    candidate_samplers: tuple[str, ...] = ()
    # Sparse gradients (IndexedSlices: a gather's or an Embedding's rows) that TensorFlow
    # made dense outside the optimizer, for an op that takes only dense tensors (a NaN guard
    # or a clip on the whole gradient): its conversion ops (`UnsortedSegmentSum` named for
    # the op's input, `IsFinite/x`), op self time in window seconds, how many ran, and their
    # names (most time first, at most 3).
    densified_s: float = 0.0
    densified_count: int = 0
    densified_ops: tuple[str, ...] = ()
    # The host transposes Keras runs around a channels_first (NCHW) model's pooling layers
    # (`<pooling layer>/transpose*`: TensorFlow's CPU pooling takes NHWC only), op self time
    # in window seconds, and their names (most time first, at most 3).
    channels_first_transpose_s: float = 0.0
    channels_first_transpose_ops: tuple[str, ...] = ()
    # A Keras 3 train step's ops outside its model's, loss's (`compile_loss/`), gradient's
    # and optimizer's name scopes: the loss tracker's and the compiled metrics' updates. Op
    # self time in window seconds, and the op types (most time first, at most 3); 0 where
    # the window holds no Keras step.
    keras_top_level_s: float = 0.0
    keras_top_level_types: tuple[str, ...] = ()
    # tf.print's ops (StringFormat, PrintV2), op self time in window seconds.
    print_s: float = 0.0
    # XLA:CPU running compiled programs (jit_compile=True; outermost
    # `CpuExecutable::Execute*` events), window seconds: their ops are XLA's own, in no op
    # row (XProf's table has none of them either).
    xla_programs_s: float = 0.0


@dataclass(frozen=True)
class KernelStat:
    name: str
    op_name: str
    count: int
    total_s: float
    min_s: float
    max_s: float
    registers: int = 0
    shared_mem_bytes: int = 0
    grid: str = ""
    block: str = ""
    occupancy_pct: float = 0.0
    uses_tensor_cores: bool = False
    op_tensor_core_eligible: bool = False
    tensor_core_rule: str = ""  # which name rule matched, "" if none
    # True where no name rule can say whether the kernel used Tensor Cores.
    tensor_core_unknown: bool = False
    width_bits: int = 0  # 16 or 32: its arithmetic width (`precision.py`)

    @property
    def avg_s(self) -> float:
        return self.total_s / self.count if self.count else 0.0


@dataclass(frozen=True)
class Kernels:
    total_s: float = 0.0
    tensor_core_s: float = 0.0
    eligible_op_s: float = 0.0
    eligible_op_tensor_core_s: float = 0.0
    items: tuple[KernelStat, ...] = ()
    # Kernel time in 16-bit (or narrower) arithmetic, by the types each kernel's name or
    # HLO instruction states (`precision.py`).
    compute_16bit_s: float = 0.0
    # Kernel time whose Tensor Core use no name rule can judge (Pallas/Triton `kernel`,
    # custom calls, unknown kernels of matrix ops): neither on nor off Tensor Cores.
    tensor_core_unknown_s: float = 0.0


@dataclass(frozen=True)
class DeviceActivity:
    """Per-GPU figures: idle breakdown (HTA), launch delays, copies, collectives."""

    device: str  # "/device:GPU:0"
    span_s: float = 0.0
    busy_s: float = 0.0
    idle_s: dict[str, float] = field(default_factory=dict)  # kernel_launch|input|short_gap|other
    kernel_count: int = 0
    mean_kernel_s: float = 0.0
    launch_delay_mean_s: float = 0.0
    launch_delay_p95_s: float = 0.0
    small_kernel_ratio: float = 0.0  # kernels shorter than their launch overhead
    copy_s: dict[str, float] = field(default_factory=dict)  # h2d|d2h|d2d, per step
    copy_bytes: dict[str, float] = field(default_factory=dict)  # per step
    collective_s: float = 0.0  # per step


@dataclass(frozen=True)
class Allocation:
    op_name: str
    bytes: int
    shape: str = ""
    data_type: str = ""  # "float", "bfloat16", ... as XProf names them
    region_type: str = ""
    requested_bytes: int = 0
    occurrences: int = 1  # identical allocations live at the peak, shown as one row


@dataclass(frozen=True)
class MemoryStat:
    allocator: str
    peak_bytes: int = 0
    capacity_bytes: int = 0
    fragmentation_ratio: float = 0.0
    allocations: int = 0
    deallocations: int = 0
    stack_bytes: int = 0
    heap_bytes: int = 0
    free_bytes: int = 0
    top_allocations: tuple[Allocation, ...] = ()
    # False where TF wrote NaN (e.g. an XLA allocator): fragmentation_ratio is NaN then.
    fragmentation_known: bool = True
    # The bytes of the window's allocations, in all and per data type as XProf names them
    # ("float", "double", "INVALID" where the event says none); empty where no allocation
    # event states a type.
    allocated_bytes: int = 0
    allocated_bytes_by_type: dict[str, int] = field(default_factory=dict)
    # The ops allocating the most float64 ("double") bytes, most first (at most 3).
    float64_top_ops: tuple[str, ...] = ()

    @property
    def float64_share(self) -> float:
        """The share of the allocated bytes that are float64 tensors (0..1)."""
        f64 = self.allocated_bytes_by_type.get("double", 0)
        return f64 / self.allocated_bytes if self.allocated_bytes > 0 else 0.0


@dataclass(frozen=True)
class Environment:
    hosts: tuple[str, ...] = ()
    device_type: str = "CPU"  # CPU | GPU | TPU
    device_count: int = 0
    framework_version: str = ""
    # The framework that wrote the capture: "tensorflow", "jax" or "" (cannot tell). The
    # advice words its fixes for it.
    framework: str = ""
    # Keras's trainer drove the steps (its fit loop's Python frames are in the capture, so
    # the Python tracer was on): fixes name Model.compile's options, not the jit calls.
    keras: bool = False


@dataclass(frozen=True)
class Advice:
    code: str  # stable rule id (RULE_IDS), e.g. "input_bound", "kernel_launch_bound"
    severity: str  # SEVERITIES: "info" | "warning" | "critical"
    message: str
    # The figures the rule read, with their values (ratios 0..1, seconds, counts).
    evidence: dict[str, float] = field(default_factory=dict)
    threshold: str = ""  # the threshold it used, e.g. "input >= 20 % of step time (XProf)"
    fix: str = ""  # one line: what to change
    guide: str = ""  # the guide section the fix comes from


@dataclass(frozen=True)
class WindowSummary:
    start_ns: int = 0
    duration_s: float = 0.0
    steps: Steps = field(default_factory=Steps)
    breakdown_s: dict[str, float] = field(default_factory=dict)  # mean per step
    # 16-bit share of device compute: on GPUs of kernel time, by the types each kernel's
    # name or HLO instruction states; XProf's figure (names saying "half"/"fp16") beside it.
    device_compute_16bit_ratio: float = 0.0
    device_compute_16bit_ratio_xprof: float = 0.0
    input_bound: InputBound = field(default_factory=InputBound)
    input_pipeline: InputPipeline = field(default_factory=InputPipeline)
    ops: Ops = field(default_factory=Ops)
    kernels: Kernels = field(default_factory=Kernels)
    devices: tuple[DeviceActivity, ...] = ()
    memory: tuple[MemoryStat, ...] = ()
    environment: Environment = field(default_factory=Environment)
    advice: tuple[Advice, ...] = ()
    schema_version: int = SCHEMA_VERSION

    @property
    def breakdown_ratio(self) -> dict[str, float]:
        total = sum(self.breakdown_s.values())
        return {k: (v / total if total > 0 else 0.0) for k, v in self.breakdown_s.items()}

    def input_beyond_xprof(self) -> tuple[str, str] | None:
        """(severity, finding) where tfobs's input_bound advice reads a wait XProf's verdict
        misses (a JAX job's tf.data `next()`, a dataset loop inside a tf.function: host
        compute to XProf), for the places that show XProf's verdict; None where the advice
        is XProf's own statement or absent."""
        for a in self.advice:
            if a.code == "input_bound" and a.message != self.input_bound.advice:
                return a.severity, a.message.split(", which XProf")[0]
        return None

    def to_dict(self) -> dict[str, Any]:
        """`dataclasses.asdict(self)`, field by field from a plan made once per class:
        asdict deep-copies every value, which took longer than the reduction itself on a
        window of thousands of steps (each step's top events are objects)."""
        out: dict[str, Any] = _dumper(WindowSummary)(self)
        return out

    def placed_at(self, start_ns: int) -> WindowSummary:
        """This summary on the wall clock from `start_ns`, for a capture whose times count
        from the profiler's start (one with no profile start time in it: TensorFlow 2.16
        writes none, so `start_ns` is 0); a summary already on the wall clock is returned as
        it is. Every `_ns` field moves by `start_ns`."""
        if self.start_ns or not start_ns:
            return self

        def moved(step: Step) -> Step:
            return dataclasses.replace(
                step, start_ns=step.start_ns + start_ns,
                top_events=tuple(dataclasses.replace(e, start_ns=e.start_ns + start_ns)
                                 for e in step.top_events))

        steps = dataclasses.replace(self.steps, items=tuple(moved(s) for s in self.steps.items))
        return dataclasses.replace(self, start_ns=start_ns, steps=steps)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WindowSummary:
        summary: WindowSummary = _from_dict(cls, data)
        return summary


@functools.cache
def _fields_of(cls: Any) -> tuple[tuple[str, Any], ...]:
    """(name, resolved type) of a dataclass's fields, resolved once per class:
    `get_type_hints` compiles every string annotation each call, which made building one
    window's summary cost milliseconds of GIL time in the training process."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name]) for f in dataclasses.fields(cls))


def _from_dict(cls: Any, data: Any) -> Any:
    return _loader(cls)(data)


# Plans per class, made once: each field's name and the function that turns its value
# into plain data (to_dict) or back (from_dict); None where the value is kept as it is.
_Convert = typing.Callable[[Any], Any] | None


@functools.cache
def _dumper(cls: Any) -> typing.Callable[[Any], dict[str, Any]]:
    plan = [(name, _dump_plan(tp)) for name, tp in _fields_of(cls)]

    def dump(obj: Any) -> dict[str, Any]:
        if type(obj) is not cls:  # a subclass or stand-in: asdict's own walk
            return dataclasses.asdict(obj)
        return {name: (getattr(obj, name) if f is None else f(getattr(obj, name)))
                for name, f in plan}
    return dump


def _dump_plan(tp: Any) -> _Convert:
    """As `dataclasses.asdict` treats a value of type `tp`: dataclasses become dicts,
    tuples and dicts are copied, scalars kept; anything else deep-copied, as asdict does."""
    origin = typing.get_origin(tp)
    if tp in (int, float, str, bool):
        return _copied_scalar
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dumper(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [_dump_plan(a) for a in typing.get_args(tp) if a is not type(None)]
        if len(inner) == 1 and inner[0] is not None:
            one = inner[0]
            return lambda v: None if v is None else one(v)
    if origin is tuple:
        item = _dump_plan(typing.get_args(tp)[0])
        if item is _copied_scalar:
            return lambda v: tuple(v) if type(v) is tuple else _asdict_value(v)
        if item is not None:
            return lambda v: (tuple([item(x) for x in v]) if type(v) is tuple
                              else _asdict_value(v))
    if origin is dict:
        return lambda v: dict(v) if type(v) is dict else _asdict_value(v)
    return _asdict_value


def _copied_scalar(value: Any) -> Any:
    # Scalars of the declared type are immutable: asdict's deep copy is the value itself.
    return value if type(value) in (int, float, str, bool) else _asdict_value(value)


def _asdict_value(value: Any) -> Any:
    """What `dataclasses.asdict` makes of one value (the plan's fallback)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (list, tuple, dict)):  # may hold dataclasses: asdict walks them
        return dataclasses.asdict(_Holder(value))["value"]
    return copy.deepcopy(value)


@dataclass
class _Holder:
    value: Any


_T = typing.TypeVar("_T")


def build_all(cls: type[_T], *columns: typing.Sequence[Any]) -> list[_T]:
    """Objects of the frozen dataclass `cls`, one per row of `columns` (one column per
    field, in field order, all given), filled as pickle restores them: a frozen
    dataclass's __init__ sets each field through object.__setattr__, 2-3x the cost, and a
    window of thousands of steps builds thousands of these."""
    build = _builder(typing.cast(Any, cls))
    if len(columns) != build.__code__.co_argcount:
        names = tuple(name for name, _ in _fields_of(typing.cast(Any, cls)))
        raise TypeError(f"build_all({cls.__name__}) needs one column for each of {names}")
    if len({len(c) for c in columns}) > 1:
        raise ValueError(f"build_all({cls.__name__}): columns of unequal length")
    return list(map(build, *columns))


def column_dicts(keys: tuple[str, ...], table: Any) -> list[dict[str, Any]]:
    """One dict per row of `table` (a 2-D array, a column per key: a step's seconds per
    category), `keys[i]` holding the row's i-th value, as Python floats. Built from the
    columns: no list per row (thousands of them, each one more object for the garbage
    collector to count), half the cost of `dict(zip(keys, row))`."""
    if not len(table):
        return []
    return list(map(_dict_maker(keys), *table.T.tolist()))


@functools.cache
def _dict_maker(keys: tuple[str, ...]) -> typing.Callable[..., dict]:
    """`lambda c0, c1, ...: {keys[0]: c0, ...}`: a dict display of constant keys builds in
    one step."""
    params = ", ".join(f"c{i}" for i in range(len(keys)))
    items = ", ".join(f"{key!r}: c{i}" for i, key in enumerate(keys))
    make: typing.Callable[..., dict] = eval(f"lambda {params}: {{{items}}}")
    return make


@functools.cache
def _builder(cls: Any) -> typing.Callable[..., Any]:
    """A function of one argument per field, in field order, that fills a new `cls` as
    pickle does. Written out once per class, as dataclasses writes __init__: a loop over
    the names costs twice as much per object."""
    names = tuple(name for name, _ in _fields_of(cls))
    if hasattr(cls, "__post_init__") or hasattr(cls, "__slots__"):
        raise TypeError(f"build_all({cls.__name__}): needs a plain dataclass")
    params = [f"_{i}" for i in range(len(names))]
    fill = "".join(f"    d[{name!r}] = {p}\n" for name, p in zip(names, params, strict=True))
    source = (f"def build({', '.join(params)}):\n    o = new(cls)\n    d = o.__dict__\n"
              f"{fill}    return o\n")
    scope: dict[str, Any] = {"new": object.__new__, "cls": cls}
    exec(source, scope)  # the names are the dataclass's own field identifiers
    build: typing.Callable[..., Any] = scope["build"]
    return build


@functools.cache
def _loader(cls: Any) -> typing.Callable[[Any], Any]:
    plan = [(name, _load_plan(tp)) for name, tp in _fields_of(cls)]
    names = {name for name, _ in plan}
    converted = [(name, f) for name, f in plan if f is not None]
    # With every field given, the object is filled as pickle restores one: a frozen
    # dataclass's __init__ sets each field through object.__setattr__, three times the
    # cost, and a window of thousands of steps holds tens of thousands of these.
    direct = not hasattr(cls, "__post_init__") and not hasattr(cls, "__slots__")

    def load(data: Any) -> Any:
        if data.keys() == names:  # every field and no other: the common case
            kw = dict(data)
            for name, f in converted:
                if kw[name] is not None:
                    kw[name] = f(kw[name])
            if not direct:
                return cls(**kw)
            obj = object.__new__(cls)
            obj.__dict__.update(kw)
            return obj
        return cls(**{name: (data[name] if f is None or data[name] is None
                             else f(data[name]))
                      for name, f in plan if name in data})
    return load


def _load_plan(tp: Any) -> _Convert:
    """The inverse of `_dump_plan` for plain data read back from JSON."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _load_plan(inner[0])
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _loader(tp)
    if origin is tuple:
        item = _load_plan(typing.get_args(tp)[0])
        if item is None:
            return tuple
        return lambda v: tuple([None if x is None else item(x) for x in v])
    if origin is dict:
        return dict
    return None


def no_nan(value: Any) -> Any:
    """`value` (a summary's `to_dict()`) with NaN (a figure TF could not measure, e.g. an XLA
    allocator's fragmentation) as None: JSON null, where json.dumps writes NaN, which no
    strict JSON reader (a browser's JSON.parse, Go, jq) takes."""
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if isinstance(value, dict):
        return {k: no_nan(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [no_nan(v) for v in value]
    return value
