"""Input pipeline: XProf's input-bound statement, then the slowest tf.data stage and its fix.

The stage rules fire only when the window is at least moderately input-bound (XProf's 5 %),
so a fast pipeline is never blamed. Stage names are tf.data's iterator prefixes: a `map`
tf.data could not parallelize stays `::Map` (tf.data's `map_parallelization` turns a
stateless `map` into `::ParallelMapV2` on its own), `from_generator` shows as `::Generator`
(and so do tf.distribute's per-replica iterators, told apart by their MultiDeviceIterator ops
and the absence of Python ops), file sources as `::TFRecord`, `::TextLine`, ...
"""

from __future__ import annotations

import numpy as np

from tfobs.analysis.advice.rule import (
    GPU,
    ITERATOR_STEPS_SHARE,
    LOADER_WAIT_FIX,
    PROFILER,
    TFDATA,
    Rule,
    iterator_each_step,
    loader_wait_pct,
    on_gpu,
    one_digit,
    runtime_holds_other,
    step_field,
    step_pct,
    step_seconds,
    step_total_s,
    window_steps,
)
from tfobs.analysis.breakdown import HIGHLY_INPUT_PCT, MODERATELY_INPUT_PCT
from tfobs.analysis.calls import KERAS_TF_PREDICT
from tfobs.analysis.input_pipeline import _FILE_SOURCES, SLOW_FETCH_FACTOR
from tfobs.analysis.tfdata import in_interleave_element, in_rejection_resample, same_stage_key
from tfobs.summary import Advice, InputPipeline, TfDataStage, WindowSummary

INPUT_BOUND = Rule(
    "input_bound", "input pipeline",
    "input >= 5 % of step time (XProf: HIGHLY >= 20 %, MODERATELY >= 5 %), or 'All Others' "
    ">= 3 % (POTENTIALLY), or a wait inside tf.data's next() >= 5 % where the capture holds "
    "no tf.data op (tfobs: a JAX job fed by tf.data)",
    "fix the input pipeline first; check by running the same step on synthetic data "
    "(where 'All Others' is twice the input wait or more, or the verdict is POTENTIALLY: "
    "all_others_bound's fix first; where the root prefetch held a batch at >= 90 % of the "
    "fetches that hold the wait, the pipeline keeps up: more work per step or several steps "
    "per call, unless one fetch of a ready batch holds most of the wait, or a few such "
    "fetches (each >= 5x the median and >= 1 ms) half of it: those fetches and the "
    "pipeline's work during them; where a few fetches found it empty, those stalls first; "
    "where the steps "
    "wait in a data loader's own stages (grain), its knobs: cheaper or vectorized "
    "transforms, more workers, a deeper buffer)",
    f"{GPU}: 1. Optimize the input pipeline; {PROFILER}: Input pipeline analyzer")
PY_FUNCTION = Rule(
    "tfdata_py_function", "input pipeline",
    "input-bound and tf.data spends time in py_function / numpy_function ops",
    "rewrite the mapped function with TensorFlow ops (or run it with "
    "num_parallel_calls=tf.data.AUTOTUNE)",
    f"{TFDATA}: Vectorizing mapping / Parallelizing data transformation")
MAP_SERIAL = Rule(
    "tfdata_map_serial", "input pipeline",
    "input-bound and the slowest tf.data stage is a sequential `map` (::Map)",
    "pass num_parallel_calls=tf.data.AUTOTUNE to Dataset.map",
    f"{TFDATA}: Parallelizing data transformation")
# A sequential map inside an interleave's function runs once per cycle element, each on one
# worker: the map's num_parallel_calls, or the map moved after the interleave, parallelizes it.
MAP_IN_INTERLEAVE_FIX = (
    "the map runs inside the interleave's function, one element at a time per file: move it "
    "after the interleave, interleave(...).map(fn, num_parallel_calls=tf.data.AUTOTUNE), or "
    "pass num_parallel_calls=tf.data.AUTOTUNE to that inner map")
# Dataset.rejection_resample's acceptance check is its own sequential map, run for every
# element drawn, rejected ones included: no argument of the user's map reaches it.
REJECTION_RESAMPLE_FIX = (
    "the map is Dataset.rejection_resample's own acceptance check, run once for every "
    "element it draws, rejected ones included; no num_parallel_calls reaches it. Draw fewer "
    "elements: resample with Dataset.sample_from_datasets over one filtered dataset per "
    "class (weights = the target distribution), which rejects nothing, or move target_dist "
    "closer to the data's own distribution")
# A stage below an in-memory cache runs only while the cache fills (its first epoch); later
# epochs read the cache (`::MemoryCacheImpl` with nothing below it) and skip it.
CACHE_FILLING = "::MemoryCacheImpl::"
CACHE_FILL_FIX = (
    "the stage runs below a cache() that fills in this window (its first epoch): later "
    "epochs read the cache and skip it, so profile a later epoch before changing it; if "
    "every epoch is this slow, the cache is not reused (the dataset is built anew each "
    "epoch); then: ")
# A take() above a filling cache (`...::FiniteTake::...::MemoryCacheImpl::`): an iterator that
# stops before the cache's end makes TensorFlow discard the partly filled cache ("The calling
# iterator did not fully read the dataset being cached"), so every epoch fills it again.
CACHE_PARTIAL_FIX = (
    "the stage runs below a cache() that fills in this window, under a take() that reads "
    "it: where the take stops before the cache's end, TensorFlow discards the partly filled "
    "cache (its warning: 'The calling iterator did not fully read the dataset being "
    "cached'), so every epoch runs this stage again; call take() before cache() "
    "(ds.take(n).cache()) or read the cached dataset to its end; then: ")


def _cache_fill_fix(name: str) -> str:
    """The words before a fix for a stage below a filling in-memory cache (`name`): a take()
    above the cache has its own."""
    above = name.split(CACHE_FILLING, 1)[0]
    return (CACHE_PARTIAL_FIX if any(part.split("[")[0] == "FiniteTake"
                                     for part in above.split("::")) else CACHE_FILL_FIX)


NO_PREFETCH = Rule(
    "tfdata_no_prefetch", "input pipeline",
    "input-bound and no tf.data stage is a Prefetch, or none is above the slowest stage "
    "(a job reading two datasets that prefetches one)",
    "end the pipeline with .prefetch(tf.data.AUTOTUNE)",
    f"{TFDATA}: Prefetching")
# A pipeline read from a Python generator may be Keras's own: fit over a PyDataset (or
# Sequence) builds `from_generator` without a prefetch, which the user cannot add.
PYDATASET_PREFETCH_FIX = (
    f"{NO_PREFETCH.fix} where the pipeline is yours; a Keras PyDataset (or Sequence) passed "
    "to fit builds this pipeline itself, without one: there its workers= (with "
    "use_multiprocessing=True for Python-heavy batches) and max_queue_size= are the buffer "
    "that keeps batches ready")
MAP_FUNCTION = Rule(
    "tfdata_map_function", "input pipeline",
    "input-bound and the TensorFlow ops tf.data's own threads run for its stages' functions "
    "(a parallel map's parse_example, decoding, augmentation: in no stage's self time) take "
    "longer than the slowest stage's self time, and >= 25 % of the input wait",
    "make the mapped function cheaper: batch before map so it runs once per batch "
    "(tf.io.parse_example on a batch of records, not parse_single_example per record), "
    "parse or decode only the features the model reads, cache() after the map where the "
    "data fits in memory, or do the work once offline (Dataset.save, then load); where the "
    "training step uses the same cores, more parallel calls add no speed",
    f"{TFDATA}: Vectorizing mapping; Caching; Parallelizing data transformation")
FILE_READ = Rule(
    "tfdata_file_read", "input pipeline",
    "input-bound and file reads are the slowest stage or >= 50 % of host input time",
    "read files in parallel with interleave(num_parallel_calls=tf.data.AUTOTUNE) and "
    "cache() what fits in memory",
    f"{TFDATA}: Parallelizing data extraction; Caching")
FROM_GENERATOR = Rule(
    "tfdata_from_generator", "input pipeline",
    "input-bound and the slowest tf.data stage is a Dataset.from_generator (::Generator, or "
    "the ::FlatMap from_generator wraps it in)",
    "replace from_generator with tf.data sources (from_tensor_slices, TFRecordDataset) and "
    "TensorFlow ops; from_generator runs Python under the GIL, one element at a time. Keras "
    "reads a PyDataset (or Sequence) and a plain Python generator passed to fit this way "
    "too: give a PyDataset more workers= or use_multiprocessing=True, make a generator a "
    "PyDataset so it can have workers, or load the data with tf.data. Where its workers "
    "already match the host's free cores (a capture shows neither the workers' processes "
    "nor the cores), each batch costs more than they can make: make __getitem__ cheaper "
    "(whole-batch numpy instead of a loop per sample, data decoded once ahead of training) "
    "or move its work into tf.data",
    f"{TFDATA}: Best practice summary; {GPU}: 1. Optimize the input pipeline")
PER_REPLICA_INPUT = Rule(
    "tfdata_per_replica_input", "input pipeline",
    "input-bound and the slowest tf.data stage is tf.distribute's per-replica iterator (a "
    "::Generator stage running MultiDeviceIterator ops, no Python)",
    "where the distributed dataset's own stages take half the wait or more: prefetch and "
    "parallelize that dataset (.prefetch(tf.data.AUTOTUNE), num_parallel_calls in "
    "map/interleave); else the wait is tf.distribute's hand-off of each replica's batch, "
    "which tf.data fixes to the dataset do not shorten: let it run further ahead with "
    "tf.distribute.InputOptions(experimental_per_replica_buffer_size=2)",
    f"{TFDATA}: Prefetching; Parallelizing data transformation; Distributed input guide "
    "(tensorflow.org/tutorials/distribute/input): tf.distribute.InputOptions")
