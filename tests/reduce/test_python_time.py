"""Python inside the steps, from the Python tracer's events (`steps.python_traced_s`).

On JAX CPU captures recorded for this (tools/record_jax_cpu_captures.py; JAX's
`jax.profiler.trace` runs the Python tracer by default): a step that sleeps 2 ms in Python
for its batch is host compute and NOT input-bound for XProf, as for tfobs's breakdown;
tfobs also says how much of the step ran Python functions, and which.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

import tfobs
from tests.conftest import CAPTURES
from tests.support.xprof_reference import xprof_steps
from tfobs.analysis import python_time
from tfobs.analysis.advice import steps as steps_advice
from tfobs.analysis.advice.rule import LOADER_WAIT_FIX
from tfobs.analysis.python_time import _last_open
from tfobs.analysis.steps import find_steps
from tfobs.analysis.timeline import Timeline, id_array
from tfobs.xspace.reader import parse

WAIT = CAPTURES / "generated__jax0.10cpu__python_wait_steps.xplane.pb"
PLAIN = CAPTURES / "generated__jax0.10cpu__step_annotation.xplane.pb"
EPOCHS = CAPTURES / "generated__jax0.10cpu__epoch_step_annotations.xplane.pb"
CALLS = CAPTURES / "generated__jax0.10cpu__jitted_calls_only.xplane.pb"
TF_TRACER = CAPTURES / "generated__tf2.21cpu__python_tracer_loop.xplane.pb"
TF_PLAIN = CAPTURES / "generated__tf2.21cpu__conv_bn_custom_loop.xplane.pb"
LOADER = CAPTURES / "generated__jax0.10cpu__python_loader_thread.xplane.pb"
GPU_WAIT = CAPTURES / "recorded__h100_jax0.11.2__input_bound_host_wait.xplane.pb"
COMPUTE_WAIT = CAPTURES / "generated__jax0.10cpu__compute_wait_steps.xplane.pb"
RECOMPILE = CAPTURES / "generated__jax0.10cpu__recompile_each_step.xplane.pb"
DEBUG_PRINT = CAPTURES / "generated__jax0.10cpu__debug_print_steps.xplane.pb"
TFDATA = CAPTURES / "generated__jax0.10cpu__tfdata_loader_steps.xplane.pb"
# The same job with tfobs's event around tf.data's next() (live JAX windows have it).
WAIT_IN = CAPTURES / "generated__jax0.10cpu__tfdata_wait_in_steps.xplane.pb"
WAIT_BETWEEN = CAPTURES / "generated__jax0.10cpu__tfdata_wait_between_steps.xplane.pb"
WAIT_LOADER = CAPTURES / "generated__jax0.10cpu__tfdata_wait_loader_thread.xplane.pb"
WAIT_NO_TRACER = CAPTURES / "generated__jax0.10cpu__tfdata_wait_no_tracer.xplane.pb"


def _codes(s: tfobs.WindowSummary) -> dict[str, tfobs.Advice]:
    return {a.code: a for a in s.advice}


def test_a_python_wait_in_the_step_is_named_beside_xprofs_host_compute() -> None:
    pytest.importorskip("xprof")
    s = tfobs.analyze(WAIT)
    steps, props = xprof_steps(WAIT)
    # XProf's figures stand: the sleep is host compute, the job NOT input-bound
    assert "NOT input-bound" in props["input_conclusion"]
    assert s.input_bound.advice == props["input_conclusion"]
    for want, got in zip(steps, s.steps.items, strict=True):
        assert got.breakdown_s["host_compute"] == pytest.approx(want["host_compute"], abs=2e-6)
    # ... and tfobs says the step ran Python, mostly the 2 ms sleep
    st = s.steps
    assert 0.0019 <= st.python_traced_s <= st.mean_s
    assert st.python_traced_top[0] == "time sleep"
    advice = _codes(s)["python_in_step"]
    assert advice.severity == "warning"
    assert advice.evidence["python_traced_pct"] == pytest.approx(
        100 * st.python_traced_s / st.mean_s)
    assert "time sleep" in advice.message and "XProf counts as host compute" in advice.message
    assert "waiting for its data" in advice.fix


def test_a_step_that_sleeps_is_named_as_a_sleep_not_a_data_loader() -> None:
    # A rate-limited loop: the jitted step (about 2.5 ms), then a sleep for the rest of a
    # 25 ms period, inside the marker. No loader at all: the sleep is no wait for data,
    # and loading batches ahead would change nothing.
    path = CAPTURES / "generated__jax0.10cpu__sleep_throttled_steps.xplane.pb"
    s = tfobs.analyze(path)
    st = s.steps
    slept = json.loads((CAPTURES.parent / "provenance" / path.name.replace(".xplane.pb", ".json"))
                       .read_text())["parameters"]["measured_sleep_ms"]
    assert st.python_traced_top[0] == steps_advice.SLEEP_FUNCTION
    assert st.python_traced_s >= 0.9 * min(slept) / 1e3
    a = _codes(s)["python_in_step"]
    assert a.severity == "warning" and "sleeping in time.sleep" in a.message
    assert a.fix.startswith(steps_advice.SLEEP_FIX)
    assert steps_advice.TRACED_FIX not in a.fix and "load and preprocess" not in a.fix
    # the 2 ms sleep standing for a loader's wait reads the same, its fix naming that case
    w = _codes(tfobs.analyze(WAIT))["python_in_step"]
    assert "sleeping in time.sleep" in w.message and "waiting for its data" in w.fix
    # a step whose Python is not mostly a sleep keeps the loader's fix
    loader = _codes(tfobs.analyze(LOADER))["python_in_step"]
    assert steps_advice.SLEEP_FIX not in loader.fix


@pytest.mark.parametrize("case", ["named_scope_step", "debug_nans_steps", "bf16_cpu_steps",
                                  "block_tree_metrics", "x64_mlp_steps"])
def test_a_step_whose_python_is_most_its_own_wait_is_not_told_to_load_ahead(case: str) -> None:
    # Each step ends in block_until_ready; the batch is a numpy slice (microseconds). The
    # Python left in the step (7-8 % of it) is the wait's frame innermost where none of
    # the program's ops ran, and its walk over the waited tree: "load and preprocess the
    # next batches ahead" would change nothing.
    s = tfobs.analyze(CAPTURES / f"generated__jax0.10cpu__{case}.xplane.pb")
    assert s.steps.python_traced_top[0].endswith(" block_until_ready")
    a = _codes(s)["python_in_step"]
    assert "most of it in block_until_ready" in a.message
    assert a.fix == steps_advice.WAIT_FIX and "load and preprocess" not in a.fix
    assert a.guide == steps_advice.WAIT_GUIDE and "tf.data" not in a.guide



def test_the_wait_fix_does_not_lead_with_waiting_on_one_leaf() -> None:
    # A 4-leaf RNN state waited for each step: the tracer's tree_leaves under
    # block_until_ready is 0.41 ms in 12 steps (0.03 ms of a 57 ms step), the rest of the
    # wait's Python the gaps between the program's ops. Waiting on the loss instead saves
    # the walk alone: the fix names the gaps first and sizes the walk.
    s = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__rnn_scan_unroll8_steps.xplane.pb")
    a = _codes(s)["python_in_step"]
    assert a.fix == steps_advice.WAIT_FIX
    assert a.fix.index("gaps between the program's ops") < a.fix.index("one array")
    assert "microseconds a leaf" in a.fix and "thousands of leaves only" in a.fix
    assert "Wait on one array (the loss), not the whole state" not in a.fix

def test_a_prefetching_generator_on_the_step_thread_is_not_offered_as_the_fix() -> None:
    # flax's prefetch_to_device written by hand: a generator on the training thread keeps
    # two batches ahead, but next() builds the batch it enqueues (numpy, 1.2-1.9 ms) inside
    # the step. "a prefetching iterator that keeps a few batches ready" is what the job
    # already has; a background thread is the fix (timed beside it: 6.0-6.5 ms a step
    # against 6.8 ms for the generator, 200 steps each, outside the profiler).
    s = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__prefetch_generator_device_put_steps"
                      ".xplane.pb")
    a = _codes(s)["python_in_step"]
    assert a.severity == "warning" and "numpy_batches" in a.message
    assert a.fix.startswith(steps_advice.TRACED_FIX)
    assert "background thread that keeps a few batches ready" in a.fix
    assert "prefetching iterator that keeps a few batches ready" not in a.fix
    assert "prefetching generator on the training thread" in a.fix


def test_a_wait_first_keeps_the_fix_of_a_cause_named_beside_it() -> None:
    # The EMA's tree_map outside jit (jax_op_by_op) and the device read (array.py _value)
    # are Python to move: their fixes stay, and the wait's is not added.
    for case, kept in (("ema_outside_jit_steps", steps_advice.TRACED_FIX),
                       ("eval_every_4_steps", "keep metrics on the device")):
        s = tfobs.analyze(CAPTURES / f"generated__jax0.10cpu__{case}.xplane.pb")
        assert s.steps.python_traced_top[0].endswith(" block_until_ready")
        a = _codes(s)["python_in_step"]
        assert kept in a.fix and steps_advice.WAIT_FIX not in a.fix
        assert "most of it in block_until_ready" not in a.message


def test_only_the_thread_that_runs_the_steps_counts() -> None:
    # A Python loader thread sleeps and builds batches beside the steps; the steps wait
    # for them in queue.get. The figure is the training thread's (the one holding the
    # markers): the wait, not the loader's own work.
    s = tfobs.analyze(LOADER)
    st = s.steps
    assert st.count == 10 and 0.5 * st.mean_s < st.python_traced_s <= st.mean_s
    assert "queue.py:154 get" in st.python_traced_top
    assert "time sleep" not in st.python_traced_top  # the loader's, on its own thread
    # That wait is the loader's, named so: it already works ahead and does not keep up.
    assert 0.9 * st.python_traced_s < st.python_loader_wait_s <= st.python_traced_s
    a = _codes(s)["python_in_step"]
    assert "waiting in queue.get / Future.result for a batch" in a.message
    assert a.fix.startswith(LOADER_WAIT_FIX) and "a background thread" not in a.fix
    assert "from the job's own loader" in _codes(s)["input_bound"].message


def test_a_step_without_python_work_gets_no_python_advice() -> None:
    s = tfobs.analyze(PLAIN)
    assert s.steps.count == 10
    assert s.steps.python_traced_s < 0.03 * s.steps.mean_s
    assert "python_in_step" not in _codes(s)


def test_a_step_waiting_on_its_compiled_program_is_not_python_work() -> None:
    # The step is a Python function ending in block_until_ready: its frame is innermost
    # while the client thread runs the program (that wait writes no event). Counted as
    # Python, it was 60 % of the step and a warning to move Python out of the step.
    s = tfobs.analyze(COMPUTE_WAIT)
    host = Timeline(parse(COMPUTE_WAIT.read_bytes()).plane("/host:CPU"))
    spans = [(g.begin_ps, g.end_ps) for g in find_steps(host).groups]
    py = id_array(host.mids_where(lambda n: n.startswith("$")))
    steps = np.array(sorted(spans), np.int64)
    line = next(ld for ld in host.lines if ld.line.name == "python")
    busy = python_time.compiled_work(host, line=line)
    _, framed, _ = python_time._innermost_python(line, py, steps, busy[:0])
    _, left, _ = python_time._innermost_python(line, py, steps, busy)
    n = len(spans)
    assert s.steps.count == n - 2  # XProf's first and last dropped; spans are every step
    assert framed.sum() / n > 0.4 * s.steps.mean_s * 1e12  # the frame holds a real wait
    assert left.sum() < 0.25 * framed.sum()
    assert s.steps.python_traced_s < 0.2 * s.steps.mean_s
    advice = _codes(s).get("python_in_step")
    assert advice is None or advice.severity == "info"
    assert busy.size and (busy[1:, 0] > busy[:-1, 1]).all()  # merged and sorted


def test_a_wait_for_a_tree_of_arrays_is_not_python_work() -> None:
    # `jax.block_until_ready((w, metrics))`: PjRt writes no Await pair for a tree's wait,
    # and the program's thunks on XLA's pool leave gaps no op covers; the CPU client's
    # "wait for completion" event spans the program. Without it the wait read as 25 % of
    # the step in Python and a warning to move the data loader out of the step (as on live
    # Flax jobs blocking on a metrics dict).
    path = CAPTURES / "generated__jax0.10cpu__block_tree_metrics.xplane.pb"
    host = Timeline(parse(path.read_bytes()).plane("/host:CPU"))
    assert host.mids_named(python_time.PROGRAM_WAIT)
    assert not host.mids_named(python_time.BUFFER_AWAIT)
    s = tfobs.analyze(path)
    assert s.steps.count == 10 and s.steps.python_traced_s < 0.1 * s.steps.mean_s
    advice = _codes(s).get("python_in_step")
    assert advice is None or advice.severity == "info"


def _framework(file: str) -> tuple[str, str]:
    """(what, fix) of the FRAMEWORK_PYTHON entry for `file`."""
    return next((w, f) for name, _, w, f in steps_advice.FRAMEWORK_PYTHON if name == file)


def test_jaxs_own_python_in_the_step_gets_its_own_fix_not_the_loaders() -> None:
    # random.split and random.normal outside jit: each call is JAX's Python dispatch
    # (`core.py bind`), which moving a data loader off the step would not touch.
    s = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__rng_split_outside_jit.xplane.pb")
    a = _codes(s)["python_in_step"]
    assert any(t.startswith("core.py:") and t.endswith(" bind") for t in s.steps.python_traced_top)
    bind_what, bind_fix = _framework("core.py")
    assert bind_what in a.message and a.fix.startswith(bind_fix)
    # Flax NNX's graph walk (a Flax job; the project's JAX venv has no Flax), by its names
    nnx = ("graphlib.py:882 _graph_flatten", "builtins isinstance",
           "core.py:2746 __instancecheck__")
    assert [w for w, _ in steps_advice.framework_python(nnx)] == [_framework("graphlib.py")[0]]
    # a recompile's tracing calls bind too: named as tracing, not as dispatch outside jit
    traced = ("partial_eval.py:1917 process_primitive", "core.py:660 bind", "builtins len")
    assert [w for w, _ in steps_advice.framework_python(traced)] == [
        _framework("partial_eval.py")[0]]
    sliced = ("indexing.py:118 _parse_indices", "slicing.py:1481 _slice_impl")
    assert "indexing a jax.Array" in steps_advice.framework_python(sliced)[0][0]
    # jnp.array on a nested Python list: any function of array_constructors.py (the
    # tracer names a lambda there), with the NumPy-batch fix
    listed = ("tree_util.py:87 tree_flatten", "array_constructors.py:283 <lambda>")
    ((what, fix),) = steps_advice.framework_python(listed)
    assert "from Python values" in what and "np.asarray(rows, np.float32)" in fix
    # per-element reads: the host-read entry says to fetch a vector once
    assert "never element by element" in _framework("array.py")[1]
    # a job's own file of the same base name and another function is the job's
    assert steps_advice.framework_python(("core.py:12 train_step", "graphlib.py:3 load")) == []
    # TensorFlow windows are never read this way
    tf_window = tfobs.analyze(TF_TRACER)
    traced = _codes(tf_window).get("python_in_step")
    assert traced is None or bind_fix not in traced.fix


def test_a_host_callback_xla_runs_on_its_own_threads_is_counted_from_its_op() -> None:
    # jax.debug.callback in a program XLA runs on its worker pool: the Python tracer writes
    # nothing there, and the callback read as 0 (the loader's fix, an info).
    s = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__callback_on_xla_threads.xplane.pb")
    st = s.steps
    assert st.python_callback_s > st.python_traced_s  # beyond the tracer's own events
    assert 0.002 <= st.python_callback_s < st.mean_s  # the logger's 2 ms sleep, each step
    a = _codes(s)["python_in_step"]
    assert a.severity == "warning" and "more, on XLA's threads" in a.message
    assert a.fix.startswith(steps_advice.CALLBACK_FIX)
    # a callback on the Python thread is still read from the tracer's own events
    on_thread = tfobs.analyze(DEBUG_PRINT).steps
    assert 0 < on_thread.python_callback_s <= on_thread.python_traced_s


def test_a_callback_run_on_the_steps_thread_is_counted_once() -> None:
    # jax.pure_callback in a small program XLA's CPU client runs inline, on the step's own
    # thread: its op (`pure_callback.1`) encloses the same Python the tracer saw
    # (`_wrapped_callback`). Read once: not "more, on XLA's threads" (1.26 + 1.29 ms of
    # Python in a 1.42 ms step, as it read before).
    s = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__pure_callback_steps.xplane.pb")
    st = s.steps
    assert st.count == 10
    assert 0.001 < st.python_callback_s <= st.python_traced_s < st.mean_s  # the 1 ms sleep
    a = _codes(s)["python_in_step"]
    assert "more, on XLA's threads" not in a.message
    assert "of it inside JAX host callbacks" in a.message
    assert a.evidence["callback_share"] <= 1.0


def test_a_thread_pool_loader_that_does_not_keep_up_is_an_input_wait() -> None:
    # A ThreadPoolExecutor worker builds each batch (10 ms of sleep and numpy) two ahead;
    # the step (2.5 ms of compute) waits in Future.result for it. XProf: NOT input-bound,
    # all host compute. The wait is the loader's: named as input, with the loader's fix
    # (more workers), not "load ahead in a background thread", which the job does.
    s = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__threadpool_prefetch_steps.xplane.pb")
    st = s.steps
    assert s.input_bound.verdict == "not"
    assert 0.6 * st.mean_s < st.python_loader_wait_s <= st.python_traced_s
    ib = _codes(s)["input_bound"]
    assert ib.severity == "critical" and ib.fix.startswith(LOADER_WAIT_FIX)
    assert ib.evidence["loader_wait_pct"] == pytest.approx(
        100 * st.python_loader_wait_s / st.mean_s)
    assert s.input_beyond_xprof() is not None
    traced = _codes(s)["python_in_step"]
    assert "make_batch" in traced.message and "a background thread" not in traced.fix
    # a Python wait of the step's own (time.sleep for its batch) is no loader's
    own = tfobs.analyze(WAIT)
    assert own.steps.python_loader_wait_s == 0.0 and own.steps.python_traced_s > 0
    back = tfobs.WindowSummary.from_dict(s.to_dict())
    assert back.steps.python_loader_wait_s == st.python_loader_wait_s



    # float(loss) every step: JAX's array.py _value waits for the device and copies back;
    # "move the data loader out of the step" was the fix.
    s = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__metric_read_each_step.xplane.pb")
    a = _codes(s)["python_in_step"]
    what, fix = _framework("array.py")
    assert what in a.message and a.fix.startswith(fix) and "every N steps" in a.fix



def test_a_metrics_dict_read_by_device_get_names_the_per_leaf_copies() -> None:
    # A step returning 36 scalar metrics in a dict, read each step with jax.device_get:
    # JAX reads the tree leaf by leaf (api.py _device_get, then array.py _value per leaf),
    # so "read a vector once (jax.device_get)" is what the job already does; the fix that
    # reaches it stacks the metrics into one array (0.03 ms to read against 0.35 ms).
    s = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__metrics_tree_device_get_steps"
                      ".xplane.pb")
    assert any(t.endswith(" _device_get") for t in s.steps.python_traced_top)
    a = _codes(s)["python_in_step"]
    what, fix = next((w, f) for name, functions, w, f in steps_advice.FRAMEWORK_PYTHON
                     if name == "api.py" and "_device_get" in functions)
    assert what in a.message and fix in a.fix
    assert "jnp.stack" in a.fix and "one array" in a.fix
    # A float() per step without device_get keeps the host-read fix first.
    plain = _codes(tfobs.analyze(
        CAPTURES / "generated__jax0.10cpu__metric_read_each_step.xplane.pb"))["python_in_step"]
    assert "jnp.stack" not in plain.fix

def test_the_outer_markers_python_counts_once_per_thread() -> None:
    # Epoch steps of six train steps each: the Python inside them (marker set-up) is a
    # sliver of each epoch, never more than the epoch; the note names the inner markers.
    s = tfobs.analyze(EPOCHS)
    assert s.steps.count == 2
    assert 0 < s.steps.python_traced_s < 0.1 * s.steps.mean_s
    assert "12 step markers ('train') lie inside the 2 'epoch' steps" in s.steps.note
    assert "StepTraceAnnotation" in s.steps.note


def test_tensorflows_python_tracer_is_read_and_captures_without_it_read_zero() -> None:
    traced = tfobs.analyze(TF_TRACER)
    assert 0 < traced.steps.python_traced_s < traced.steps.mean_s
    assert len(traced.steps.python_traced_top) == 3
    plain = tfobs.analyze(TF_PLAIN)
    assert plain.steps.count and plain.steps.python_traced_s == 0.0
    assert plain.steps.python_traced_top == ()


def test_gpu_captures_leave_python_to_the_gpu_idle_figures() -> None:
    # On a GPU the host's Python overlaps device work (or waits on it in
    # block_until_ready): step time it is not, so the figure stays 0 there.
    s = tfobs.analyze(GPU_WAIT)
    assert s.steps.count and s.steps.python_traced_s == 0.0


def test_a_window_of_calls_has_no_python_step_figure() -> None:
    s = tfobs.analyze(CALLS)
    assert s.steps.count == 0 and s.steps.python_traced_s == 0.0
    assert (s.steps.calls[0].name, s.steps.calls[0].count) == ("PjitFunction(<lambda>)", 12)
    assert "calls_without_steps" in _codes(s)


def test_the_last_open_event_matches_a_plain_scan() -> None:
    rng = random.Random(7)
    for _ in range(400):
        n = rng.randint(0, 50)
        start = sorted(rng.randint(0, 100) for _ in range(n))
        end = [x + rng.randint(0, 40) for x in start]
        at = [rng.randint(-5, 150) for _ in range(25)]
        want = [max((j for j in range(n) if start[j] <= t < end[j]), default=-1) for t in at]
        s, e = np.array(start, np.int64), np.array(end, np.int64)
        assert _last_open(s, e, np.array(at, np.int64)).tolist() == want
        assert python_time._np_last_open(s, e, np.array(at, np.int64)).tolist() == want
        # sorted times (the stretches' starts): the compiled sweep where it is built
        ordered = sorted(at)
        want = [max((j for j in range(n) if start[j] <= t < end[j]), default=-1)
                for t in ordered]
        assert _last_open(s, e, np.array(ordered, np.int64)).tolist() == want


def test_summary_json_round_trips_the_python_figures() -> None:
    s = tfobs.analyze(WAIT)
    back = tfobs.WindowSummary.from_dict(s.to_dict())
    assert back.steps.python_traced_s == s.steps.python_traced_s
    assert back.steps.python_traced_top == s.steps.python_traced_top


def test_a_jax_function_compiled_in_every_step_is_named_as_a_recompile() -> None:
    # A static argument with a new value per call: JAX lowers and compiles inside every
    # step. The retracing rule says so in JAX's terms (count, time, the static-argument
    # fix); the compile's own Python is that finding's, not python_in_step's.
    s = tfobs.analyze(RECOMPILE)
    codes = _codes(s)
    a = codes["tf_function_retracing"]
    assert s.ops.graph_builds == s.steps.count == 10
    step_s = sum(st.duration_s for st in s.steps.items)
    assert 0.5 * step_s < s.ops.graph_building_s <= step_s
    assert a.message.startswith("JAX compiled jitted <lambda> 10 times in 10 steps")
    assert "static_argnums" in a.fix and "jax_log_compiles" in a.fix
    assert "tf.function" not in a.fix
    assert s.steps.python_traced_s < s.ops.graph_building_s / 2
    assert not any("backend_compile" in f for f in s.steps.python_traced_top)
    py = codes.get("python_in_step")
    assert py is None or py.severity == "info"
    # A JAX job that compiles only before its loop gets no such advice.
    assert "tf_function_retracing" not in _codes(tfobs.analyze(PLAIN))


def test_a_host_callback_in_the_step_is_python_the_step_runs() -> None:
    # jax.debug.print in the jitted step: the program runs on the Python thread and stops
    # at the print to run its Python (JAX's _wrapped_callback). That Python, nested in the
    # program's ops on the same thread, is the step's own: counted, and named.
    s = tfobs.analyze(DEBUG_PRINT)
    st = s.steps
    assert st.count == 10
    assert st.python_traced_s > 0.6 * st.mean_s
    assert 0.3 * st.python_traced_s < st.python_callback_s <= st.python_traced_s
    a = _codes(s)["python_in_step"]
    assert "inside JAX host callbacks (jax.debug.print" in a.message
    assert a.fix.startswith(steps_advice.CALLBACK_FIX)
    assert a.evidence["callback_share"] == pytest.approx(
        st.python_callback_s / st.python_traced_s)
    # A step that waits on its program, or sleeps in its own Python, has no callback time.
    for path in (COMPUTE_WAIT, WAIT):
        other = tfobs.analyze(path)
        assert other.steps.python_callback_s == 0.0
        advice = _codes(other).get("python_in_step")
        assert advice is None or "host callbacks" not in advice.message
    back = tfobs.WindowSummary.from_dict(s.to_dict())
    assert back.steps.python_callback_s == st.python_callback_s


def test_a_jax_step_waiting_for_tf_data_is_named_as_an_input_wait() -> None:
    # A JAX step fed by tf.data's as_numpy_iterator(): jax.profiler records none of
    # TensorFlow's ops, so XProf reads the wait in next() as host compute (input 0 %). tfobs
    # keeps XProf's figures and names the wait: the Python inside the iterator's next().
    pytest.importorskip("xprof")
    s = tfobs.analyze(TFDATA)
    steps, props = xprof_steps(TFDATA)
    assert s.input_bound.advice == props["input_conclusion"]
    for want, got in zip(steps, s.steps.items, strict=True):
        assert got.breakdown_s["input"] == pytest.approx(want["input"], abs=2e-6) == 0.0
    st = s.steps
    assert st.python_traced_s > 0.5 * st.mean_s
    assert 0.8 * st.python_traced_s < st.python_tfdata_next_s <= st.python_traced_s
    codes = _codes(s)
    a = codes["python_in_step"]
    assert a.severity == "warning"
    assert "inside a tf.data iterator's next(), waiting for the batch" in a.message
    assert a.fix.startswith(steps_advice.TFDATA_NEXT_FIX)
    assert a.evidence["tfdata_next_share"] == pytest.approx(
        st.python_tfdata_next_s / st.python_traced_s)
    assert "host callbacks" not in a.message  # none here
    # XProf's POTENTIALLY verdict rests on 'All Others': the input rule names the wait
    # instead, at XProf's thresholds, and what the synthetic-data check should show.
    hidden = 100 * st.python_tfdata_next_s / st.mean_s
    inp = codes["input_bound"]
    assert inp.evidence["expected_saving_pct"] == pytest.approx(hidden)
    assert inp.severity == "critical" and "'potentially' input-bound, misses it" in inp.message
    assert f"drops by about {hidden:.1f} %" in inp.fix and "should not move" not in inp.fix
    back = tfobs.WindowSummary.from_dict(s.to_dict())
    assert back.steps.python_tfdata_next_s == st.python_tfdata_next_s


@pytest.mark.parametrize("path", [WAIT, LOADER, DEBUG_PRINT, COMPUTE_WAIT, TF_TRACER],
                         ids=lambda p: p.name.split("__")[-1].split(".")[0])
def test_no_tf_data_wait_where_no_iterator_runs(path) -> None:
    # Python waits of other kinds (a sleep, a queue, a host callback, the program) and a
    # TensorFlow job traced with its Python tracer (its input is ops XProf sees) hold none.
    s = tfobs.analyze(path)
    assert s.steps.python_tfdata_next_s == 0.0
    a = _codes(s).get("python_in_step")
    assert a is None or "tf.data iterator" not in a.message
    inp = _codes(s).get("input_bound")
    assert inp is None or "tfdata_next_pct" not in inp.evidence


@pytest.mark.parametrize("name, want", [
    ("$iterator_ops.py:824 __next__", True),
    ("$iterator_ops.py:756 _next_internal", True),
    ("$multi_device_iterator_ops.py:310 get_next", True),
    ("$dataset_ops.py:4789 __next__", True),
    ("$dataset_ops.py:2301 batch", False),
    ("$my_iterator_ops.py:10 __next__", False),
    ("iterator_ops.py:824 __next__", False),  # not a Python tracer event
    ("$gen_dataset_ops.py:3065 iterator_get_next", False),  # inside __next__ anyway
])
def test_tf_data_next_names(name: str, want: bool) -> None:
    assert python_time._is_tfdata_next(name) is want


def _host_and_spans(path) -> tuple[Timeline, list[tuple[int, int]]]:
    host = Timeline(parse(path.read_bytes()).plane("/host:CPU"))
    return host, [(g.begin_ps, g.end_ps) for g in find_steps(host).groups]


def test_tfobs_event_around_tf_data_next_measures_the_wait_the_python_tracer_sees() -> None:
    # Two measures of one wait in one capture: tfobs's event around next() (what a live
    # window has: no Python tracer) and the Python tracer's innermost time inside next().
    host, spans = _host_and_spans(WAIT_IN)
    from_event = python_time.annotated_tfdata_next(host, spans)
    from_tracer = python_time.python_in_steps(host, spans)[3]
    assert from_tracer > 0.5 * sum(e - b for b, e in spans) / 1e12
    assert from_event == pytest.approx(from_tracer, rel=0.05)
    s = tfobs.analyze(WAIT_IN)  # XProf's steps: the first and the last left out
    assert s.steps.python_tfdata_next_s == pytest.approx(from_event / len(spans), rel=0.15)
    assert s.steps.input_between_s == 0.0


def test_a_wait_xprof_calls_host_compute_gets_the_input_bound_advice() -> None:
    # XProf: NOT input-bound (the wait is host compute to it). tfobs keeps that verdict and
    # its breakdown, and its input_bound advice names the wait, with XProf's thresholds.
    pytest.importorskip("xprof")
    s = tfobs.analyze(WAIT_IN)
    steps, props = xprof_steps(WAIT_IN)
    assert s.input_bound.advice == props["input_conclusion"]
    assert s.input_bound.verdict == "not"
    for want, got in zip(steps, s.steps.items, strict=True):
        assert got.breakdown_s["input"] == pytest.approx(want["input"], abs=2e-6) == 0.0
    hidden = 100 * s.steps.python_tfdata_next_s / s.steps.mean_s
    assert hidden >= 20
    a = _codes(s)["input_bound"]
    assert a.severity == "critical"
    assert a.evidence["tfdata_next_pct"] == pytest.approx(hidden)
    assert a.evidence["expected_saving_pct"] == pytest.approx(hidden)
    assert f"{hidden:.1f} % of step time waits for the batch inside a tf.data" in a.message
    assert "'not' input-bound, misses it" in a.message
    assert a.fix.startswith("fix the input pipeline first")
    assert f"drops by about {hidden:.1f} %" in a.fix
    # 8.6 ms a step in next(): the pipeline's own work, not the call's cost
    assert f"its work is the wait ({1e3 * s.steps.python_tfdata_next_s:.2f} ms per step)" \
        in a.fix and "next()'s own cost" not in a.fix


def test_a_short_tf_data_wait_may_be_the_calls_own_cost() -> None:
    from tfobs.analysis.advice.input_pipeline import SLOW_NEXT_S, _hidden_fix

    assert "next()'s own cost" in _hidden_fix(0.2 * SLOW_NEXT_S)
    assert "its work is the wait" in _hidden_fix(SLOW_NEXT_S)


def test_a_small_tf_data_wait_is_a_warning_and_none_below_xprofs_threshold() -> None:
    import dataclasses

    from tfobs.analysis.advice import input_pipeline as input_advice

    s = tfobs.analyze(WAIT_IN)
    for share, want in ((0.10, "warning"), (0.049, None)):
        st = dataclasses.replace(s.steps, python_tfdata_next_s=share * s.steps.mean_s)
        got = {a.code: a for a in input_advice.check(dataclasses.replace(s, steps=st))}
        assert (got["input_bound"].severity if "input_bound" in got else None) == want


def test_tfobs_event_before_the_step_marker_is_input_between_the_steps() -> None:
    s = tfobs.analyze(WAIT_BETWEEN)
    st = s.steps
    assert st.python_tfdata_next_s == 0.0
    assert st.input_between_s > 0.5 * st.interval_s
    a = _codes(s)["input_outside_steps"]
    assert a.evidence["input_between_s"] == pytest.approx(st.input_between_s)
    assert f"{1e3 * st.input_between_s:.2f} ms of input wait per step" in a.message


def test_a_loader_threads_fetches_are_no_wait_of_the_steps(monkeypatch) -> None:
    # The loader thread's next() events overlap the steps: counted, they would read as a
    # wait (the check below shows they would); the step's own wait is the queue's.
    host, spans = _host_and_spans(WAIT_LOADER)
    assert python_time.annotated_tfdata_next(host, spans) == 0.0
    s = tfobs.analyze(WAIT_LOADER)
    assert s.steps.python_tfdata_next_s == 0.0 and s.steps.input_between_s == 0.0
    # The steps wait in the queue that loader fills (it does not keep up): a loader wait,
    # not a tf.data one.
    message = _codes(s)["input_bound"].message
    assert "from the job's own loader" in message and "tf.data iterator" not in message
    monkeypatch.setattr(python_time, "holds_markers", lambda ld, spans: True)
    assert python_time.annotated_tfdata_next(host, spans) > 0.0


def test_the_reduction_and_the_capture_name_tfobs_event_alike() -> None:
    from tfobs.capture import tfdata_wait

    assert python_time.TFDATA_NEXT_EVENT == tfdata_wait.TFDATA_NEXT_EVENT


def test_without_the_python_tracer_tfobs_event_is_the_wait() -> None:
    # As a live window records: no Python event at all, the wait only in tfobs's event.
    pytest.importorskip("xprof")
    s = tfobs.analyze(WAIT_NO_TRACER)
    st = s.steps
    _, props = xprof_steps(WAIT_NO_TRACER)
    assert s.input_bound.advice == props["input_conclusion"]
    assert st.python_traced_s == 0.0 and st.python_traced_top == ()
    assert 0.5 * st.mean_s < st.python_tfdata_next_s < st.mean_s
    a = _codes(s)["input_bound"]
    assert a.severity == "critical" and "inside a tf.data iterator's next()" in a.message
    assert f"'{s.input_bound.verdict}' input-bound, misses it" in a.message


def _with_whole_step_waits(path) -> bytes:
    """The capture with tfobs's tf.data next() event over each "train" step marker, on the
    marker's own line: a job whose every step is one long fetch, as far as the host knows."""
    from tfobs.xspace import schema

    space = schema.XSpace.FromString(path.read_bytes())
    host = next(p for p in space.planes if p.name == "/host:CPU")
    ours = max(host.event_metadata) + 1
    host.event_metadata[ours].id = ours
    host.event_metadata[ours].name = python_time.TFDATA_NEXT_EVENT
    train = {k for k, m in host.event_metadata.items() if m.name == "train"}
    for line in host.lines:
        marks = [(e.offset_ps, e.duration_ps) for e in line.events if e.metadata_id in train]
        for offset, duration in marks:
            line.events.add(metadata_id=ours, offset_ps=offset, duration_ps=duration)
    return space.SerializeToString()