# The distributed dataset's own stages must take this share of the per-replica wait before
# the dataset is blamed. Measured (MirroredStrategy over 2 logical CPUs, cheap stages, a
# 2-core host): prefetching the dataset moved the wait by no more than run-to-run noise.
DATASET_SHARE = 0.5
SLOWEST_STAGE = Rule(
    "tfdata_slowest_stage", "input pipeline",
    "input-bound, no rule above names a cause, and the slowest tf.data stage's self time "
    "is >= 25 % of the input wait",
    "make that stage cheaper: batch before map to vectorize it, cache() after expensive "
    "deterministic steps, move fixed preprocessing offline",
    f"{TFDATA}: Vectorizing mapping; Caching; {PROFILER}: Analyze tf.data performance "
    "(tensorflow.org/guide/data_performance_analysis)")
OUTPUT_BOUND = Rule(
    "output_bound", "input pipeline",
    "output (outfeed) >= 5 % of step time (XProf: HIGHLY >= 20 %, MODERATELY >= 5 %)",
    "send less back to the host per step (fewer or smaller outfeed / host callbacks)",
    f"{PROFILER}: Input pipeline analyzer (output time)")
ONE_THREAD = Rule(
    "tfdata_one_thread", "input pipeline",
    "input-bound, the pipeline has parallel stages (num_parallel_calls), and tf.data's "
    "thread pool ran on one thread, busy >= 60 % of the window",
    "give tf.data its threads: drop options.threading.private_threadpool_size=1 (by default "
    "tf.data sizes its pool to the host's cores) or set it to the cores it may use, leave "
    "options.threading.max_intra_op_parallelism unset, and check the job's CPU limit (a "
    "container with one core gives the pool one thread)",
    f"{TFDATA}: Parallelizing data transformation")
SHARES_CORES = Rule(
    "tfdata_shares_cores", "input pipeline",
    "a host-only job not input-bound to XProf (each batch ready) whose tf.data pool threads "
    "work >= half a step's time per step on the cores the step computes on; a warning from "
    "a whole step's time",
    "the pipeline's work takes the step's cores: make it cheaper (batch before the map so "
    "ops run on whole batches, random augmentation as Keras preprocessing layers in the "
    "model, cache() after deterministic work) or cap tf.data's threads "
    "(options.threading.private_threadpool_size) so the step keeps its cores; on a GPU host "
    "the same pipeline would run beside the device",
    f"{TFDATA}: Vectorizing mapping; Caching; Parallelizing data transformation")
# ignore_errors() drops each element its input fails to make (a corrupt record, an op that
# raised) and says nothing: the stage's count against its input's tells how many.
IGNORE_ERRORS = Rule(
    "tfdata_ignore_errors", "input pipeline",
    "a tf.data ignore_errors() stage passes on >= 3 and >= 5 % fewer elements than its input "
    "made in the window: those raised an error and were dropped (whether or not the job is "
    "input-bound)",
    "find the bad records and fix or remove them offline: run the pipeline once with "
    "ignore_errors(log_warning=True), which logs each error it drops, or without "
    "ignore_errors() to stop at the first; where a cheap check tells a bad record (its "
    "length, a header, tf.io.is_jpeg), filter() on it before the expensive map, so no work "
    "is spent on what is dropped",
    "tf.data API: Dataset.ignore_errors (tensorflow.org/api_docs/python/tf/data/"
    f"Dataset#ignore_errors); {PROFILER}: TensorFlow stats (each Iterator::... row's "
    "occurrences)")
# Dataset.shard() keeps one element in num_shards of what its input made: after a record
# reader or a map, every worker reads and maps every element (tf.distribute's DATA
# auto-shard policy does the same); sharding the file list reads each file once.
SHARD_AFTER_READ = Rule(
    "tfdata_shard_after_read", "input pipeline",
    "a Dataset.shard() stage has a record reader (TFRecord, TextLine, FixedLengthRecord, CSV, "
    "...) or a map below it: the elements are read and mapped, then all but one in "
    "num_shards dropped (whether or not the job is input-bound; a warning where XProf calls "
    "it highly or moderately input-bound and the stages below the shard hold a quarter of "
    "the pipeline's time)",
    "shard first: the files, not the records (Dataset.list_files(pattern, shuffle=False)"
    ".shard(num_workers, worker_index) and then interleave(tf.data.TFRecordDataset, ...), "
    "with at least as many files as workers), and shard() before map(); under "
    "tf.distribute, let it shard by file (options.experimental_distribute."
    "auto_shard_policy = tf.data.experimental.AutoShardPolicy.FILE) rather than DATA, which "
    "reads and maps every element on every worker",
    "tf.data API: Dataset.shard (tensorflow.org/api_docs/python/tf/data/Dataset#shard: "
    "shard early, before converting files to records); Distributed input guide "
    "(tensorflow.org/tutorials/distribute/input): Sharding")
# `next(iter(dataset))` in a training loop: each step makes a new iterator, so the pipeline
# starts over (its prefetch, parallel map and shuffle buffer fill again before the first
# batch) and every step reads the dataset's first batches again.
ITERATOR_PER_STEP = Rule(
    "tfdata_iterator_per_step", "input pipeline",
    "a new dataset iterator is made from Python (`EagerLocalExecute: MakeIterator`) inside "
    ">= half of the kept steps (at least 2): `next(iter(dataset))` in the loop; a warning "
    "where XProf calls the job highly or moderately input-bound",
    "make the iterator once, before the loop (it = iter(dataset), then next(it) in each "
    "step), or loop over the dataset (for x, y in dataset:); a new iterator every step "
    "refills the pipeline before each batch and takes every batch from the dataset's "
    "start (with shuffle(), from the first buffer's elements only)",
    "tf.data API: tf.data.Dataset.__iter__ (tensorflow.org/api_docs/python/tf/data/"
    "Dataset#__iter__); tf.data guide (tensorflow.org/guide/data): Consuming Python "
    "iterators")
RULES = (INPUT_BOUND, PY_FUNCTION, MAP_SERIAL, ONE_THREAD, NO_PREFETCH, MAP_FUNCTION,
         FILE_READ, FROM_GENERATOR, PER_REPLICA_INPUT, SLOWEST_STAGE, OUTPUT_BOUND,
         SHARES_CORES, IGNORE_ERRORS, SHARD_AFTER_READ, ITERATOR_PER_STEP)
# The drops from which ignore_errors() is named: a share of its input's elements, and a
# count (an element in flight at each edge of the window, or an epoch's end, is no drop).
IGNORE_DROPS_SHARE = 0.05
IGNORE_DROPS_MIN = 3
# tf.data's pool work per step, as a share of the step, from which a job XProf calls not
# input-bound is told its pipeline takes the step's cores (info), and a warning.
CORES_INFO_SHARE = 0.5
CORES_WARNING_SHARE = 1.0
# Stages whose work runs on tf.data's pool (num_parallel_calls, parallel interleave).
PARALLEL_STAGES = ("ParallelMap", "MapAndBatch", "ParallelInterleave", "ParallelBatch",
                   "ParallelFilter")
ONE_THREAD_BUSY = 0.6  # of the window, from which one pool thread is the cap

FILE_READ_SHARE = 0.5
# Stages whose own self time waits for their functions' ops (tfdata_slowest_stage and
# tfdata_map_serial name those): tfdata_map_function is for a slowest stage of another kind.
_FUNCTION_STAGES = ("ParallelMap", "Map", "ParallelInterleave", "ParallelFilter",
                    "ParallelBatch")
PYTHON_OP_SHARE = 0.10  # of the window's input-stage time
STAGE_SHARE = 0.25  # the slowest stage must explain this much of the input wait
# XProf's MODERATELY verdict asks to reduce both input and 'All Others'; where 'All Others' is
# this many times the input wait, its fix is the one to take first (a Keras fit of small
# steps: 5 % input, 40 % Python around the step).
OTHER_FIRST = 2.0
_SEVERITY = {"highly": "critical", "moderately": "warning", "potentially": "info"}
_THRESHOLD = (f"input >= {HIGHLY_INPUT_PCT:g} % highly, >= {MODERATELY_INPUT_PCT:g} % "
              "moderately, else 'All Others' >= 3 % potentially (XProf)")
_GATE = f"input >= {MODERATELY_INPUT_PCT:g} % of step time (XProf's moderately input-bound)"


def _pipeline_cores(s: WindowSummary) -> list[Advice]:
    """tfdata_shares_cores: a host-only job XProf calls not input-bound whose tf.data threads
    work beside the steps on the cores they compute on."""
    ip, st = s.input_pipeline, s.steps
    if on_gpu(s) or not st.count or st.mean_s <= 0 or s.input_bound.verdict in (
            "highly", "moderately", "unknown"):
        return []  # an input-bound job's input_bound fix says it (`_shared_cores`)
    work = _pool_work(s)
    share = work / st.mean_s
    if share < CORES_INFO_SHARE:
        return []
    cores = ip.pool_busy_s / s.duration_s if s.duration_s > 0 else 0.0
    return [SHARES_CORES.advice(
        "warning" if share >= CORES_WARNING_SHARE else "info",
        f"tf.data's pool threads work {1e3 * work:.2f} ms per step ({cores:.1f} cores' worth "
        f"of the window) beside steps of {1e3 * st.mean_s:.2f} ms that compute on the "
        f"host's cores: XProf calls the job {s.input_bound.verdict.upper()} input-bound (each "
        "batch was ready), but the pipeline takes CPU the step could use.",
        {"pool_work_s_per_step": work, "pool_share_of_step": share, "pool_cores": cores},
        f"host-only, not input-bound, tf.data pool work per step >= "
        f"{100 * CORES_INFO_SHARE:g} % of step time (tfobs); a warning from "
        f"{100 * CORES_WARNING_SHARE:g} %")]