@pytest.mark.parametrize("name, low, high", [
    ("fp32_matmul_no_tf32", 0.0, 0.2),  # the device computes 91 % of each step
    ("input_bound_host_wait", 0.6, 1.0),  # the device idles while the host waits
])
def test_on_a_gpu_only_a_fetch_with_every_device_idle_is_a_wait(name, low, high) -> None:
    # JAX dispatches a step and returns: the next batch's fetch overlaps the device running
    # the step before it, and stalls nothing there. Host time alone would read every step
    # here as 100 % waiting for tf.data.
    data = _with_whole_step_waits(CAPTURES / f"recorded__h100_jax0.11.2__{name}.xplane.pb")
    s = tfobs.analyze(data)
    share = s.steps.python_tfdata_next_s / s.steps.mean_s
    assert low <= share <= high, share
    host = Timeline(parse(data).plane("/host:CPU"))
    spans = [(g.begin_ps, g.end_ps) for g in find_steps(host, has_device=True).groups]
    host_only = python_time.annotated_tfdata_next(host, spans)
    assert host_only == pytest.approx(sum(e - b for b, e in spans) / 1e12)


@pytest.mark.parametrize("path, where", [(WAIT_NO_TRACER, "in"), (WAIT_BETWEEN, "between")],
                         ids=["in_steps", "between_steps"])
def test_a_damaged_tf_data_event_takes_no_time_from_the_others(path, where) -> None:
    # An event that ends before it begins (a damaged capture) counts as nothing; the wait
    # the real events hold stays as it was.
    from tfobs.xspace import schema

    space = schema.XSpace.FromString(path.read_bytes())
    host = next(p for p in space.planes if p.name == "/host:CPU")
    ours = next(k for k, m in host.event_metadata.items()
                if m.name == python_time.TFDATA_NEXT_EVENT)
    train = {k for k, m in host.event_metadata.items() if m.name == "train"}
    line = next(ln for ln in host.lines if any(e.metadata_id == ours for e in ln.events))
    for step in [e for e in line.events if e.metadata_id in train]:
        # in the step before its fetch, or in the gap right after the step
        at = step.offset_ps + (1 if where == "in" else step.duration_ps + 1)
        line.events.add(metadata_id=ours, offset_ps=at, duration_ps=-10**9)
    field = "python_tfdata_next_s" if where == "in" else "input_between_s"
    before = getattr(tfobs.analyze(path).steps, field)
    assert getattr(tfobs.analyze(space.SerializeToString()).steps, field) == before > 0


def test_python_between_the_steps_names_the_loops_own_loader() -> None:
    """`for x in batches:` over a Python generator, the step marked after next() returns:
    the loader's Python runs between the steps on their own thread. step_gap says how much
    of each gap it is and names the generator, read from the Python tracer's events."""
    name = "generated__jax0.10cpu__python_generator_between_steps"
    s = tfobs.analyze(CAPTURES / f"{name}.xplane.pb")
    st = s.steps
    assert st.python_between_top[0].endswith(" numpy_batches")
    starts = [x.start_ns for x in st.items]
    gaps = [(b - a) / 1e9 - x.duration_s for a, b, x in zip(starts, starts[1:], st.items,
                                                             strict=False)]
    mean_gap = sum(gaps) / len(gaps)
    assert 0.5 * mean_gap <= st.python_between_s <= 1.01 * mean_gap
    a = _codes(s)["step_gap"]
    assert "Python on the steps' thread" in a.message and "numpy_batches" in a.message
    assert a.evidence["python_between_s"] == st.python_between_s
    # A loader on a thread of its own leaves the steps' thread idle between them.
    threaded = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__python_loader_thread.xplane.pb")
    assert threaded.steps.python_between_s < 0.1 * threaded.steps.interval_s