def _ignore_errors(s: WindowSummary) -> list[Advice]:
    """tfdata_ignore_errors: an ignore_errors() stage that passed on fewer elements than
    its input made: the rest raised errors, silently dropped, their work spent."""
    ip = s.input_pipeline
    name, passed, made, kind = (ip.ignore_errors_stage, ip.ignore_errors_passed,
                                ip.ignore_errors_input, ip.ignore_errors_input_kind)
    dropped = made - passed
    if not name or dropped < max(IGNORE_DROPS_MIN, IGNORE_DROPS_SHARE * made):
        return []
    batches = kind in ("BatchV2", "Batch", "ParallelBatch", "PaddedBatchV2")
    ops = (f" (tf.data's function ops in the window: {1e3 * ip.function_ops_s:.2f} ms, "
           f"most in {', '.join(ip.function_ops_top)})" if ip.function_ops_top else "")
    return [IGNORE_ERRORS.advice(
        "info",
        f"ignore_errors() ({name}) passed on {passed} of the {made} "
        f"{'batches' if batches else 'elements'} its input ({kind}) made in the window: "
        f"{dropped} ({100 * dropped / made:.0f} %) raised an error and were dropped"
        + (", each a whole batch" if batches else "") + ". Each dropped element's work in "
        f"the stages under it was spent for nothing{ops}, and the errors pass silently "
        "(ignore_errors() logs none unless log_warning=True).",
        {"ignore_errors_dropped": float(dropped), "ignore_errors_input": float(made),
         "ignore_errors_dropped_share": dropped / made},
        f"an ignore_errors() stage's elements >= {IGNORE_DROPS_MIN} and >= "
        f"{100 * IGNORE_DROPS_SHARE:g} % fewer than its input's (tfobs)")]


def _shard_after_read(s: WindowSummary) -> list[Advice]:
    """tfdata_shard_after_read: records read below a Dataset.shard() stage, most of them
    read for nothing."""
    ip = s.input_pipeline
    if not ip.shard_after_read_stage:
        return []
    readers = ", ".join(ip.shard_after_read_readers)
    work = sum(st.self_s for st in ip.stages)
    share = ip.shard_after_read_s / work if work > 0 else 0.0
    bound = s.input_bound.verdict in ("highly", "moderately") and share >= STAGE_SHARE
    return [SHARD_AFTER_READ.advice(
        "warning" if bound else "info",
        f"Dataset.shard() ({ip.shard_after_read_stage}) runs after its input's work "
        f"({readers} below it): each worker does that work for every element and keeps one "
        f"in num_shards, so most of the {1e3 * ip.shard_after_read_s:.2f} ms its input's "
        "stages took in the "
        f"window ({100 * share:.0f} % of the pipeline's stages' time) went to elements "
        "another worker handles too"
        + (f", in a job XProf calls {s.input_bound.verdict.upper()} input-bound" if bound
           else "") + ".",
        {"shard_input_s": ip.shard_after_read_s, "shard_input_share": share},
        f"a Shard stage with a record reader or a map below it (tfobs); a warning where "
        f"XProf calls the job highly or moderately input-bound and the stages below it hold >= "
        f"{100 * STAGE_SHARE:g} % of the pipeline's stages' time")]


def check(s: WindowSummary) -> list[Advice]:
    anew = _iterator_per_step(s)
    out = (_output(s) + _pipeline_cores(s) + _ignore_errors(s)
           + _shard_after_read(s) + anew)
    ib = s.input_bound
    # A JAX step waiting in tf.data's next(): input XProf cannot see (no TensorFlow op).
    hidden_pct = (100.0 * s.steps.python_tfdata_next_s / s.steps.mean_s
                  if s.steps.mean_s > 0 else 0.0)
    if ib.verdict not in ("highly", "moderately") and hidden_pct >= MODERATELY_INPUT_PCT:
        out.append(_hidden_wait(s, hidden_pct))  # XProf's NOT or POTENTIALLY misses it
        return out
    loader_pct = loader_wait_pct(s)  # a Python loader's: host compute to XProf too
    if ib.verdict not in ("highly", "moderately") and loader_pct >= MODERATELY_INPUT_PCT:
        out.append(_loader_wait(s, loader_pct))
        return out
    step_s = step_total_s(s)
    graph_pct = 100.0 * s.input_pipeline.in_graph_loop_input_s / step_s if step_s > 0 else 0.0
    if ib.verdict not in ("highly", "moderately") and graph_pct >= MODERATELY_INPUT_PCT:
        out.append(_in_graph_wait(s, graph_pct))  # a loop XProf sees no input op in
        return out
    if ib.verdict not in _SEVERITY:
        return out
    input_pct = step_pct(s, "input")
    other_pct = step_pct(s, "other")
    jax = s.environment.framework == "jax"
    synthetic = "one batch reused every step" if jax else "dataset.take(1).cache().repeat()"
    fix = (f"fix the input pipeline first. Check: train the same step on synthetic data "
           f"(e.g. {synthetic}); if input is the bottleneck the step "
           f"time drops by about {one_digit(input_pct)} % (the input share of step time)")
    cause = ("most of it XLA's CPU runtime running the step's compiled work on threads no "
             "step is linked to" if runtime_holds_other(s)
             else "usually Python in or around the step")
    others = (f"'All Others' ({one_digit(other_pct)} %: host time no "
              f"{'JAX' if jax else 'TensorFlow'} op covers, {cause})")
    if ib.verdict == "potentially" and _no_input(s, input_pct):
        fix = (f"no tf.data pipeline and no input op ran in the window (input 0 % of step "
               "time): whatever feeds the steps (the step's own outputs, Python values, NumPy "
               "arrays, a generator, a queue filled from Python) runs in Python, and the "
               f"verdict rests on {others}. Read all_others_bound first (and python_in_step "
               "where it is listed); to check the feeding, run the same step on one batch "
               "converted to tensors once before the loop (tf.convert_to_tensor): the step "
               "time drops by what the feeding costs, if anything")
    elif ib.verdict == "potentially":  # XProf's verdict rests on 'All Others', not input
        fix = (f"the input wait is only {one_digit(input_pct)} % of step time; the verdict "
               f"rests on {others}. Read all_others_bound first (and python_in_step where it "
               "is listed); check the input by training the same step on synthetic data "
               f"({synthetic}): the step time should not move")
        shared = _shared_cores(s)
        fix += f", unless {shared}" if shared else ""
    elif ib.verdict == "moderately" and other_pct >= OTHER_FIRST * input_pct:
        fix = (f"reduce both, the larger first: {others} against {one_digit(input_pct)} % of "
               "input wait. Read all_others_bound first (and python_in_step where it is "
               "listed), then the input pipeline. Check the input by training the same step "
               f"on synthetic data ({synthetic}): the step time drops by about "
               f"{one_digit(input_pct)} %")
    ip = s.input_pipeline
    evidence = {"input_pct": input_pct, "other_pct": other_pct, "step_s": s.steps.mean_s,
                "expected_saving_pct": max(input_pct, hidden_pct)}
    loader = _loader(s, input_pct, synthetic)
    if loader and ib.verdict != "potentially":
        fix = loader
        evidence["loader_input_pct"] = 100.0 * ip.loader_input_s / s.steps.mean_s
    if ip.prefetch_fetches:
        evidence.update(prefetch_fetches=float(ip.prefetch_fetches),
                        prefetch_ready=float(ip.prefetch_ready),
                        prefetch_empty_s=ip.prefetch_empty_s)
    # tf.distribute's and copy_to_device's hand-offs have rules of their own.
    keeps_up = (_keeps_up(s) if ib.verdict != "potentially" and not ip.per_replica_input
                and not ip.device_copy_input else "")
    few = _concentrated(s) or _stalls(s)
    if keeps_up and ib.verdict == "moderately" and other_pct >= OTHER_FIRST * input_pct:
        fix = (f"reduce both, the larger first: {others} against {one_digit(input_pct)} % of "
               "input wait. Read all_others_bound first (and python_in_step where it is "
               f"listed); as for the input, {keeps_up}")
    elif keeps_up:
        fix = keeps_up
    elif few:
        fix = few + fix
    if anew and ib.verdict in ("highly", "moderately"):
        fix = ("the steps make a new dataset iterator each (tfdata_iterator_per_step): make "
               "it once before the loop first; the pipeline's stages then fill once, not "
               "before every step's batch, and no stage needs changing before the input "
               "share is measured again")
    out.append(INPUT_BOUND.advice(_SEVERITY[ib.verdict], ib.advice, evidence, _THRESHOLD, fix))
    # A pipeline that keeps up has no stage to fix: its wait is the hand-over; nor has one
    # started over in every step: its stages' time is the refill.
    if ib.verdict in ("highly", "moderately") and not keeps_up and not anew:
        out += _stage_rules(s, input_pct)
    return out


def _iterator_per_step(s: WindowSummary) -> list[Advice]:
    """tfdata_iterator_per_step: a new iterator made from Python in most steps (a loop
    taking its batch with `next(iter(dataset))`): the pipeline starts over every step."""
    ip, st = s.input_pipeline, s.steps
    if not iterator_each_step(s):
        return []
    bound = s.input_bound.verdict in ("highly", "moderately")
    input_pct = step_pct(s, "input")
    shuffle = any("::Shuffle" in stage.name for stage in ip.stages)
    return [ITERATOR_PER_STEP.advice(
        "warning" if bound else "info",
        f"A new dataset iterator is made inside {ip.step_iterators} of the {st.count} "
        f"steps (iter(dataset) in the loop: {1e3 * ip.step_iterators_s / st.count:.2f} ms "
        "per step to make): the pipeline starts over in every step, so each step's batch "
        "waits for it to fill again"
        + (" (its shuffle buffer first)" if shuffle else "")
        + f", {one_digit(input_pct)} % of step time waiting for input, and every step's "
        "batch comes from the dataset's start again"
        + (" (drawn from its first shuffle buffer's elements only)" if shuffle else "")
        + ", never from the rest.",
        {"steps_making_iterators": float(ip.step_iterators),
         "iterator_make_s_per_step": ip.step_iterators_s / st.count, "input_pct": input_pct},
        f"a dataset iterator made from Python in >= {100 * ITERATOR_STEPS_SHARE:g} % of the "
        "kept steps, at least 2 (tfobs); a warning where XProf calls the job highly or "
        "moderately input-bound")]


# The share of the input wait a loader's own stages must hold for its fix to be given.
LOADER_SHARE = 0.5


def _loader(s: WindowSummary, input_pct: float, synthetic: str) -> str:
    """The fix where the steps wait in a loader's marked stages (grain), "" otherwise: its
    knobs, not tf.data's."""
    ip = s.input_pipeline
    per = s.breakdown_s.get("input", 0.0)
    if not ip.loader_stages or per <= 0 or ip.loader_input_s < LOADER_SHARE * per:
        return ""
    return (f"the steps wait in the data loader's stages ({', '.join(ip.loader_stages)}: "
            f"{1e3 * ip.loader_input_s:.2f} ms per step): make its per-record transforms "
            "cheaper or vectorize them (batch first, then transform whole batches), give it "
            "more workers where cores are free (grain: DataLoader(worker_count=...), "
            "mp_prefetch(MultiprocessingOptions(num_workers=...)), or "
            "ReadOptions(num_threads=...) for a dataset's to_iter_dataset) and a deeper "
            "buffer (worker_buffer_size, per_worker_buffer_size, prefetch_buffer_size) so "
            "batches arrive evenly. "
            f"Check: train the same step on synthetic data ({synthetic}); the step time "
            f"drops by about {one_digit(input_pct)} % (the input share of step time)")


# A root prefetch that held a batch at this share of the fetches in the steps, its empty
# fetches holding under the stall share of the input wait, keeps up with the steps.
READY_SHARE = 0.9
STALL_SHARE = 0.3
FETCHES_HOLD = 0.5  # of the input wait: the share the root prefetch's fetches must take
# tf.data's own work per step, as a share of the step, from which a host-only job is told
# that the pipeline's threads take the step's cores.
SHARED_CORES_SHARE = 0.2
# A ready batch's hand-over takes microseconds: 0.002-0.03 ms at the median in the test
# captures' Keras fits, 0.03-0.25 ms for a loop's eager next(). From this median the
# fetching thread waited for something else (a core, a lock), not the hand-over itself
# (gzip_tfrecord_loop, vectorized_map_grads_loop: 1.0-1.1 ms, recorded on 2 loaded cores).
SLOW_HANDOVER_S = 3e-4
# Fetches in the steps a window needs before its prefetch buffer's readiness tells (a
# buffer ready at each of 8 fetches keeps up as one ready at 10 of 10 does; a few
# stalls among them need more: FEW_STEPS_MIN).
KEEPS_UP_MIN_FETCHES = 8


def _keeps_up(s: WindowSummary) -> str:
    """The fix where the pipeline keeps up (its prefetch buffer held a batch at nearly every
    fetch): the input wait is tf.data handing over ready batches, "" otherwise."""
    ip = s.input_pipeline
    waited = step_total_s(s, "input")
    # Where a second pipeline has no prefetch (a root of its own), its wait lies where the
    # fetches do not look: they must hold most of the wait. With every root prefetched, the
    # rest is the fetch op's own cost (an iterator read inside the tf.function, Keras fit).
    if (ip.prefetch_fetches < KEEPS_UP_MIN_FETCHES or waited <= 0
            or ip.prefetch_ready < READY_SHARE * ip.prefetch_fetches
            or (ip.prefetch_s < FETCHES_HOLD * waited and _unprefetched_root(ip))
            or ip.prefetch_empty_s >= STALL_SHARE * waited):
        return ""
    per = s.breakdown_s["input"]
    several = ("Model.compile(steps_per_execution=N); in a loop of your own, a tf.function "
               "that runs several steps over the iterator")
    count = s.steps.count
    fetches = ip.prefetch_fetches / count if count else 0.0
    more = ("put more work in each step (a larger batch) or run several steps per call "
            f"({several})")
    larger = (f"; the steps take {fetches:.0f} batches each (micro-batches): fetch one larger "
              "batch per step and split it inside the step" if fetches >= 2 else "")
    if fetches >= 2 and s.steps.method == "markers_tf_loop":
        # An in-graph loop over the iterator (Keras steps_per_execution, a tf.function
        # looping over steps): each marked step already runs several training steps.
        more = ("put more work in each batch (a larger batch): each marked step already "
                f"runs {fetches:.0f} batches in one call (an "
                "in-graph loop over the iterator: Keras's steps_per_execution), "
                f"{1e3 * per / fetches:.3f} ms of hand-over per batch against "
                f"{1e3 * s.steps.mean_s / fetches:.2f} ms of step per batch, which a larger "
                "steps_per_execution does not shorten")
        larger = ""
    one = _one_fetch(s, waited) or _few_fetches(s, waited)
    if one:
        # Past that fetch, the hand-over of ready batches is a cost each step pays.
        handover, typical = s.input_pipeline.prefetch_median_s, _median_step_s(s)
        if typical > 0 and 100 * handover / typical >= MODERATELY_INPUT_PCT:
            one += f"; the hand-over is a fixed cost per step: {more}" + larger
        return one
    shared = _shared_cores(s)
    if shared:
        shared = f"; but {shared} (check: the same step on dataset.take(1).cache().repeat())"
    if ip.prefetch_median_s >= SLOW_HANDOVER_S:
        return (f"the pipeline keeps up: its prefetch buffer held a ready batch at "
                f"{ip.prefetch_ready} of {ip.prefetch_fetches} fetches in the steps, yet a "
                f"fetch took {1e3 * ip.prefetch_median_s:.2f} ms at the median (up to "
                f"{1e3 * ip.prefetch_longest_s:.2f} ms). Handing over a ready batch itself "
                "costs 0.005-0.03 ms in a Keras fit and up to about 0.2 ms for a loop's eager "
                "next(), so the fetching thread waited for a core (tf.data's threads, the "
                "step's own ops or another process busy on every one; a container's CPU "
                "limit throttles the same way) or for the iterator's lock: check the host's "
                "load and the job's CPU limit (a throttled container's cgroup cpu.stat "
                "counts nr_throttled), and cap tf.data's threads "
                "(options.threading.private_threadpool_size) or the step's "
                "(tf.config.threading.set_inter_op_parallelism_threads) so each leaves the "
                f"other a core; more work per step makes the wait a smaller share of it: "
                f"{more}" + larger + shared)
    return (f"the pipeline keeps up: its prefetch buffer held a ready batch at "
            f"{ip.prefetch_ready} of {ip.prefetch_fetches} fetches in the steps, so the "
            f"{1e3 * per:.2f} ms of input wait per step is tf.data handing over a ready batch "
            "(IteratorGetNext's own cost), which a faster pipeline does not shorten as a "
            f"wait; against steps of {1e3 * s.steps.mean_s:.2f} ms it is a fixed cost per "
            f"step: {more}" + larger + shared)


# One fetch holds the wait where it is this share of the steps' input wait and this many
# times the median fetch (shard_after_read_loop: 40.8 ms of 45.4, the others ~0.5 ms).
ONE_FETCH_SHARE = 0.5
ONE_FETCH_FACTOR = 10.0
# The share of that fetch a stage function's op must run for, on tf.data's threads, to be
# the work it waited behind.
ONE_FETCH_WORK = 0.5
# Slow fetches of ready batches are a few (at most this share of the fetches): where most
# are slow, the median is no hand-over either.
SLOW_FETCHES_SHARE = 0.5


# A ready fetch held while tf.data's threads work: what it is, and the fix.
HELD_BY_PIPELINE = (
    "the fetching thread waiting for a core (or the buffer's lock) while the pipeline works, "
    "not a per-step cost: give tf.data fewer threads than the host has cores "
    "(options.threading.private_threadpool_size, a lower num_parallel_calls), make that "
    "work cheaper or cache() its output, and judge from a longer window")


def _of_median_step(s: WindowSummary) -> str:
    """" (N % of the median M ms step)" for the median fetch, "" without steps."""
    typical = _median_step_s(s)
    if typical <= 0:
        return ""
    return (f" ({100 * s.input_pipeline.prefetch_median_s / typical:.0f} % of the median "
            f"{1e3 * typical:.2f} ms step)")