POLLING = CAPTURES / "generated__jax0.10cpu__polling_thread_steps.xplane.pb"


def test_a_python_thread_polling_through_the_steps_is_named_as_gil_contention() -> None:
    """A thread of the job's own polls a threading.Event in a busy loop while the steps run:
    its Python holds the GIL the step's Python and JAX's dispatch need. The thread's loop
    frame began before the trace (only its is_set calls are events): the short silences
    between them count as its Python. The usual fix, a background Python thread, is the
    cause here: neither all_others_bound nor python_in_step may give it."""
    from tfobs.analysis.advice.gaps import CONTENTION_FIX

    s = tfobs.analyze(POLLING)
    st = s.steps
    assert st.python_other_thread_top[0] == "threading.py:575 is_set"
    assert st.python_other_thread_s >= 0.8 * st.mean_s
    codes = _codes(s)
    a = codes["python_thread_contention"]
    assert a.severity == "warning" and "is_set" in a.message
    assert a.evidence["other_thread_pct"] == pytest.approx(100 * st.python_other_thread_s
                                                          / st.mean_s)
    assert codes["all_others_bound"].fix == CONTENTION_FIX
    assert a.fix == steps_advice.THREAD_CONTENTION.fix  # a polling thread: no writer
    for advice in s.advice:
        assert "background thread" not in advice.fix or advice.code == "input_bound", advice


def test_the_polling_threads_own_events_are_what_names_it() -> None:
    # The same capture less the polling thread's events: no other thread, no contention.
    from tfobs.xspace import schema

    space = schema.XSpace.FromString(POLLING.read_bytes())
    host = next(p for p in space.planes if p.name == "/host:CPU")
    is_set = {k for k, m in host.event_metadata.items() if m.name.endswith(" is_set")}
    for line in host.lines:
        if line.events and all(e.metadata_id in is_set for e in line.events):
            del line.events[:]
    s = tfobs.analyze(space.SerializeToString())
    assert s.steps.python_other_thread_s == 0.0
    assert "python_thread_contention" not in _codes(s)


@pytest.mark.parametrize("name", ["python_loader_thread", "tfdata_wait_loader_thread"])
def test_a_loader_thread_that_waits_is_no_contention(name: str) -> None:
    # A loader thread's Python is short beside its waits (a sleep, a queue, tf.data's own
    # threads), which release the GIL: no contention read.
    s = tfobs.analyze(CAPTURES / f"generated__jax0.10cpu__{name}.xplane.pb")
    assert s.steps.python_other_thread  # the loader thread is read
    assert 0 < s.steps.python_other_thread_s < 0.2 * s.steps.mean_s
    assert "python_thread_contention" not in _codes(s)