def _one_fetch(s: WindowSummary, waited: float) -> str:
    """Words for an input wait that is most one fetch's, although the prefetch buffer held a
    batch when it began: no hand-over takes that long, nor is it a cost every step pays;
    "" otherwise."""
    ip = s.input_pipeline
    longest = ip.prefetch_longest_s
    if (not ip.prefetch_longest_ready or longest < ONE_FETCH_SHARE * waited
            or longest < ONE_FETCH_FACTOR * ip.prefetch_median_s):
        return ""
    step = f" (step {ip.prefetch_longest_step})" if ip.prefetch_longest_step >= 0 else ""
    handover = (f"the other {ip.prefetch_fetches - 1} took {1e3 * ip.prefetch_median_s:.2f} ms "
                f"at the median, the hand-over{_of_median_step(s)}")
    said = (f"the wait is one fetch's: {1e3 * longest:.1f} ms of the {1e3 * waited:.1f} ms of "
            f"input wait in the steps is one fetch{step} that began with a batch in the "
            f"prefetch buffer; {handover}. ")
    stage = ip.prefetch_longest_stage
    # "Iterator::Root::Prefetch::ParallelMapV2" -> "the ParallelMapV2 stage (...)"
    named = f"the {stage.rsplit('::', 1)[-1]} stage ({stage})" if stage else ""
    if ip.prefetch_longest_op_s >= ONE_FETCH_WORK * longest:
        return said + (
            f"During it tf.data's threads ran {ip.prefetch_longest_op} for "
            f"{1e3 * ip.prefetch_longest_op_s:.1f} ms{' in ' + named if named else ''}: a fetch of "
            f"a ready batch that long is {HELD_BY_PIPELINE}")
    ran = (f"on tf.data's threads only {named} ran, no op of its for long" if named
           else "nothing ran on tf.data's threads")
    return said + (
        f"No pipeline work held it ({ran}); the fetching thread was held up outside "
        "tf.data (a busy or shared host: other threads or processes on its cores); it is "
        "no per-step cost and no stage to fix: judge from a longer window")


def _few_fetches(s: WindowSummary, waited: float) -> str:
    """Words for an input wait held by a few fetches that began with a batch in the
    prefetch buffer, each far longer than the median fetch (the hand-over), together half
    of the wait or more: no hand-over takes that long, and the steps without one pay only
    the median; "" otherwise."""
    ip = s.input_pipeline
    n, slow = ip.prefetch_slow_ready, ip.prefetch_slow_ready_s
    if n < 2 or slow < ONE_FETCH_SHARE * waited or n > SLOW_FETCHES_SHARE * ip.prefetch_fetches:
        return ""
    nums = ip.prefetch_slow_ready_steps
    steps = (f" (steps {', '.join(map(str, nums[:6]))}{', ...' if len(nums) > 6 else ''})"
             if nums else "")
    handover = (f"the median fetch of the {ip.prefetch_fetches} took "
                f"{1e3 * ip.prefetch_median_s:.2f} ms, the hand-over{_of_median_step(s)}")
    said = (f"the wait is {n} fetches': {1e3 * slow:.1f} ms of the {1e3 * waited:.1f} ms of "
            f"input wait in the steps is {n} fetches{steps} that began with a batch in the "
            f"prefetch buffer, each {SLOW_FETCH_FACTOR:g} times the median fetch or more and a "
            "millisecond or more; "
            f"{handover}. ")
    if ip.prefetch_slow_ready_op_s >= ONE_FETCH_WORK * slow:
        return said + (
            f"During them tf.data's threads ran its stages' ops for "
            f"{1e3 * ip.prefetch_slow_ready_op_s:.1f} ms: fetches of ready batches that long "
            f"are {HELD_BY_PIPELINE}")
    return said + (
        f"No pipeline work held them (tf.data's threads ran ops for "
        f"{1e3 * ip.prefetch_slow_ready_op_s:.1f} ms of them); the fetching thread was held "
        "up outside tf.data (a busy or shared host: other threads or processes on its "
        "cores); it is no per-step cost and no stage to fix: judge from a window on a host "
        "with idle cores")


def _median_step_s(s: WindowSummary) -> float:
    """The median step's seconds (one long step does not move it), 0 without steps."""
    durations = step_field(s.steps, "duration_s")
    return float(np.median(durations)) if durations.size else 0.0


def _shared_cores(s: WindowSummary) -> str:
    """Words for a host-only job whose tf.data threads do a good share of a step's work on
    the cores the step computes on (their work is the step's loss even when every batch
    is ready), "" otherwise."""
    work = _pool_work(s)
    if on_gpu(s) or not work >= SHARED_CORES_SHARE * s.steps.mean_s > 0:
        return ""
    return (f"on this host-only job tf.data's threads run {1e3 * work:.2f} ms of pipeline "
            f"work per step ({100 * work / s.steps.mean_s:.0f} % of a step) on the cores the "
            "step computes on: a cheaper pipeline (cache() after the decoding, fewer parallel "
            "calls, work moved offline) frees them, which can shorten the step by more than "
            "its input share")


def _no_input(s: WindowSummary, input_pct: float) -> bool:
    """Whether a TensorFlow window ran no input at all: no input wait, no tf.data stage or
    input op, no tf.data thread work and no Python loader (a loop of a tf.function fed by
    its own tensors, e.g. token-by-token decoding)."""
    ip = s.input_pipeline
    return (s.environment.framework != "jax" and input_pct == 0.0 and not ip.stages
            and not ip.top_input_ops and not ip.prefetch_fetches and ip.pool_busy_s == 0.0
            and ip.loader_input_s == 0.0 and ip.in_graph_loop_input_s == 0.0)


def _pool_work(s: WindowSummary) -> float:
    """tf.data's pool threads' busy time per step (over the steps the window spans)."""
    return s.input_pipeline.pool_busy_s / window_steps(s) if s.steps.count else 0.0


def _unprefetched_root(ip: InputPipeline) -> bool:
    """Whether a pipeline of the window has no prefetch at its root (a stage
    `Iterator::Root::<not Prefetch>`)."""
    for stage in ip.stages:
        parts = stage.name.split("::")
        if len(parts) >= 3 and parts[:2] == ["Iterator", "Root"]:
            if parts[2].split("[")[0] != "Prefetch":
                return True
    return False


def _stalls(s: WindowSummary) -> str:
    """Words for an input wait held by a few fetches that found the prefetch buffer empty
    while the others found a batch ready (a refill after an epoch's start), "" otherwise;
    read from the fetches where the per-step waits are blurred by the hand-over's."""
    ip = s.input_pipeline
    waited = step_total_s(s, "input")
    empty = ip.prefetch_fetches - ip.prefetch_ready
    if (ip.prefetch_fetches < FEW_STEPS_MIN or waited <= 0 or empty <= 0
            or ip.prefetch_empty_s < CONCENTRATED_SHARE * waited
            or empty > max(1, int(FEW_STEPS * ip.prefetch_fetches))):
        return ""
    cause = (f": {BUCKET_WAIT}" if _bucketing(s) else
             " (a pipeline filling after a start: a new epoch's iterator, a shuffle buffer "
             "refilling, a cache): keep one iterator across epochs (repeat() with "
             "steps_per_epoch), shuffle after cache() or repeat() before shuffle, and judge "
             "from a later window")
    return (f"the wait is a few stalls: {100 * min(1.0, ip.prefetch_empty_s / waited):.0f} % "
            f"of it in {empty} of {ip.prefetch_fetches} fetches that found the prefetch "
            f"buffer empty, the others finding a batch ready{cause}; then: ")


# The input wait is a few steps' where this share of it lies in at most FEW_STEPS of the
# steps, and the other steps wait under MODERATELY_INPUT_PCT of their time.
CONCENTRATED_SHARE = 0.7
FEW_STEPS = 0.2
FEW_STEPS_MIN = 10  # steps a window needs before a few of them can stand out


def _concentrated(s: WindowSummary) -> str:
    """Words for an input wait held by a few steps (the first after an epoch's new
    iterator, a shuffle buffer refilling), "" where it is spread over the steps."""
    items = s.steps.items
    if len(items) < FEW_STEPS_MIN:
        return ""
    # Columns: a long window has thousands of steps.
    wait = step_seconds(s.steps, "input")
    total = float(wait.sum())
    if total <= 0:
        return ""
    order = np.argsort(-wait, kind="stable")  # longest wait first, ties in step order
    held_by = np.cumsum(wait[order])
    k = int(np.searchsorted(held_by, CONCENTRATED_SHARE * total)) + 1
    if k > max(1, int(FEW_STEPS * len(items))):
        return ""
    held = float(held_by[k - 1])
    rest = order[k:]
    rest_time = float(step_field(s.steps, "duration_s")[rest].sum())
    rest_pct = 100 * float(wait[rest].sum()) / rest_time if rest_time > 0 else 0.0
    if rest_pct >= MODERATELY_INPUT_PCT:
        return ""
    nums = ", ".join(str(n) for n in sorted(items[j].step_num for j in order[:k].tolist()))
    if _bucketing(s):
        cause = f": {BUCKET_WAIT}"
    elif (last := int(order[:k].min()) >= len(items) - k - 1) or _slower_after(
            s, int(order[:k].min())):
        # The last steps wait, the first not; or the steps after the first wait run slower
        # than those before it (the pipeline, out of buffer, now paces them).
        where = ("the last steps of the window" if last else
                 f"from step {items[int(order[:k].min())].step_num} on, the steps after it "
                 "slower than those before")
        cause = (f" ({where}: a buffer filled before the window, an interleave's or a "
                 "prefetch's, running dry, so the pipeline is slower than the step and a "
                 "longer window waits more, not less): speed up the slowest stage or read it "
                 "with more parallelism, and judge from a longer window")
    elif _predict_in(s, order[:k]):
        cause = PREDICT_WAIT
    elif ready := _ready_fetches(s, [items[j].step_num for j in order[:k].tolist()]):
        cause = ready
    else:
        cause = (" (a pipeline filling after a start: a new epoch's iterator, a shuffle "
                 "buffer, a cache): keep one iterator across epochs (repeat() with "
                 "steps_per_epoch), prefetch, and judge from a later window")
    return (f"the wait is a few steps': {100 * held / total:.0f} % of it in {k} of "
            f"{len(items)} steps ({nums}), the others waiting {rest_pct:.1f} % of their "
            f"time{cause}; then: ")