def test_jax_tracing_a_new_shape_is_read_as_tracing_not_op_by_op_dispatch() -> None:
    """A padded bucket length first seen inside the window traces the jitted step again:
    its Python (JAX 0.10's partial_eval.py default_process_primitive, and the primitives'
    bind it calls) is tracing, named with tf_function_retracing; not JAX dispatching
    operations one at a time outside jit, whose fix (move them into the jitted step) the
    job already follows."""
    s = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__shape_buckets_steps.xplane.pb")
    a = _codes(s)["python_in_step"]
    assert any(t.startswith("partial_eval.py:") for t in s.steps.python_traced_top)
    assert "JAX tracing a function to compile it" in a.message
    assert "one at a time outside jit" not in a.message
    assert "jitted step:" not in a.fix and "bucket" in a.fix
    assert _codes(s)["tf_function_retracing"].evidence["graph_builds"] >= 4


def test_a_jit_made_in_the_loop_is_read_as_compiling_not_op_by_op_dispatch() -> None:
    """Every fourth step evaluates through a new `jax.jit(lambda ...)` closing over the
    weights as numpy arrays: the step's Python is the compile's (its cache key serializing
    the program, `cache_key.py _serialize_ir`; the tracing's `core.py bind` under
    partial_eval, which the tracer's top three leave out). Named as compiling, with the fix
    that makes the jit once and passes the weights as arguments; not as operations
    dispatched one at a time outside jit, nor a loader's work."""
    s = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__closure_constant_eval_steps.xplane.pb")
    a = _codes(s)["python_in_step"]
    top = s.steps.python_traced_top
    assert any(t.startswith("cache_key.py:") for t in top)
    assert any(t.startswith("core.py:") and t.endswith(" bind") for t in top)
    assert "compiling a function inside the step" in a.message
    assert "one at a time outside jit" not in a.message
    assert a.fix.startswith(_framework("cache_key.py")[1])
    assert "closes over" in a.fix and "batches ahead" not in a.fix
    assert _codes(s)["tf_function_retracing"].evidence["graph_builds"] >= 1
    # bind beside the compile's cache key is tracing: named once, as compiling
    assert [w for w, _ in steps_advice.framework_python(
        ("cache_key.py:197 _serialize_ir", "core.py:660 bind"))] == [
        _framework("cache_key.py")[0]]