def _ready_fetches(s: WindowSummary, nums: list[int]) -> str:
    """Words for waiting steps (step numbers `nums`) whose fetches all began with a batch in
    the prefetch buffer (every fetch of the window found one): no pipeline filled or ran
    dry; "" otherwise."""
    ip = s.input_pipeline
    if (not ip.prefetch_fetches or ip.prefetch_ready < ip.prefetch_fetches
            or not set(nums) <= set(ip.prefetch_slow_ready_steps)):
        return ""
    if ip.prefetch_slow_ready_op_s >= ONE_FETCH_WORK * ip.prefetch_slow_ready_s:
        return (f" (their fetches began with a batch in the prefetch buffer, while tf.data's "
                f"threads ran its stages' ops for {1e3 * ip.prefetch_slow_ready_op_s:.1f} ms: "
                f"{HELD_BY_PIPELINE})")
    return (" (their fetches began with a batch in the prefetch buffer, as every fetch of the "
            "window did, and no pipeline work held them: no pipeline filling or running dry; "
            "the fetching thread was held up outside tf.data, a busy or shared host: other "
            "threads or processes on its cores; no per-step cost and no stage to fix: judge "
            "from a longer window)")


# model.predict called inside some steps of a loop: each call reads its arrays through a
# new tf.data pipeline, and those steps wait for it, not for the training input.
PREDICT_WAIT = (
    " (those steps are the loop's longest, and Keras's predict function ran in the window: "
    "model.predict called in them reads its arrays through a new tf.data pipeline per call, "
    "and that pipeline's start is the wait, not the training input's; long_steps names "
    "them)")
PREDICT_LONG_FACTOR = 3.0  # the waiting steps this many times the median step


def _predict_in(s: WindowSummary, at: np.ndarray) -> bool:
    """Whether the steps `at` (indices) are all long steps and Keras's predict function ran
    in the window at least once for each: model.predict inside them."""
    calls = [c for c in s.steps.calls if c.name == KERAS_TF_PREDICT and c.source == "python"]
    if not calls or calls[0].count < at.size:
        return False
    d = step_field(s.steps, "duration_s")
    return bool((d[at] >= PREDICT_LONG_FACTOR * float(np.median(d))).all())


DRAINED_SLOWER = 1.3  # steps after the first wait this many times the ones before it


def _slower_after(s: WindowSummary, first: int) -> bool:
    """Whether the steps after the first waiting one (index `first`) take, at the median,
    DRAINED_SLOWER times the steps before it: a buffer run dry, not a pipeline's start."""
    d = step_field(s.steps, "duration_s")
    before, after = d[:first], d[first + 1:]
    return (first >= 2 and len(after) >= 2
            and float(np.median(after)) >= DRAINED_SLOWER * float(np.median(before)))


# Bucketing (bucket_by_sequence_length, group_by_window) hands a batch over only when its
# bucket is full: a step now and then waits for a rarely hit bucket, with no pipeline start.
BUCKET_WAIT = (
    "the pipeline groups elements by key (GroupByWindow: bucket_by_sequence_length or "
    "group_by_window), and a batch leaves only when its bucket is full, so a step waits "
    "now and then for a bucket few elements fall in: fewer or wider buckets (bucket "
    "boundaries that split the lengths evenly), smaller batches for the rare buckets "
    "(bucket_batch_sizes), and a deeper prefetch to cover the wait")


def _bucketing(s: WindowSummary) -> bool:
    """Whether the slowest tf.data stage groups elements by key (`GroupByWindow`)."""
    slow = s.input_pipeline.slowest_stage
    return slow is not None and _kind(slow) == "GroupByWindow"


def _in_graph_wait(s: WindowSummary, graph_pct: float) -> Advice:
    """A `for batch in dataset` loop inside the step's tf.function: AutoGraph runs it as one
    ReduceDataset op that takes its batches itself, with no IteratorGetNext, so XProf
    counts the wait as host compute."""
    ip = s.input_pipeline
    step_s = step_total_s(s)
    made = 100.0 * ip.in_graph_loop_iterators_s / step_s
    anew = (f" Making that loop's iterator takes another {one_digit(made)} % "
            f"({1e3 * ip.in_graph_loop_iterators_s / s.steps.count:.2f} ms per step): a new "
            "one on every call." if made >= MODERATELY_INPUT_PCT else "")
    return INPUT_BOUND.advice(
        "critical" if graph_pct >= HIGHLY_INPUT_PCT else "warning",
        f"{one_digit(graph_pct)} % of step time waits for batches inside a dataset loop run "
        "in the graph (`for batch in dataset:` inside the tf.function: a ReduceDataset op), "
        "which XProf counts as host compute, not input, so its verdict, "
        f"'{s.input_bound.verdict}' input-bound, misses it.{anew}",
        {"input_pct": step_pct(s, "input"), "in_graph_loop_input_pct": graph_pct,
         "in_graph_loop_iterators_pct": made, "step_s": s.steps.mean_s,
         "expected_saving_pct": graph_pct},
        f"batches taken inside an in-graph dataset loop >= {MODERATELY_INPUT_PCT:g} % of step "
        f"time (tfobs; critical from {HIGHLY_INPUT_PCT:g} %, XProf's thresholds)",
        "fix that loop's pipeline as any input pipeline: end it with "
        ".prefetch(tf.data.AUTOTUNE), map with num_parallel_calls=tf.data.AUTOTUNE, cache() "
        "what fits in memory; and rather than handing the function the dataset (a new "
        "iterator every call), make one iterator (iter(dataset)) and pass that, taking "
        "batches with next() inside the function")


def _hidden_wait(s: WindowSummary, hidden_pct: float) -> Advice:
    """XProf says NOT (or POTENTIALLY) input-bound, yet the steps wait in tf.data's next():
    tfobs's own event (or the Python tracer's) holds the wait, which XProf does not type as
    input."""
    return _unseen_wait(
        s, hidden_pct, "tfdata_next_pct",
        "inside a tf.data iterator's next(), which XProf counts as host compute or 'All "
        "Others', not input (the capture holds no tf.data op: a JAX job fed by tf.data)",
        "time inside tf.data's next() within the steps", "tfobs",
        _hidden_fix(s.steps.python_tfdata_next_s))


def _loader_wait(s: WindowSummary, wait_pct: float) -> Advice:
    """XProf says NOT (or POTENTIALLY) input-bound, yet the steps wait for their batch from
    the job's own loader thread or process (the Python tracer's queue.get, Future.result),
    which XProf counts as host compute."""
    return _unseen_wait(
        s, wait_pct, "loader_wait_pct",
        "from the job's own loader (queue.Queue.get, Future.result: another thread or "
        "process makes the batches), which XProf counts as host compute, not input",
        "time in queue.get / Future.result within the steps", "tfobs, Python tracer on",
        LOADER_WAIT_FIX)


def _unseen_wait(s: WindowSummary, wait_pct: float, key: str, where: str, measured: str,
                 source: str, fix: str) -> Advice:
    """input_bound where the steps wait for their batch `where` XProf's verdict cannot see
    it: warning from XProf's moderate share, critical from its high one."""
    return INPUT_BOUND.advice(
        "critical" if wait_pct >= HIGHLY_INPUT_PCT else "warning",
        f"{one_digit(wait_pct)} % of step time waits for the batch {where}, so its verdict, "
        f"'{s.input_bound.verdict}' input-bound, misses it.",
        {"input_pct": step_pct(s, "input"), key: wait_pct,
         "step_s": s.steps.mean_s, "expected_saving_pct": wait_pct},
        f"{measured} >= {MODERATELY_INPUT_PCT:g} % of step time ({source}; critical from "
        f"{HIGHLY_INPUT_PCT:g} %, XProf's thresholds)",
        f"{fix}. Check by training on one batch reused every step: the step time drops by "
        f"about {one_digit(wait_pct)} %")


# A wait in next() this long per step is the pipeline's work, not the call's own cost.
SLOW_NEXT_S = 1e-3


def _hidden_fix(wait_s: float) -> str:
    """The fix for a wait inside tf.data's next() that XProf does not see, by its length
    per step: a millisecond or more is a pipeline that does not keep up; less may be the
    call's own cost where the pipeline already prefetches."""
    keep_up = ("fix the input pipeline first: end it with .prefetch(tf.data.AUTOTUNE), pass "
               "num_parallel_calls=tf.data.AUTOTUNE to map, cache() what fits in memory")
    if wait_s >= SLOW_NEXT_S:
        return (f"{keep_up}; where it does all that already, its work is the wait "
                f"({1e3 * wait_s:.2f} ms per step): batch before a vectorizable map, cut the "
                "per-element work or move fixed preprocessing offline, or give it more cores")
    return (f"{keep_up}; where it already prefetches, the time is next()'s own cost (a tenth "
            "of a millisecond or more a call): fetch fewer, larger batches, or fetch on a "
            "loader thread")