def test_make_jaxpr_and_eval_shape_in_the_step_are_tracing_not_a_loaders_python() -> None:
    """Each step calls jax.make_jaxpr and jax.eval_shape on the step function (a size log):
    the function traced twice a step, nothing compiled (`pjit.py _trace_for_jit` among the
    step's Python). Named as tracing, with the fix that calls them once before the loop;
    not a loader's Python to move to a thread, nor operations dispatched outside jit."""
    s = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__make_jaxpr_each_step.xplane.pb")
    a = _codes(s)["python_in_step"]
    assert any(t.startswith("pjit.py:") and t.endswith(" _trace_for_jit")
               for t in s.steps.python_traced_top)
    assert "make_jaxpr" in a.message and "without running it" in a.message
    assert a.fix.startswith("call jax.make_jaxpr")
    assert "batches ahead" not in a.fix and "one at a time outside jit" not in a.message
    assert "tf_function_retracing" not in _codes(s)  # nothing compiled in the window
    # bind beside the tracing is the tracing's: one cause
    assert [w for w, _ in steps_advice.framework_python(
        ("pjit.py:466 _trace_for_jit", "core.py:660 bind"))] == [_framework("api.py")[0]]
    # the slow dispatch path of the same file stays its own cause
    assert [w for w, _ in steps_advice.framework_python(
        ("pjit.py:1 cache_miss", "core.py:660 bind"))] == [
        _framework("core.py")[0], _framework("pjit.py")[0]]


def test_tracing_for_a_compile_is_not_read_as_tracing_without_a_run() -> None:
    """Running metrics in jax.numpy outside jit over a history list that grows a row a
    step: each step compiles jnp's stack, mean and std for the new length (30 compiles in
    10 steps, 220-300 ms a step against 2.3 ms without the metrics). The step's Python is
    `pjit.py _trace_for_jit` beside the compile's cache key: the tracing before each
    compile, named as such; not "tracing a function without running it (jax.make_jaxpr,
    .lower)", which the job never calls."""
    s = tfobs.analyze(
        CAPTURES / "generated__jax0.10cpu__host_jnp_metrics_history_steps.xplane.pb")
    a = _codes(s)["python_in_step"]
    top = s.steps.python_traced_top
    assert any(t.startswith("pjit.py:") and t.endswith(" _trace_for_jit") for t in top)
    assert any(t.startswith("cache_key.py:") for t in top)
    assert "without running it" not in a.message and "make_jaxpr" not in a.fix
    assert "JAX tracing a function to compile it" in a.message
    assert _codes(s)["tf_function_retracing"].evidence["graph_builds"] >= 10
    # _trace_for_jit beside a compile, or in steps that compiled, is the compile's tracing
    tracing = _framework("partial_eval.py")[0]
    assert [w for w, _ in steps_advice.framework_python(
        ("pjit.py:466 _trace_for_jit", "cache_key.py:197 _serialize_ir"))] == [
        tracing, _framework("cache_key.py")[0]]
    assert [w for w, _ in steps_advice.framework_python(
        ("pjit.py:466 _trace_for_jit",), compiled=True)] == [tracing]
    # make_jaxpr named by its own frame stays named, compile or not
    assert _framework("api.py")[0] in [w for w, _ in steps_advice.framework_python(
        ("api.py:1 make_jaxpr_f", "pjit.py:466 _trace_for_jit"), compiled=True)]


def test_jnp_copy_of_device_arrays_is_named_as_copies_not_arrays_from_python_values() -> None:
    """Each step keeps a rollback copy of the parameters it donates (`jax.tree.map(jnp.copy,
    p)` outside jit: one `PjitFunction(copy)` per leaf, 6 a step, through jnp.array's
    Python, `array_constructors.py array` first among the step's). Read before as jnp.array
    making arrays from Python values, with the fix that builds NumPy batches and keeps step
    counters on the device, none of which the job does. Named as the copies, with the fix
    that stops donating the kept parameters or copies the tree in one jitted call (1.7 and
    2.1 ms a step against 2.5 ms, timed apart); not a loader's Python."""
    s = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__donate_backup_copy_steps.xplane.pb")
    a = _codes(s)["python_in_step"]
    assert s.steps.python_traced_top[0].startswith("array_constructors.py:")
    (copy,) = [c for c in s.steps.calls if c.name == "PjitFunction(copy)"]
    assert copy.count == 72  # 6 leaves in each of the window's 12 steps
    assert "jnp.copy of device arrays outside jit (72 calls in the window" in a.message
    assert "from Python values" not in a.message
    assert a.fix == steps_advice.DEVICE_COPY_FIX and "donate_argnums" in a.fix
    assert "np.asarray(rows" not in a.fix and "batches ahead" not in a.fix
    # arrays made from Python values with no copy in the steps keep their own fix
    listed = ("tree_util.py:87 tree_flatten", "array_constructors.py:283 <lambda>")
    assert "from Python values" in steps_advice.framework_python(listed)[0][0]


def test_device_put_of_sharded_batches_is_named_as_such_not_as_jits_slow_dispatch() -> None:
    """A jitted step over a 2x2 mesh of CPU devices whose 256-row batch is put on the devices
    with `jax.device_put(x, NamedSharding(...))` inside each step: the step's Python is most
    in `pxla.py shard_args` under `api.py device_put` (the jitted call itself stays on its
    C++ path, no Python under it). Read before as "jitted calls that left their C++ fast
    path (a host callback, an argument re-checked)", which the job has none of; named as
    the device_put, with the fix that puts batches on the devices ahead of the step."""
    s = tfobs.analyze(
        CAPTURES / "generated__jax0.10cpu__mesh_2x2_tensor_parallel_steps.xplane.pb")
    a = _codes(s)["python_in_step"]
    top = s.steps.python_traced_top
    assert top[0].startswith("pxla.py:") and top[0].endswith(" shard_args")
    assert any(t.startswith("api.py:") and t.endswith(" device_put") for t in top)
    assert "jax.device_put of host arrays in the step" in a.message
    assert "left their C++ fast path" not in a.message
    assert a.fix.startswith("put the next batches on the devices ahead of the step")
    # shard_args beside JAX's own Python dispatch of a jitted call stays that dispatch's
    dispatch = ("pxla.py:86 shard_args", "pjit.py:1 cache_miss", "api.py:2035 device_put")
    assert "left their C++ fast path" in steps_advice.framework_python(dispatch)[0][0]
    assert "left their C++ fast path" in steps_advice.framework_python(
        ("pxla.py:86 shard_args",))[0][0]


def test_equinox_filter_jits_own_python_gets_equinoxs_fix() -> None:
    """equinox.filter_jit splits the model into arrays and the rest and joins them again in
    Python on every call (`_filters.py _combine`, `_module.py __getattribute__`), 18 % of
    the step: named as equinox's, with the fix that partitions once and jits the arrays."""
    s = tfobs.analyze(
        CAPTURES / "generated__jax0.10cpu__equinox_filter_jit_steps.xplane.pb")
    a = _codes(s)["python_in_step"]
    assert s.steps.python_traced_top[0].startswith("_filters.py:")
    assert "equinox's filter_jit" in a.message
    assert a.fix.startswith("partition the model once") and "eqx.combine" in a.fix


def test_a_memory_profile_each_step_is_named_not_a_loaders_python() -> None:
    """Each step calls jax.profiler.device_memory_profile() (a debugging line left in the
    loop): 2.4 ms a step against 1.8 ms without it (the provenance), its Python
    (`profiler.py device_memory_profile`, `zlib compress`) about 18 % of the step. Named as
    the memory profile, with the fix that takes it once or every N steps and JAX's memory
    profiling page; not a loader's Python to load ahead."""
    name = "generated__jax0.10cpu__memory_profile_each_step"
    s = tfobs.analyze(CAPTURES / f"{name}.xplane.pb")
    a = _codes(s)["python_in_step"]
    assert s.steps.python_traced_top[0].endswith(" device_memory_profile")
    assert "device memory profile taken in the step" in a.message
    assert a.fix == steps_advice.MEMORY_PROFILE_FIX and "batches ahead" not in a.fix
    assert a.guide == steps_advice.MEMORY_PROFILE_GUIDE
    prov = json.loads((CAPTURES.parent / "provenance" / f"{name}.json").read_text())
    extra = 1e-3 * (np.mean(prov["parameters"]["measured_step_ms"])
                    - prov["parameters"]["plain_step_ms_before_trace"])
    assert 0.5 * extra <= s.steps.python_traced_s <= 1.5 * extra


def test_gc_collect_in_the_step_is_named_with_its_own_fix() -> None:
    """gc.collect() every fifth step of a job keeping 200,000 small dicts (107-111 ms a
    call, the provenance): `gc collect` holds most of the steps' Python. Named as the job's
    own garbage collection, with the fix that runs it rarely or freezes the long-lived
    objects (after gc.freeze() the same collect took under 0.01 ms, timed apart); no
    loader's fix, and Python's gc page, not tf.data's guide."""
    s = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__gc_collect_every_5_steps.xplane.pb")
    a = _codes(s)["python_in_step"]
    assert s.steps.python_traced_top[0] == "gc collect"
    assert "garbage collector run by the job" in a.message
    assert a.fix == steps_advice.GC_FIX and "gc.freeze()" in a.fix
    assert "batches ahead" not in a.fix and a.guide == steps_advice.GC_GUIDE


def test_a_dict_batchs_new_keys_are_compiles_not_operations_outside_jit() -> None:
    """The jitted step takes a dict batch whose keys vary (a mask on every third batch, a
    weight on every fifth): each new key set traces and compiles the step inside its marker
    (steps 5 and 14 of the kept steps, 0.85-1.4 s against 2-6 ms). The tracing's bind is
    among the step's top Python while its partial_eval frames are not: named as tracing to
    compile, not as operations dispatched outside jit, and the retrace fix names a dict
    batch's changing keys."""
    s = tfobs.analyze(
        CAPTURES / "generated__jax0.10cpu__dict_batch_optional_keys.xplane.pb")
    codes = _codes(s)
    a = codes["python_in_step"]
    top = s.steps.python_traced_top
    assert any(t.startswith("core.py:") for t in top)
    assert not any(t.startswith("partial_eval.py:") for t in top)
    assert "one at a time outside jit" not in a.message
    assert "JAX tracing a function to compile it" in a.message
    assert "dict batch's keys" in a.fix and "into the jitted step" not in a.fix
    r = codes["tf_function_retracing"]
    assert r.evidence["graph_builds"] == 2 and "keys change" in r.fix
    # without compiles as long as the Python, bind stays JAX's dispatch outside jit
    assert [w for w, _ in steps_advice.framework_python(
        ("core.py:660 bind",), compiled=False)] == [_framework("core.py")[0]]


def test_a_jax_jobs_checkpoint_saves_are_read_from_its_librarys_python() -> None:
    """orbax's CheckpointManager.save every step, writing every fourth: the saving steps
    hold the library's Python (checkpoint_manager.py, async_checkpointer.py, ...) for tens
    of milliseconds; the checks between take microseconds. checkpoint_writes counts the
    saves and what the saving steps cost, with orbax's fix."""
    from tfobs.analysis.advice.gaps import CHECKPOINT

    s = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__orbax_saves_steps.xplane.pb")
    ops = s.ops
    assert 3 <= ops.checkpoint_writes <= 6  # every fourth of 17 steps (the dropped ones too)
    assert 0 < ops.checkpoint_steps < s.steps.count
    durations = sorted(x.duration_s for x in s.steps.items)
    typical = durations[len(durations) // 2]
    assert ops.checkpoint_steps_excess_s >= ops.checkpoint_steps * 5 * typical
    a = _codes(s)["checkpoint_writes"]
    assert a.fix == CHECKPOINT.jax_fix and "save_interval_steps" in a.fix
    assert "checkpoint library's Python" in a.message
    # orbax's asynchronous writer runs Python through the steps: named as the checkpoint
    # library's, with fewer saves as the fix, not a rewritten thread.
    writer = _codes(s)["python_thread_contention"]
    assert "checkpoint library's writer" in writer.message
    assert writer.fix == steps_advice.WRITER_FIX
    # A JAX job that saves nothing reads none.
    assert tfobs.analyze(PLAIN).ops.checkpoint_writes == 0


def test_numpy_reads_of_device_values_are_named_with_the_read_fix_not_the_loader_fix() -> None:
    # Each step reads the per-row round counts with np.asarray right after the jitted call:
    # the array's C++ __array__ waits for the program (its first op began 1.3-3.6 ms into
    # the call on a loaded machine), then copies back; the call ends 16-33 us after the
    # program. tfobs said "most in numpy asarray" and gave the loader's fix.
    s = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__vmap_batched_while_steps.xplane.pb")
    st = s.steps
    assert st.python_traced_top[0] == "numpy asarray"
    assert 0.8 * st.python_traced_s < st.python_device_read_s <= st.python_traced_s
    a = _codes(s)["python_in_step"]
    assert "np.asarray or np.array of device values" in a.message
    assert a.fix == steps_advice.DEVICE_READ_FIX and "background thread" not in a.fix
    assert a.guide == steps_advice.WAIT_GUIDE
    assert a.evidence["device_read_share"] == pytest.approx(
        st.python_device_read_s / st.python_traced_s)
    back = tfobs.WindowSummary.from_dict(s.to_dict())
    assert back.steps.python_device_read_s == st.python_device_read_s


def test_a_numpy_read_each_step_is_a_read_and_a_loaders_numpy_conversion_is_not() -> None:
    # np.asarray(loss) and np.asarray(counts) every step, nothing else waiting: most of the
    # step's traced Python is those reads (too little of the step for advice).
    reads = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__numpy_loss_read_steps.xplane.pb")
    st = reads.steps
    assert "numpy asarray" in st.python_traced_top
    assert 0.5 * st.python_traced_s < st.python_device_read_s <= st.python_traced_s
    # The next batch made from Python lists by np.asarray while the dispatched program
    # runs: the same NumPy function, ending before the program does, is no read.
    loader = tfobs.analyze(
        CAPTURES / "generated__jax0.10cpu__numpy_list_batches_steps.xplane.pb")
    assert "numpy asarray" in loader.steps.python_traced_top
    assert loader.steps.python_device_read_s == 0.0