def _stage_rules(s: WindowSummary, input_pct: float) -> list[Advice]:
    ip = s.input_pipeline
    slow = ip.slowest_stage
    per_step = max(s.steps.count, 1)
    base = {"input_pct": input_pct}
    if slow is not None:
        base["slowest_stage_s_per_step"] = slow.self_s / per_step
    where = f" (slowest stage {_short(slow)}" + (
        f", {1e3 * slow.self_s / per_step:.2f} ms per step)" if slow else ")")
    out: list[Advice] = []
    generator = slow is not None and _from_generator(slow, ip.stages)
    # tf.distribute's per-replica iterators are Generator stages too; with no Python op in
    # the window the slow one is theirs, and from_generator's fix would not apply.
    per_replica = generator and ip.per_replica_input and ip.python_op_s == 0
    # So is copy_to_device's (prefetch_to_device's) copy of each element.
    device_copy = generator and ip.device_copy_input and ip.python_op_s == 0
    if per_replica and slow is not None:
        out.append(_per_replica(s, slow, base, where))
    elif device_copy and slow is not None:
        out.append(_device_copy(s, slow, base, where))
    elif generator:
        out.append(FROM_GENERATOR.advice(
            "warning", f"tf.data reads from a Python generator{where}.",
            base, _GATE))
    stage_s = sum(st.self_s for st in ip.stages)
    py_share = ip.python_op_s / stage_s if stage_s > 0 else 0.0
    if not generator and ip.python_op_s > 0 and py_share >= PYTHON_OP_SHARE:
        out.append(PY_FUNCTION.advice(
            "warning",
            f"tf.data runs Python (py_function / numpy_function): "
            f"{1e3 * ip.python_op_s / per_step:.2f} ms per step{where}.",
            {**base, "python_op_s_per_step": ip.python_op_s / per_step,
             "python_op_share_of_tfdata": py_share},
            f"{_GATE} and Python ops >= {100 * PYTHON_OP_SHARE:g} % of tf.data stage time"))
    parallel = sorted({_kind(st) for st in ip.stages if _kind(st).startswith(PARALLEL_STAGES)})
    if parallel and ip.pool_threads == 1 and ip.pool_busy >= ONE_THREAD_BUSY:
        out.append(ONE_THREAD.advice(
            "warning",
            f"tf.data's parallel stages ({', '.join(parallel)}) ran on one thread of its "
            f"pool, busy {100 * ip.pool_busy:.0f} % of the window: their parallel calls run "
            f"one after another{where}.",
            {**base, "pool_threads": float(ip.pool_threads), "pool_busy": ip.pool_busy},
            f"{_GATE}, parallel stages, one pool thread busy >= "
            f"{100 * ONE_THREAD_BUSY:g} % of the window"))
    filling = slow is not None and CACHE_FILLING in slow.name
    if slow is not None and _kind(slow) == "Map":
        fix = (REJECTION_RESAMPLE_FIX if in_rejection_resample(slow.name, ip.stages)
               else MAP_IN_INTERLEAVE_FIX if in_interleave_element(slow.name) else "")
        out.append(MAP_SERIAL.advice(
            "warning", f"The slowest tf.data stage is a sequential map{where}.", base, _GATE,
            _cache_fill_fix(slow.name) + (fix or MAP_SERIAL.fix) if filling else fix))
    # Per pipeline: a job reading two datasets may prefetch one and not the slow one, whose
    # stages then have no Prefetch above them (tf.distribute's and copy_to_device's hand-offs
    # are Generator stages with their own rules).
    unprefetched = (not any("::Prefetch" in st.name for st in ip.stages) if ip.stages
                    else False)
    slow_alone = (slow is not None and "::Prefetch" not in slow.name
                  and not per_replica and not device_copy)
    if unprefetched or slow_alone:
        what = ("The input pipeline has no prefetch stage" if unprefetched else
                "The pipeline of the slowest tf.data stage has no prefetch stage (another "
                "pipeline of the job has one)")
        out.append(NO_PREFETCH.advice(
            "warning", f"{what}{where}.",
            {**base, "stages_seen": float(len(ip.stages))}, _GATE,
            PYDATASET_PREFETCH_FIX if generator else ""))
    input_s = s.steps.mean_s * input_pct / 100.0
    functions = ip.function_ops_s
    if (slow is not None and not _kind(slow).startswith(_FUNCTION_STAGES)
            and functions > slow.self_s and functions / per_step >= STAGE_SHARE * input_s):
        out.append(MAP_FUNCTION.advice(
            "warning",
            f"tf.data's own threads run {1e3 * functions / per_step:.2f} ms per step of "
            f"TensorFlow ops for its stages' functions (top: {', '.join(ip.function_ops_top)})"
            f", more than its slowest stage by self time{where}: the mapped functions are "
            "the pipeline's heaviest work, which no stage's self time holds.",
            {**base, "function_ops_s_per_step": functions / per_step,
             "input_s_per_step": input_s},
            f"{_GATE}, function ops on tf.data's threads > the slowest stage's self time and "
            f">= {100 * STAGE_SHARE:g} % of the input wait per step"))
    totals = ip.host_input_total_s or ip.host_input_s
    reads = totals.get("demanded_file_read", 0.0) + totals.get("advanced_file_read", 0.0)
    host_in = sum(totals.values())
    read_share = reads / host_in if host_in > 0 else 0.0
    # A file source slowest by self time is not the pipeline's heaviest work where its
    # functions' ops outweigh every read.
    slow_is_file = (slow is not None and slow.name.endswith(_FILE_SOURCES)
                    and functions <= reads)
    if reads > 0 and (slow_is_file or read_share >= FILE_READ_SHARE):
        out.append(FILE_READ.advice(
            "warning", f"File reads take {100 * read_share:.0f} % of host input time{where}.",
            {**base, "file_read_share": read_share, "file_read_s_per_step": reads / per_step},
            f"{_GATE} and file reads the slowest stage or >= {100 * FILE_READ_SHARE:g} % of "
            "host input time"))
    if not out and slow is not None and slow.self_s / per_step >= STAGE_SHARE * input_s:
        what, specific = _sequential_stage(slow, ip.stages, per_step)
        fix = specific or (SLOWEST_STAGE.fix if filling else "")
        if not specific and _maps_batches(slow, ip.stages):
            ops = (f" ({1e3 * functions / per_step:.2f} ms per step of TensorFlow ops on "
                   "tf.data's threads)" if functions > 0 else "")
            fix = MAP_AFTER_BATCH_FIX.format(ops=ops)
        out.append(SLOWEST_STAGE.advice(
            "warning", f"The slowest tf.data stage is {slow.name} "
                       f"({1e3 * slow.self_s / per_step:.2f} ms per step against "
                       f"{1e3 * input_s:.2f} ms of input wait){what}.",
            {**base, "input_s_per_step": input_s}, f"{_GATE} and the stage's self time >= "
            f"{100 * STAGE_SHARE:g} % of the input wait per step",
            _cache_fill_fix(slow.name) + fix if filling and slow is not None else fix))
    return out


# Stages no num_parallel_calls reaches, with the fix each needs instead of the generic one.
SCAN_FIX = (
    "Dataset.scan carries its state from one element to the next, so it runs one element at "
    "a time: compute the running state offline, or batch first and scan within each batch "
    "with vectorized ops (tf.math.cumsum, tf.scan over the batch inside one map)")
WINDOW_FIX = (
    "window().flat_map() builds a small dataset for every window, one after another: for "
    "sliding windows use keras.utils.timeseries_dataset_from_array, or batch a long run and "
    "cut its windows in one op (tf.signal.frame) inside a parallel map")


SHUFFLE_FIX = (
    "a shuffle buffer fills again at every new iterator (each epoch's iter(dataset), a "
    "dataset made again): make the dataset once and keep one iterator across epochs "
    "(Dataset.repeat() with steps_per_epoch), and size buffer_size to the mixing you need "
    "(shuffle file names, then records in a smaller buffer); a map under it is not the cost")


SNAPSHOT_FIX = (
    "Dataset.snapshot reads its files back one element at a time: snapshot after batch() "
    "(fewer, larger records), or cache() instead where the data fits in memory; the map "
    "under the snapshot already ran when it was written")


# A filter that drops most of what its input made: that work is thrown away.
FILTER_KEEPS = 0.5  # of its input's elements, at or under which the filter is named
FILTER_FIX = (
    "every element the filter drops was made first by the stages under it: filter before "
    "the expensive work (move filter() ahead of the map, computing the predicate on the raw "
    "element), or filter whole batches after batch() (tf.boolean_mask); the predicate runs "
    "one element at a time in the filter's own thread")


def _filter_keeps(slow: TfDataStage, stages: tuple[TfDataStage, ...]
                  ) -> tuple[TfDataStage, int] | None:
    """(the filter, its input's elements) where the slowest stage is a Filter, or the
    input of one, that keeps at most `FILTER_KEEPS` of its input's elements; else None."""
    key = same_stage_key(slow.name)
    filt = slow if _kind(slow) == "Filter" else next(
        (st for st in stages if _kind(st) == "Filter"
         and same_stage_key(st.name) == key.rsplit("::", 1)[0]), None)
    if filt is None or not filt.count:
        return None
    under = same_stage_key(filt.name) + "::"
    made = max((st.count for st in stages if same_stage_key(st.name).startswith(under)
                and "::" not in same_stage_key(st.name)[len(under):]), default=0)
    return (filt, made) if made and filt.count <= FILTER_KEEPS * made else None


def _sequential_stage(slow: TfDataStage, stages: tuple[TfDataStage, ...], per_step: int
                      ) -> tuple[str, str]:
    """(words for the message, the fix) where the slowest stage is one of a kind whose fix
    is not the generic one: a scan, a window's flat_map, sample_from_datasets' selector, a
    filter that drops most of its input (or that filter's input); ("", "") otherwise."""
    kind, key = _kind(slow), same_stage_key(slow.name)
    dropped = _filter_keeps(slow, stages)
    if dropped is not None:
        filt, made = dropped
        return (f": {'a filter' if filt is slow else 'the input of a filter'} that keeps "
                f"{filt.count} of {made} elements ({100 * filt.count / made:.0f} %), so each "
                f"element kept costs the work of about {made / filt.count:.0f}", FILTER_FIX)
    if any(same_stage_key(st.name).startswith(key + "::SnapshotReader") for st in stages):
        return (": the snapshot's own reader (a parallel map over its SnapshotReader), not a "
                "map of the job's: the stages under the snapshot do not run when it is read",
                SNAPSHOT_FIX)
    if kind == "Scan":
        return ": a scan, sequential by nature", SCAN_FIX
    if kind in ("Shuffle", "ShuffleAndRepeat"):
        return (": a shuffle, whose time is its buffer filling (buffer_size elements read "
                "before the first leaves) at every new iterator", SHUFFLE_FIX)
    if kind == "FlatMap" and any(same_stage_key(st.name) == key + "::Window" for st in stages):
        return ": the flat_map of Dataset.window", WINDOW_FIX
    head, sep, rest = key.partition("::DirectedInterleave::")
    if sep and rest:
        # sample_from_datasets / choose_from_datasets draw each element's source from a
        # dataset of their own (`DirectedInterleave::...`, no index); the datasets drawn from
        # are `DirectedInterleave[k]`. The selector's self time waits for them.
        inputs = [st for st in stages if same_stage_key(st.name).startswith(
            head + "::DirectedInterleave[")]
        if inputs:
            big = max(inputs, key=lambda st: st.self_s)
            return (": sample_from_datasets' (or choose_from_datasets') own choice of source, "
                    "not one of the datasets it draws from",
                    "the choice of source waits for the datasets it draws from: make those "
                    f"cheaper, the heaviest first ({big.name}, "
                    f"{1e3 * big.self_s / per_step:.2f} ms per step): parallel map, cache() "
                    "what fits in memory, prefetch each before sampling")
    return "", ""


def _own_stages_s(s: WindowSummary, slow: TfDataStage) -> float:
    """Self time per step of the dataset's own stages: every stage but the slow one and the
    names above it (those wrap it and the dataset's stages alike). By key: a slow stage
    merged over epochs leaves out each epoch's part of it."""
    key = same_stage_key(slow.name)
    # The names above it are its prefixes ending before a `::`: their lengths, not the
    # prefixes themselves (a name 32,000 stages deep made 32,000 copies of it: 24 s, 2.5 GB).
    above, at = set(), len(key)
    while (at := key.rfind("::", 0, at)) >= 0:
        above.add(at)

    def wraps(name: str) -> bool:
        k = same_stage_key(name)
        return k == key or (len(k) in above and key.startswith(k))

    return sum(st.self_s for st in s.input_pipeline.stages
               if not wraps(st.name)) / max(s.steps.count, 1)


def _device_copy(s: WindowSummary, slow: TfDataStage, base: dict[str, float],
                 where: str) -> Advice:
    """copy_to_device / prefetch_to_device's copy is the slowest stage: its self time is the
    wait for the dataset it copies from and the copy itself; which one, the dataset's own
    stages say (as for tf.distribute's per-replica input)."""
    own = _own_stages_s(s, slow)
    wait = slow.self_s / max(s.steps.count, 1)
    evidence = {**base, "dataset_stages_s_per_step": own}
    gate = (f"{_GATE}, the slowest stage a Generator running copy_to_device's "
            "IteratorFromStringHandleV2 ops and no Python op")
    text = (f"The slowest tf.data stage is the copy of each element by copy_to_device or "
            f"prefetch_to_device, a Generator stage that runs no Python{where}; the dataset "
            f"it copies from takes {1e3 * own:.2f} ms per step in its own stages")
    if own >= DATASET_SHARE * wait:
        return SLOWEST_STAGE.advice(
            "warning", text + ": the copy waits for that dataset.", evidence, gate,
            "make the dataset before the copy keep ahead: map/interleave with "
            "num_parallel_calls=tf.data.AUTOTUNE, cache() what fits in memory, and a "
            ".prefetch(tf.data.AUTOTUNE) before copy_to_device")
    return SLOWEST_STAGE.advice(
        "warning", text + ": the wait is the copy itself.", evidence, gate,
        "a copy to the CPU the dataset already runs on buys nothing: drop copy_to_device / "
        "prefetch_to_device and end the pipeline with .prefetch(tf.data.AUTOTUNE); to a GPU, "
        "give the copy a buffer (prefetch_to_device(device, buffer_size=2 or more)) so it "
        "runs ahead of the step")


def _per_replica(s: WindowSummary, slow: TfDataStage, base: dict[str, float],
                 where: str) -> Advice:
    """tf.distribute's per-replica iterators are the slowest stage: is it the dataset they
    read (its own stages, below theirs), or the hand-off itself?"""
    per_step = max(s.steps.count, 1)
    own = _own_stages_s(s, slow)
    wait = slow.self_s / per_step
    each = slow.self_s / max(slow.count, 1)
    evidence = {**base, "dataset_stages_s_per_step": own, "s_per_replica_batch": each}
    gate = (f"{_GATE}, MultiDeviceIterator ops seen and no Python op; the dataset is blamed "
            f"where its stages take >= {100 * DATASET_SHARE:g} % of the wait")
    if own >= DATASET_SHARE * wait:
        return PER_REPLICA_INPUT.advice(
            "warning", f"The replicas wait for tf.distribute's per-replica input{where}; the "
            f"distributed dataset's own stages take {1e3 * own:.2f} ms per step: it does not "
            "keep ahead.", evidence, gate,
            "prefetch and parallelize the dataset you distribute: end it with "
            ".prefetch(tf.data.AUTOTUNE), map/interleave with "
            "num_parallel_calls=tf.data.AUTOTUNE, cache() what fits in memory")
    return PER_REPLICA_INPUT.advice(
        "warning", f"The replicas wait in tf.distribute's per-replica input iterators{where}, "
        f"{1e3 * each:.2f} ms per replica batch, while the distributed dataset's own "
        f"stages take {1e3 * own:.2f} ms per step: the wait is the hand-off, not the dataset.",
        evidence, gate,
        "tf.data fixes to the dataset (prefetch, parallel map) will not shorten the hand-off "
        "of each replica's batch; where the host has a core free, let it run further ahead: "
        "tf.distribute.InputOptions("
        "experimental_per_replica_buffer_size=2) passed to experimental_distribute_dataset or "
        "distribute_datasets_from_function")


def _from_generator(slow: TfDataStage, stages: tuple[TfDataStage, ...]) -> bool:
    """The slowest stage is a Generator, or the FlatMap `from_generator` builds around one
    (`range(...).flat_map(generator)`: its self time includes handing the Python elements on;
    Keras's PyDataset adapter reads that way)."""
    kind = _kind(slow)
    if kind != "FlatMap":
        return kind == "Generator"
    below = same_stage_key(slow.name) + "["  # its elements, of every epoch where merged
    return any(same_stage_key(st.name).startswith(below) and _kind(st) == "Generator"
               for st in stages)


# A map whose input is a batch already runs once per batch: "batch before map" is done.
MAP_AFTER_BATCH_FIX = (
    "the map already runs on whole batches (it comes after batch), so its time is its "
    "ops{ops}: make those ops cheaper, "
    "cache() after it where the data is deterministic and fits in memory, or move the work "
    "offline; on a host-only job those threads share the step's cores")


def _maps_batches(slow: TfDataStage, stages: tuple[TfDataStage, ...]) -> bool:
    """Whether `slow` is a (parallel) map whose input stage is a batch."""
    if _kind(slow) not in ("Map", "ParallelMap", "ParallelMapV2"):
        return False
    return any(st.name.startswith(slow.name + "::")
               and st.name[len(slow.name) + 2:].split("::")[0].split("[")[0]
               in ("BatchV2", "Batch", "ParallelBatch", "PaddedBatchV2")
               for st in stages)


def _kind(stage: TfDataStage) -> str:
    """The last iterator of a stage name, without its index: `...::FlatMap[0]::Map` -> Map."""
    last = stage.name.rsplit("::", 1)[-1]
    return last.split("[", 1)[0]


def _short(stage: TfDataStage | None) -> str:
    return stage.name if stage is not None else "unknown"


def _output(s: WindowSummary) -> list[Advice]:
    """XProf's OutputAnalysis: its sentences and thresholds (5 % moderately, 20 % highly)."""
    pct = step_pct(s, "output")
    if not s.steps.count or pct < MODERATELY_INPUT_PCT:
        return []
    if pct >= HIGHLY_INPUT_PCT:
        text = (f"Your program is HIGHLY output-bound because {one_digit(pct)}% of the total "
                "step time sampled is spent on output. Therefore, you should first focus on "
                "reducing the output time.")
    else:
        text = (f"Your program is MODERATELY output-bound because {one_digit(pct)}% of the "
                "total step time sampled is spent on output. Therefore, you would need to "
                "reduce both the output time and other time.")
    return [OUTPUT_BOUND.advice(
        "critical" if pct >= HIGHLY_INPUT_PCT else "warning", text, {"output_pct": pct},
        "output >= 20 % highly, >= 5 % moderately (XProf)")]
