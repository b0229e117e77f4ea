"""Steps as jobs mark them, on TF 2.21 CPU captures recorded for these cases
(tools/record_tf_captures.py; XProf 2.24.2 run again at test time on a fresh copy).

- A step marker of the user's own name with `_r=1` is a step, as XProf's ProcessRootEvent
  makes every `_r` root one, except the implicit roots TensorFlow marks itself
  (FunctionRun, SessionRun, RunGraph, ExecutorState::Process).
- A marker without `_r` is no step for either tool; tfobs says what is missing.
- Windows of `predict`, serving-signature or `evaluate` calls: the calls, their rate and
  time per call.
- Python in the step: 'All Others' beside a POTENTIALLY verdict and py_function /
  numpy_function ops in the step's graph are named, not blamed on the input pipeline.
- Steps of several threads that overlap in time (two models trained side by side): timed
  as XProf times them, named as overlapping, their start-to-start interval per thread.
"""

from __future__ import annotations

import pathlib

import pytest

import tfobs
from tests.conftest import CAPTURES
from tests.support.raw_capture import host_events
from tests.support.xprof_reference import step_names, xprof_steps
from tfobs.analysis.step_notes import ODD_NUMS_NOTE_START, number_in
from tfobs.analysis.step_roots import IMPLICIT_ROOTS
from tfobs.summary import WindowSummary
from tfobs.xspace import schema

pytest.importorskip("xprof")

NAMED = CAPTURES / "generated__tf2.21cpu__named_markers_loop.xplane.pb"
NO_ROOT = CAPTURES / "generated__tf2.21cpu__markers_without_root.xplane.pb"
PREDICT = CAPTURES / "generated__tf2.21cpu__predict_only.xplane.pb"
SERVING = CAPTURES / "generated__tf2.21cpu__serving_signature.xplane.pb"
EVALUATE = CAPTURES / "generated__tf2.21cpu__evaluate_only.xplane.pb"
PYTHON_STEP = CAPTURES / "generated__tf2.21cpu__python_in_step.xplane.pb"
SAME_NAME = CAPTURES / "generated__tf2.21cpu__root_without_step_num.xplane.pb"
EAGER_ONLY = CAPTURES / "generated__tf2.21cpu__eager_model_calls.xplane.pb"
CHIEF_ASYNC = CAPTURES / "generated__tf2.21cpu__ps_chief_async.xplane.pb"
WORKER_ASYNC = CAPTURES / "generated__tf2.21cpu__ps_worker_async.xplane.pb"
EPOCH_ROOTS = CAPTURES / "generated__tf2.21cpu__epoch_and_batch_roots.xplane.pb"
DOUBLE = CAPTURES / "generated__tf2.21cpu__double_marked_loop.xplane.pb"
WITH_STATS = CAPTURES / "generated__tf2.21cpu__markers_with_stats.xplane.pb"
STRIDED = CAPTURES / "generated__tf2.21cpu__strided_step_nums.xplane.pb"
PREDICT_SPE = CAPTURES / "generated__tf2.21cpu__predict_spe4.xplane.pb"
SESSION_LOOP = CAPTURES / "generated__tf2.21cpu__session_run_loop.xplane.pb"
SESSION_MARKED = CAPTURES / "generated__tf2.21cpu__session_run_marked.xplane.pb"
KERAS2_PS_CHIEF = CAPTURES / "generated__tf2.21cpu__ps_tfkeras_fit.xplane.pb"
KERAS2_PS_WORKER = CAPTURES / "generated__tf2.21cpu__ps_tfkeras_fit_worker.xplane.pb"
TRAIN_AND_TEST = CAPTURES / "generated__tf2.21cpu__train_and_test_markers.xplane.pb"
SAMPLED = CAPTURES / "generated__tf2.21cpu__sampled_grouped_input.xplane.pb"
FIT_EPOCHS = CAPTURES / "generated__tf2.21cpu__tfkeras_fit_validation_epochs.xplane.pb"
CALLBACK_NO_ROOT = CAPTURES / "generated__tf2.21cpu__callback_markers_without_root.xplane.pb"
TENSORBOARD_FIT = CAPTURES / "generated__tf2.21cpu__two_output_tensorboard_fit.xplane.pb"


def _codes(s: WindowSummary) -> dict[str, tfobs.Advice]:
    return {a.code: a for a in s.advice}


def test_train_and_test_roots_sharing_a_number_are_both_steps_as_in_xprof() -> None:
    # Every fifth train step is followed by a `test` root of the same number: XProf makes
    # each root a step, so a number appears twice; tfobs keeps both, in time order.
    s = tfobs.analyze(TRAIN_AND_TEST)
    steps, _ = xprof_steps(TRAIN_AND_TEST)
    # 30 train + 6 test roots; the first (train 5) and last (test 34) dropped
    assert len(steps) == s.steps.count == 34
    nums = [x.step_num for x in s.steps.items]
    # each step named as XProf names it: "train 9", "test 9", ...
    assert [x["name"] for x in steps] == step_names(s)
    assert sum(x.marker == "test" for x in s.steps.items) == 5
    assert sorted(n for n in set(nums) if nums.count(n) == 2) == [9, 14, 19, 24, 29]
    for want, got in zip(steps, s.steps.items, strict=True):
        assert got.duration_s == pytest.approx(want["duration_s"], rel=0.01)


def test_a_fit_across_epochs_repeats_names_as_xprof_does() -> None:
    # tf_keras numbers train steps from 0 each epoch and marks validation "test": a window
    # over two epochs holds "train 3" twice and "test 0" twice, each its own step.
    s = tfobs.analyze(FIT_EPOCHS)
    steps, props = xprof_steps(FIT_EPOCHS)
    names = step_names(s)
    assert [x["name"] for x in steps] == names
    assert names.count("train 3") == 2 and names.count("test 0") == 2
    assert s.steps.count == 30  # 2 x (12 train + 4 test), first and last dropped
    for want, got in zip(steps, s.steps.items, strict=True):
        assert got.duration_s == pytest.approx(want["duration_s"], rel=0.01)
    assert f"{s.input_bound.verdict.upper()} input-bound" in props["input_conclusion"]


def test_numpy_step_numbers_under_a_name_of_the_users_own() -> None:
    # `Trace("step", step_num=numpy.int64(i), _r=1)` over sample_from_datasets and
    # group_by_window input: the same 18 steps and verdict as XProf.
    s = tfobs.analyze(SAMPLED)
    steps, props = xprof_steps(SAMPLED)
    assert [x.step_num for x in s.steps.items] == list(range(4, 22))
    assert {x.marker for x in s.steps.items} == {"step"}
    assert [x["name"] for x in steps] == [f"step {n}" for n in range(4, 22)]
    assert "HIGHLY input-bound" in props["input_conclusion"]
    assert s.input_bound.verdict == "highly"


def test_markers_of_any_name_with_root_stat_are_xprofs_steps() -> None:
    s = tfobs.analyze(NAMED)
    steps, props = xprof_steps(NAMED)
    assert len(steps) == s.steps.count == 18  # 20 marked, first and last dropped
    assert s.steps.method == "markers"
    # XProf names each step for its marker, as tfobs numbers it
    assert [x["name"] for x in steps] == step_names(s)
    assert {x.marker for x in s.steps.items} == {"batch"}
    for want, got in zip(steps, s.steps.items, strict=True):
        assert got.duration_s == pytest.approx(want["duration_s"], rel=0.01)
    assert "HIGHLY input-bound" in props["input_conclusion"]
    assert s.input_bound.verdict == "highly"
    assert s.input_bound.advice == props["input_conclusion"]


def test_markers_inside_other_markers_are_part_of_the_outer_step_and_named() -> None:
    # `epoch` roots around eight `batch` roots each: XProf's walk from the earlier (outer)
    # root takes the inner ones, so the epochs are the steps; the note says how to time
    # the batches.
    s = tfobs.analyze(EPOCH_ROOTS)
    steps, _ = xprof_steps(EPOCH_ROOTS)
    assert [x["name"] for x in steps] == [f"epoch {x.step_num}" for x in s.steps.items]
    assert s.steps.count == 2
    for want, got in zip(steps, s.steps.items, strict=True):
        assert got.duration_s == pytest.approx(want["duration_s"], rel=0.01)
    assert ("16 step markers ('batch') lie inside the 2 'epoch' steps" in s.steps.note
            and "make it the only step marker (`_r=1`" in s.steps.note)
    # one inner marker per step is the same step marked twice: nothing to say
    double = tfobs.analyze(DOUBLE)
    assert double.steps.count == 14 and "lie inside" not in double.steps.note


def test_step_numbers_counted_again_keep_the_time_between_in_the_interval() -> None:
    """Three trials of a hyperparameter search in one window, each a new model and optimizer
    whose fit numbers its steps 0-4 again: the pauses between the trials (clear_session, a
    new model, compile) lie between steps whose numbers go back (4 -> 0), no dropped step.
    They are time in no step: the interval runs from the first kept step's start to the
    last one's, and step_pause's period agrees with it."""
    s = tfobs.analyze(CAPTURES / "generated__tf2.21cpu__trials_clear_session_fit.xplane.pb")
    nums = [x.step_num for x in s.steps.items]
    assert nums == [1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3]
    starts = [x.start_ns for x in s.steps.items]
    assert s.steps.interval_s == pytest.approx((starts[-1] - starts[0]) / 12 / 1e9)
    busy = sum(x.duration_s for x in s.steps.items[:-1]) / 12
    assert s.steps.outside_ratio == pytest.approx(1 - busy / s.steps.interval_s)
    assert s.steps.outside_ratio > 0.2
    pause = next(a for a in s.advice if a.code == "step_pause")
    assert pause.evidence["period_s"] == pytest.approx(s.steps.interval_s, rel=0.01)


def test_extra_stats_on_a_marker_and_strided_step_numbers_change_nothing() -> None:
    for capture, first in ((WITH_STATS, 4), (STRIDED, 40)):
        s = tfobs.analyze(capture)
        steps, props = xprof_steps(capture)
        assert [x["name"] for x in steps] == [f"train {x.step_num}" for x in s.steps.items]
        assert s.steps.items[0].step_num == first and s.steps.count == 14
        assert s.input_bound.advice == props["input_conclusion"]
    # steps ten numbers apart are still consecutive: the interval is one step's, not ten
    s = tfobs.analyze(STRIDED)
    starts = [x.start_ns for x in s.steps.items]
    assert s.steps.interval_s == pytest.approx((starts[-1] - starts[0]) / 13 / 1e9)
    assert 0 <= s.steps.outside_ratio < 0.5


@pytest.mark.parametrize("case", ["tensor_step_nums", "float_step_nums"])
def test_step_numbers_that_are_no_integer_are_named_and_numbered_in_order(case: str) -> None:
    capture = CAPTURES / f"generated__tf2.21cpu__{case}.xplane.pb"
    s = tfobs.analyze(capture)
    steps, _ = xprof_steps(capture)
    # XProf reads each such step_num as 0; tfobs reads the number each holds: 3.0, or
    # tf.Tensor(3, shape=(), dtype=int64) (3 steps ran before the window, 3..14 in it)
    assert [x["name"] for x in steps] == ["train 0"] * 10
    assert [x.step_num for x in s.steps.items] == list(range(4, 14))
    assert [x.duration_s for x in s.steps.items] == pytest.approx(
        [x["duration_s"] for x in steps], rel=0.01)
    assert f"12 {ODD_NUMS_NOTE_START}" in s.steps.note
    assert "tfobs reads the number each holds" in s.steps.note
    assert "step_num=int(step)" in s.steps.note


def test_variable_step_numbers_are_numbered_by_their_place() -> None:
    # step_num=optimizer.iterations: TensorFlow cuts the variable's text before its value
    capture = CAPTURES / "generated__tf2.21cpu__variable_step_nums.xplane.pb"
    s = tfobs.analyze(capture)
    steps, _ = xprof_steps(capture)
    assert [x["name"] for x in steps] == ["train 0"] * 10
    assert [x.step_num for x in s.steps.items] == list(range(1, 11))
    assert f"12 {ODD_NUMS_NOTE_START}" in s.steps.note
    assert "by their place in the window" in s.steps.note


@pytest.mark.parametrize("value, number", [
    (3.0, 3), (-3.0, -3), (12.5, None), (float("nan"), None), (float("inf"), None),
    (1e30, None),
    ("tf.Tensor(10, shape=(), dtype=int32)", 10),
    ("tf.Tensor(-2, shape=(), dtype=int64)", -2),
    ("tf.Tensor(13.0, shape=(), dtype=float32)", 13),
    ("tf.Tensor(13.5, shape=(), dtype=float32)", None),
    ("tf.Tensor([1 2], shape=(2,), dtype=int32)", None),
    ("tf.Tensor(99999999999999999999999, shape=(), dtype=int64)", None),
    ("tf.Tensor(-1234567890123456789012, shape=(), dtype=int64)", None),
    ("tf.Tensor(-9223372036854775808, shape=(), dtype=int64)", -(2**63)),
    ("tf.Tensor(" + "7" * 100_000 + ", shape=(), dtype=int64)", None),
    # a variable's text, as TensorFlow writes it: cut at its first comma, before the value
    ("<tf.Variable 'Variable:0' shape=() dtype=int64", None),
    ("step 3", None), (None, None),
])
def test_the_number_a_step_num_that_is_no_integer_holds(value: object, number: int | None
                                                        ) -> None:
    assert number_in(value) == number


def test_negative_step_numbers_are_the_jobs_own_as_in_xprof() -> None:
    capture = CAPTURES / "generated__tf2.21cpu__negative_step_nums.xplane.pb"
    s = tfobs.analyze(capture)
    steps, _ = xprof_steps(capture)
    # 3 steps before the window (0, -1, -2), then -3 .. -14; the first and last dropped
    assert [x.step_num for x in s.steps.items] == list(range(-4, -14, -1))
    assert [x["name"] for x in steps] == step_names(s)
    assert ODD_NUMS_NOTE_START not in s.steps.note


def _marker_starts_by_thread(capture: pathlib.Path, marker: str) -> list[list[int]]:
    """Each host thread's `marker` events' starts (ps), read with protobuf alone."""
    space = schema.XSpace().FromString(capture.read_bytes())
    (host,) = [p for p in space.planes if p.name == schema.HOST_PLANE]
    wanted = {k for k, m in host.event_metadata.items() if m.name == marker}
    by_line = [sorted(line.timestamp_ns * 1000 + e.offset_ps for e in line.events
                      if e.metadata_id in wanted) for line in host.lines]
    return [starts for starts in by_line if starts]


@pytest.mark.parametrize("stem", ["generated__tf2.21cpu__two_thread_steps",
                                  "generated__jax0.10cpu__two_thread_steps"])
def test_steps_of_two_threads_overlap_and_are_spaced_per_thread(stem: str) -> None:
    capture = CAPTURES / f"{stem}.xplane.pb"
    s = tfobs.analyze(capture)
    steps, _ = xprof_steps(capture)
    # both threads number their 12 steps from 0: XProf keeps all but its first and last
    assert [x["name"] for x in steps] == step_names(s)
    assert len(steps) == s.steps.count == 22
    assert [x.duration_s for x in s.steps.items] == pytest.approx(
        [x["duration_s"] for x in steps], rel=0.01)
    assert "steps of 2 threads overlap in time" in s.steps.note
    threads = _marker_starts_by_thread(capture, "train")
    assert [len(t) for t in threads] == [12, 12]
    # A thread's own steps start one after another; the two threads' starts interleave,
    # so spacing all steps in time order would read about half of that.
    per_thread = [(t[-1] - t[0]) / (len(t) - 1) / 1e12 for t in threads]
    assert s.steps.interval_s == pytest.approx(sum(per_thread) / 2, rel=0.15)
    merged = sorted(t for starts in threads for t in starts)
    assert s.steps.interval_s > 1.6 * (merged[-1] - merged[0]) / (len(merged) - 1) / 1e12


def test_one_threads_steps_take_no_overlap_note() -> None:
    s = tfobs.analyze(NAMED)
    assert len(_marker_starts_by_thread(NAMED, "batch")) == 1
    assert "overlap" not in s.steps.note


def test_implicit_roots_never_become_steps() -> None:
    # TF marks every FunctionRun `_r=1`: 20 of them beside the 20 `batch` markers here;
    # the steps are the markers', none a function run's.
    from tfobs.analysis.load import read_source
    from tfobs.analysis.step_roots import root_list
    from tfobs.analysis.timeline import Timeline
    from tfobs.xspace.reader import parse
    from tfobs.xspace.schema import HOST_PLANE

    data, _ = read_source(str(NAMED), None)
    host = Timeline(parse(data).plane(HOST_PLANE), 0)
    assert "FunctionRun" in host.names.values() and "FunctionRun" in IMPLICIT_ROOTS
    method, roots = root_list(host)
    assert method == "markers" and {name for *_, name in roots} == {"batch"}
    assert [num for _, _, num, _ in roots] == list(range(3, 23))


def test_markers_without_root_stat_say_what_is_missing() -> None:
    s = tfobs.analyze(NO_ROOT)
    steps, props = xprof_steps(NO_ROOT)
    assert not steps and props["input_conclusion"].startswith("No step time measured")
    assert s.steps.count == 0 and s.steps.unrooted_markers == 20
    assert "20 'train' events carry step_num but no _r stat" in s.steps.note
    advice = _codes(s)["markers_without_root"]
    assert advice.severity == "warning" and advice.evidence["unrooted_markers"] == 20
    assert "_r=1" in advice.fix and "tfobs.step" in advice.fix
    # the window still says what ran: the train_step calls inside the markers
    assert s.steps.calls[0].name == "train_step" and s.steps.calls[0].count == 20


@pytest.mark.parametrize(("capture", "name", "count", "fix"), [
    # a callback of the job's own: Trace("keras_batch", step_num=batch) per batch
    (CALLBACK_NO_ROOT, "keras_batch", 14, "on_train_batch_begin"),
    # Keras's TensorBoard(profile_batch=...): Trace("Profiled batch", step_num=batch)
    (TENSORBOARD_FIT, "Profiled batch", 17, "TensorBoard(profile_batch=...)"),
])
def test_keras_fit_with_markers_without_root_says_so_beside_its_inferred_steps(
        capture: pathlib.Path, name: str, count: int, fix: str) -> None:
    # Keras 3 fit whose batches a callback marks without `_r`: XProf finds no step; tfobs
    # infers its steps from the training function, and its note and advice name the
    # markers that are there (not "no step markers") and how to make them steps.
    s = tfobs.analyze(capture)
    steps, props = xprof_steps(capture)
    assert not steps and props["input_conclusion"].startswith("No step time measured")
    assert s.steps.method == "inferred" and s.steps.count > 0
    assert s.steps.unrooted_markers == count
    assert s.steps.note.startswith(f"no step markers with _r=1: {count} '{name}' events")
    assert "tfobs.KerasCallback()" in s.steps.note
    advice = _codes(s)["markers_without_root"]
    assert advice.severity == "warning" and advice.evidence["unrooted_markers"] == count
    assert "XProf finds no step" in advice.message
    assert fix in advice.fix and "tfobs.KerasCallback()" in advice.fix


def test_keras_fit_without_any_marker_keeps_its_note() -> None:
    s = tfobs.analyze(EVALUATE)
    assert s.steps.note.startswith("no step markers; steps inferred")
    assert s.steps.unrooted_markers == 0 and "markers_without_root" not in _codes(s)


@pytest.mark.parametrize(("capture", "function", "count"), [
    (PREDICT, "one_step_on_data_distributed", 30),
    (SERVING, "signature_wrapper_serve", 40),
    (PREDICT_SPE, "multi_step_on_data", 8),  # steps_per_execution=4: 32 batches, 8 calls
])
def test_inference_windows_report_calls_per_second_and_time_per_call(
        capture: object, function: str, count: int) -> None:
    s = tfobs.analyze(capture)
    assert s.steps.count == 0 and s.input_bound.verdict == "unknown"
    top = s.steps.calls[0]
    assert top.name == function and top.count == count
    assert 0 < top.mean_s < 0.05 and top.total_s == pytest.approx(top.mean_s * count)
    # the rate spans the calls: at most one call per call time, and not slower than the window
    assert count / s.duration_s <= top.per_s <= 1.0 / top.mean_s * 1.0001
    assert f"holds {count} calls of '{function}'" in s.steps.note
    advice = _codes(s)["calls_without_steps"]
    assert advice.severity == "info" and advice.evidence["calls"] == count
    assert advice.evidence["calls_per_s"] == pytest.approx(top.per_s)



def test_an_annotation_without_step_number_around_each_call_is_named_with_its_fix() -> None:
    # Four nested TraceAnnotations (epoch > batch_loop > train_step > forward_backward) and
    # no StepTraceAnnotation: no step in either tool. 'train_step' and 'forward_backward'
    # each hold one of the 12 jitted calls; the outer one is what the job meant as its step
    # (its own timer: 3.1 ms a step). 'epoch' and 'batch_loop' hold all 12 at once.
    s = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__nested_trace_annotations_no_step"
                      ".xplane.pb")
    assert s.steps.count == 0 and s.input_bound.verdict == "unknown"
    top = s.steps.calls[0]
    assert top.name == "PjitFunction(sgd_fn)" and top.count == 12
    assert top.marker == "train_step" and 2.5e-3 < top.marker_mean_s < 3.6e-3
    assert "each inside an annotation 'train_step'" in s.steps.note
    advice = _codes(s)["calls_without_steps"]
    assert advice.severity == "warning" and "'train_step' (12 of them" in advice.message
    assert advice.evidence["marker_s"] == pytest.approx(top.marker_mean_s)
    assert "StepTraceAnnotation('train_step', step_num=i)" in advice.fix
    assert "'serve'" not in advice.fix
    # a serving window whose calls no annotation holds keeps the per-call fix
    plain = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__jitted_calls_only.xplane.pb")
    assert plain.steps.calls[0].marker == ""
    assert "'serve'" in _codes(plain)["calls_without_steps"].fix
    # markers that carry step_num without _r have their own advice (markers_without_root):
    # the calls inside them take no word of a marker without a step number
    unrooted = tfobs.analyze(NO_ROOT)
    assert unrooted.steps.calls[0].marker == ""
    assert "annotation" not in unrooted.steps.note

def test_evaluation_window_keeps_its_inferred_steps_and_its_calls() -> None:
    # Keras 3 `evaluate` runs `multi_step_on_iterator` as `fit` does: tfobs times those as
    # inferred steps (XProf: none, the named NO_MARKERS difference), and lists the calls.
    s = tfobs.analyze(EVALUATE)
    assert s.steps.method == "inferred" and s.steps.count == 28
    assert s.steps.calls[0].name == "multi_step_on_iterator"
    assert s.steps.calls[0].count == 30
    assert "calls_without_steps" not in _codes(s)


def test_python_in_the_step_is_named_not_blamed_on_input() -> None:
    s = tfobs.analyze(PYTHON_STEP)
    _, props = xprof_steps(PYTHON_STEP)
    assert "POTENTIALLY input-bound" in props["input_conclusion"]
    assert s.input_bound.verdict == "potentially"
    codes = _codes(s)
    # XProf's verdict rests on 'All Others': its fix is named beside it, the input
    # rule's fix does not say to fix the input pipeline.
    assert "fix the input pipeline first" not in codes["input_bound"].fix
    assert "all_others_bound" in codes["input_bound"].fix
    others = codes["all_others_bound"]
    assert others.evidence["other_pct"] >= 15 and "numpy" in others.fix
    py = codes["python_in_step"]
    # the tf.numpy_function in the step's graph, and the numpy in Python around it
    assert py.evidence["python_op_pct"] >= 10 and py.evidence["other_pct"] >= 10
    assert py.evidence["python_op_s_per_step"] == pytest.approx(s.steps.python_op_s)
    assert s.input_pipeline.python_op_s == 0  # none of it is tf.data's
    assert "numpy_function" in py.fix and py.severity == "warning"


def test_python_ops_in_tfdata_are_not_python_in_the_step() -> None:
    s = tfobs.analyze(CAPTURES / "generated__tf2.21cpu__numpy_function_input.xplane.pb")
    assert s.input_pipeline.python_op_s > 0
    assert s.steps.python_op_s == pytest.approx(0.0, abs=1e-4)
    assert "python_in_step" not in _codes(s)


def test_analyze_prints_the_calls_of_a_window_without_steps() -> None:
    from tfobs.commands.analyze import render

    page = render(tfobs.analyze(SERVING))
    assert "function calls (no training step):" in page
    line = next(x for x in page.splitlines() if x.strip().startswith("x40"))
    assert line.split()[-2:] == ["python", "signature_wrapper_serve"] and "per call" in line


def test_analyze_prints_a_coordinators_dispatched_step_functions_beside_its_steps() -> None:
    # The chief's steps run no op here; the step_fn runs they dispatched are in the JSON
    # (steps.calls, source "dispatched") and were missing from the text.
    from tfobs.commands.analyze import render

    s = tfobs.analyze(CAPTURES / "generated__tf2.21cpu__ps_chief.xplane.pb")
    assert s.steps.count and any(c.source == "dispatched" for c in s.steps.calls)
    lines = render(s).splitlines()
    at = lines.index("  function calls to or from other tasks (their work is in those tasks' "
                     "captures):")
    assert "dispatched" in lines[at + 1] and "step_fn" in lines[at + 1]
    # A training window's own function's calls (fit's, from Python) are its steps: not listed.
    fit = tfobs.analyze(CAPTURES / "generated__tf2.21cpu__mixed_precision_fit.xplane.pb")
    assert fit.steps.count and fit.steps.calls
    assert "function calls" not in render(fit)


# --- ParameterServerStrategy: chief and worker captures of one loopback cluster ---------

PS_CHIEF = CAPTURES / "generated__tf2.21cpu__ps_chief.xplane.pb"
PS_WORKER = CAPTURES / "generated__tf2.21cpu__ps_worker.xplane.pb"


def _xprof_input_breakdown(capture: object) -> dict[str, float]:
    from tests.support.xprof_reference import reference

    for table in reference(str(capture), "input_pipeline_analyzer"):
        p = table.get("p", {})
        if "enqueue_us" in p:
            return {k: float(v) / 1e6 for k, v in p.items() if k.endswith("_us")}
    raise AssertionError("no input time breakdown")


def test_parameter_server_worker_reports_its_step_fn_runs_not_dispatches() -> None:
    s = tfobs.analyze(PS_WORKER)
    steps, props = xprof_steps(PS_WORKER)
    # XProf: every KernelAndDeviceFunc::RunAsync (TF marks it _r=1) is a "step"
    assert steps and all(r["name"].startswith("KernelAndDeviceFunc::RunAsync") for r in steps)
    assert "input-bound" in props["input_conclusion"]
    # tfobs: no step; the coordinator's step_fn runs on this worker, with their time
    assert s.steps.count == 0 and s.input_bound.verdict == "unknown"
    top = s.steps.calls[0]
    assert (top.name, top.source) == ("step_fn", "remote") and top.count >= 20
    xprof_mean = sum(r["duration_s"] for r in steps) / len(steps)
    assert top.mean_s > 5 * xprof_mean and top.mean_s > max(r["duration_s"] for r in steps)
    assert "sent by another task" in s.steps.note


def test_parameter_server_worker_enqueue_is_named_not_counted_as_input() -> None:
    s = tfobs.analyze(PS_WORKER)
    xprof = _xprof_input_breakdown(PS_WORKER)
    ip = s.input_pipeline
    # XProf counts EagerService:Enqueue (op type "Enqueue") as input; tfobs names it
    assert xprof["enqueue_us"] > 0.9 * sum(xprof.values())
    assert ip.xprof_only_input_s == pytest.approx(xprof["enqueue_us"], rel=0.005)
    assert ip.xprof_only_input_ops == ("EagerService:Enqueue",)
    assert ip.host_input_total_s["enqueue"] == 0.0
    # the tf.data preprocessing both count alike
    assert ip.host_input_total_s["preprocessing"] == pytest.approx(
        xprof["preprocessing_us"], rel=0.005)


def test_parameter_server_chief_times_the_coordinators_steps() -> None:
    s = tfobs.analyze(PS_CHIEF)
    steps, props = xprof_steps(PS_CHIEF)
    assert not steps and props["input_conclusion"].startswith("No step time measured")
    assert s.steps.method == "markers_remote" and s.steps.count == 58  # 60, ends dropped
    assert [x.step_num for x in s.steps.items] == list(range(5, 63))
    assert s.input_bound.verdict == "unknown" and "parameter-server" in s.steps.note
    for x in s.steps.items:  # the whole step waits on the workers: no local op
        assert x.breakdown_s["other"] == pytest.approx(x.duration_s)
    calls = s.steps.calls[0]
    # each call's eager execution runs nothing here: the round trip to a worker
    assert (calls.name, calls.source, calls.count) == ("step_fn", "dispatched", 60)
    assert "all_others_bound" not in _codes(s)


def test_a_window_of_jitted_calls_that_return_before_their_work_says_so() -> None:
    # No marker, no wait after each call: "0.03 ms per call" was the dispatch alone; the
    # work ran after each call returned, on XLA's CPU threads.
    s = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__async_calls_no_markers.xplane.pb")
    assert s.steps.count == 0 and s.steps.calls[0].count == 12
    assert "JAX returns from each call before its work runs" in s.steps.note
    per_call = float(s.steps.note.split("ms in the window, ")[1].split(" ms per call")[0])
    assert per_call > 10 * 1e3 * s.steps.calls[0].mean_s
    # calls that wait for their work (block_until_ready each) take no such words
    waited = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__jitted_calls_only.xplane.pb")
    assert "asynchronous dispatch" not in waited.steps.note


def test_an_unmarked_keras_jax_fit_is_named_with_the_fix_that_marks_it() -> None:
    # Keras 3's JAX-backend fit writes no marker: 12 calls of its jitted train_step among
    # 19 jitted calls. Not a serving window (wrapping Keras's own calls is no fix the user
    # has): tfobs's Keras callback marks each batch.
    s = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__keras_jax_fit_plain.xplane.pb")
    assert s.steps.count == 0
    top = s.steps.calls[0]
    assert top.name == "PjitFunction(train_step)" and top.count == 12
    advice = _codes(s)["calls_without_steps"]
    assert advice.severity == "warning" and "Keras's JAX-backend fit" in advice.message
    assert "tfobs.KerasCallback()" in advice.fix and "StepTraceAnnotation('serve'" not in (
        advice.fix)
    # XLA's work per call: over every jitted call, and at most per train_step call (the
    # work divided by 12, not by all 19 calls, as the note read before)
    work_ms = float(s.steps.note.split("threads worked ")[1].split(" ms in the window")[0])
    assert f"{work_ms / 12:.2f} ms per call of 'PjitFunction(train_step)'" in s.steps.note
    calls = sum(c.count for c in s.steps.calls)
    assert f"over all {calls} jitted calls" in s.steps.note
    # a marked Keras JAX fit is steps, and takes no such advice
    marked = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__keras_jax_fit.xplane.pb")
    assert marked.steps.count == 10 and "calls_without_steps" not in _codes(marked)


def test_a_keras_jax_step_of_several_batches_counts_its_train_step_calls() -> None:
    # steps_per_execution=4 on the JAX backend: no in-graph loop; the execution calls the
    # jitted train_step four times from Python, and the note counts those.
    s = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__keras_jax_spe4_fit.xplane.pb")
    assert s.steps.count == 4
    assert "each step reads 4 batches (calls of Keras's jitted train_step" in s.steps.note
    assert f"{1e3 * s.steps.mean_s / 4:.2f} ms per batch" in s.steps.note
    one = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__keras_jax_fit.xplane.pb")
    assert "each step reads" not in one.steps.note


def test_a_jax_inference_window_reports_its_jitted_calls() -> None:
    # openxla/xprof's TPU inference capture: no step markers, JAX's PjitFunction(f) calls
    s = tfobs.analyze(CAPTURES / "xprof__tpu_inference_2.xplane.pb")
    assert s.steps.count == 0
    top = s.steps.calls[0]
    assert top.name == "PjitFunction(f)" and top.source == "python" and top.count == 100
    assert top.mean_s == pytest.approx(top.total_s / top.count)
    assert "holds 100 calls of 'PjitFunction(f)'" in s.steps.note


def test_a_marker_named_as_its_function_is_a_step_and_the_calls_still_count() -> None:
    # `Trace("train_step", _r=1)` around `train_step(...)`: one event name for both. The
    # markers (no step number: XProf numbers them by group) are the steps; the function
    # calls are the events carrying `tf_function_call`, one inside each marker.
    s = tfobs.analyze(SAME_NAME)
    steps, _ = xprof_steps(SAME_NAME)
    assert [r["name"] for r in steps] == [f"train_step {x.step_num}" for x in s.steps.items]
    assert s.steps.count == 14
    calls = s.steps.calls[0]
    assert (calls.name, calls.source, calls.count) == ("train_step", "python", 16)
    assert calls.mean_s < s.steps.mean_s  # the call, not the marker around it
    # tfobs's own marker is named "train": a step function named `train` is counted too
    s = tfobs.analyze(CAPTURES / "advice__eager_ops.xplane.pb")
    assert s.steps.count > 0 and s.steps.calls
    assert (s.steps.calls[0].name, s.steps.calls[0].count) == ("train", 8)
    assert s.steps.calls[0].mean_s < max(x.duration_s for x in s.steps.items)


def test_an_eager_only_window_says_it_ran_ops_eagerly() -> None:
    s = tfobs.analyze(EAGER_ONLY)
    steps, props = xprof_steps(EAGER_ONLY)
    assert not steps and props["input_conclusion"].startswith("No step time measured")
    assert s.steps.count == 0 and not s.steps.calls and s.ops.eager_s > 0
    assert "the window ran ops eagerly, outside tf.function" in s.steps.note
    assert f"{1e3 * s.ops.eager_s:.2f} ms" in s.steps.note
    assert "MatMul 60x" in s.steps.note  # 30 calls of a two-layer model
    eager = _codes(s)["eager_ops"]
    assert "ms in the window, which has no step;" in eager.message
    assert "per step" not in eager.message


def test_an_unmarked_coordinator_reports_its_dispatched_calls_and_how_to_mark_steps() -> None:
    s = tfobs.analyze(CHIEF_ASYNC)
    steps, _ = xprof_steps(CHIEF_ASYNC)
    assert not steps and s.steps.count == 0 and s.input_bound.verdict == "unknown"
    calls = s.steps.calls[0]
    assert (calls.name, calls.source, calls.count) == ("step_fn", "dispatched", 60)
    assert "run on other tasks" in s.steps.note
    advice = _codes(s)["calls_without_steps"]
    assert "another task" in advice.message and "tfobs.step" in advice.fix
    # a local inference window keeps the inference fix
    assert "Trace('serve'" in _codes(tfobs.analyze(PREDICT))["calls_without_steps"].fix
    # its worker: XProf's RunAsync "steps", tfobs's remote step_fn runs
    w = tfobs.analyze(WORKER_ASYNC)
    w_steps, _ = xprof_steps(WORKER_ASYNC)
    assert w_steps and all(r["name"].startswith("KernelAndDeviceFunc::RunAsync") for r in w_steps)
    assert w.steps.count == 0
    assert (w.steps.calls[0].name, w.steps.calls[0].source) == ("step_fn", "remote")
    assert w.steps.calls[0].mean_s > max(r["duration_s"] for r in w_steps)


@pytest.mark.parametrize("stem", ["generated__jax0.10cpu__step_annotation",
                                  "generated__jax0.10cpu__trace_annotation_root"])
def test_a_jax_cpu_step_reads_its_thread_pool_work_as_xprof_does(stem: str) -> None:
    # XLA's CPU runtime runs the step's computation on its thread pool, linked to the
    # Python thread by ThreadpoolListener::Record -> StartRegion. XProf follows that link;
    # so does tfobs: host compute step by step as XProf's, not "other".
    path = CAPTURES / f"{stem}.xplane.pb"
    s = tfobs.analyze(path)
    steps, _ = xprof_steps(path)
    assert s.steps.count == len(steps) == 10
    for want, got in zip(steps, s.steps.items, strict=True):
        assert got.breakdown_s["host_compute"] == pytest.approx(
            want["host_compute"], abs=0.01 * want["duration_s"]), want["name"]
    ratios = s.breakdown_ratio
    assert ratios["host_compute"] > ratios["other"]  # the computation, not Python


def test_keras2_fit_with_a_parameter_server_times_its_markers_not_its_function_runs() -> None:
    # tf_keras `fit` marks each scheduled step `train` (_r=1) and runs functions on the
    # coordinator too: XProf's steps are those runs, with a verdict from them; tfobs
    # times the markers, names XProf's steps, no verdict.
    s = tfobs.analyze(KERAS2_PS_CHIEF)
    steps, props = xprof_steps(KERAS2_PS_CHIEF)
    assert steps and all(x["name"].startswith("KernelAndDeviceFunc::RunAsync ") for x in steps)
    assert "No step time measured" not in props["input_conclusion"]
    assert s.steps.method == "markers_remote" and s.steps.count == 38  # 40, ends dropped
    assert [x.step_num for x in s.steps.items] == list(range(1, 39))
    assert "function runs as its steps instead" in s.steps.note
    assert s.input_bound.verdict == "unknown"
    calls = s.steps.calls[0]
    assert (calls.name, calls.source, calls.count) == ("train_function", "dispatched", 40)
    # the worker: Keras 2's train_function runs, XProf's RunAsync dispatches as steps
    w = tfobs.analyze(KERAS2_PS_WORKER)
    w_steps, _ = xprof_steps(KERAS2_PS_WORKER)
    assert w_steps and w.steps.count == 0
    top = w.steps.calls[0]
    assert (top.name, top.source) == ("train_function", "remote") and top.count >= 10
    assert top.mean_s > max(x["duration_s"] for x in w_steps)
    assert w.input_pipeline.xprof_only_input_ops == ("EagerService:Enqueue",)


def test_graph_mode_session_steps_hold_their_executors_and_unmarked_runs_are_calls() -> None:
    # tf.compat.v1: each SessionRun links (its `_p`) to the executor runs on the thread
    # pool; XProf's steps hold that work, and so do tfobs's.
    s = tfobs.analyze(SESSION_MARKED)
    steps, props = xprof_steps(SESSION_MARKED)
    assert [x["name"] for x in steps] == [f"train {x.step_num}" for x in s.steps.items]
    assert s.steps.count == 18
    for want, got in zip(steps, s.steps.items, strict=True):
        assert got.breakdown_s["host_compute"] == pytest.approx(want["host_compute"],
                                                                abs=1e-6)
    assert s.input_bound.advice == props["input_conclusion"]
    # without markers: no step for either tool; tfobs counts the Session.run calls
    loop = tfobs.analyze(SESSION_LOOP)
    assert xprof_steps(SESSION_LOOP)[0] == [] and loop.steps.count == 0
    calls = loop.steps.calls[0]
    assert (calls.name, calls.count, calls.source) == ("SessionRun", 20, "python")
    assert "holds 20 calls of 'SessionRun'" in loop.steps.note
    assert "calls_without_steps" in _codes(loop)


@pytest.mark.parametrize(("stem", "per_step"), [
    ("generated__tf2.21cpu__keras3_spe4_plain", 4),  # inferred from the executions
    ("generated__tf2.21cpu__keras3_spe4_callback", 4),  # tfobs's callback, strided numbers
    ("generated__tf2.21cpu__gru_spe3_fit", 3),
    ("generated__tf2.21cpu__evaluate_spe4", 4)])
def test_a_step_of_several_batches_says_so_and_its_time_per_batch(stem: str,
                                                                  per_step: int) -> None:
    # steps_per_execution=k: XProf and tfobs time one execution of k batches as a step, k
    # times the "ms/step" Keras prints; the note says so from the in-graph loop's reads.
    s = tfobs.analyze(CAPTURES / f"{stem}.xplane.pb")
    assert f"each step reads {per_step} batches in an in-graph loop" in s.steps.note
    assert f"steps_per_execution={per_step})" in s.steps.note
    assert f"{1e3 * s.steps.mean_s / per_step:.2f} ms per batch" in s.steps.note


@pytest.mark.parametrize("capture", [
    STRIDED,  # numbered ten apart, one batch each
    CAPTURES / "generated__tf2.21cpu__mirrored_fit.xplane.pb",  # per-replica iterators
    CAPTURES / "generated__tf2.21cpu__copy_to_device_loop.xplane.pb",  # two iterators
    CAPTURES / "generated__tf2.20cpu__keras3_fit.xplane.pb"])  # steps_per_execution=1
def test_a_step_of_one_batch_takes_no_batches_note(capture: pathlib.Path) -> None:
    assert "batches in an in-graph loop" not in tfobs.analyze(capture).steps.note


def test_inferred_steps_leave_out_the_validation_functions_executions() -> None:
    # Keras 3 fit with validation_data and no markers: training and validation both run
    # `multi_step_on_iterator`, two concrete functions. Steps are the training ones (the
    # most run); the validation executions (forward only, a first trace among them) are
    # named in the note, not mixed into the step time and the input verdict.
    s = tfobs.analyze(CAPTURES / "generated__tf2.21cpu__fit_validation_unmarked.xplane.pb")
    assert s.steps.method == "inferred" and s.steps.count == 10  # 12 training, 2 dropped
    assert "6 executions of another (multi_step_on_iterator_" in s.steps.note
    assert "an evaluation's, beside training" in s.steps.note
    # one function alone (an evaluation-only window) keeps every execution
    only = tfobs.analyze(CAPTURES / "generated__tf2.21cpu__evaluate_spe4.xplane.pb")
    assert only.steps.count == 6 and "executions of another" not in only.steps.note



def test_markers_inside_steps_of_the_same_name_are_told_apart_by_place() -> None:
    # An outer Trace("train", _r=1) around six inner Trace("train", _r=1): "make 'train' the
    # only step marker and 'train' a plain trace" said nothing a user could act on.
    from types import SimpleNamespace

    from tfobs.analysis.step_notes import nested_markers_note

    groups = [SimpleNamespace(marker="train")] * 3
    note = nested_markers_note(["train"] * 18, groups)
    assert "each inner 'train' as a step" in note
    assert "outer 'train' marker a plain trace of another name" in note
    other = nested_markers_note(["batch"] * 18, [SimpleNamespace(marker="epoch")] * 3)
    assert "'epoch' a plain trace" in other and "another name" not in other


PS_CHIEF = CAPTURES / "generated__tf2.21cpu__ps_chief.xplane.pb"
PS_PARTITIONED = CAPTURES / "generated__tf2.21cpu__ps_chief_partitioned.xplane.pb"


def _step_fn_runs(path: pathlib.Path, s: WindowSummary) -> tuple[int, int]:
    """The coordinator's `step_fn` calls (events with a `tf_function_call` stat): how
    many, and the most that overlap at any time."""
    spans = sorted((at, at + e.duration_ps) for name, stats, at, e in host_events(path, s)
                   if name == "step_fn" and "tf_function_call" in stats)
    most, open_ends = 0, []
    for begin, end in spans:
        open_ends = [x for x in open_ends if x > begin] + [end]
        most = max(most, len(open_ends))
    return len(spans), most


@pytest.mark.parametrize("capture", [PS_CHIEF, PS_PARTITIONED])
def test_coordinator_joining_every_step_is_told_to_schedule_several(
        capture: pathlib.Path) -> None:
    # schedule(step_fn) then join() inside each marked step: the 60 step functions never
    # overlap (2 workers, one busy at a time); the advice names it and the fix.
    s = tfobs.analyze(capture)
    assert s.steps.method == "markers_remote"
    assert _step_fn_runs(capture, s) == (60, 1)
    a = _codes(s)["ps_join_each_step"]
    assert a.severity == "warning"
    assert 0.7 < a.evidence["calls_in_flight"] < 1.0
    assert a.evidence["calls_per_step"] == pytest.approx(1.0, abs=0.05)
    assert a.evidence["call_s"] <= a.evidence["step_s"] == pytest.approx(s.steps.mean_s)
    assert "Each marked step dispatches one 'step_fn'" in a.message
    assert "join() once" in a.fix and "schedule" in a.fix


def test_coordinator_scheduling_ahead_gets_no_join_advice() -> None:
    # the same job scheduling 60 before one join: step functions side by side, no step;
    # tf_keras fit under the strategy joins per epoch: 1.75 in flight
    async_chief = tfobs.analyze(CHIEF_ASYNC)
    assert _step_fn_runs(CHIEF_ASYNC, async_chief)[1] >= 2
    for s in (async_chief, tfobs.analyze(KERAS2_PS_CHIEF)):
        assert "ps_join_each_step" not in _codes(s)
    keras2 = tfobs.analyze(KERAS2_PS_CHIEF).steps.calls[0]
    assert keras2.source == "dispatched" and keras2.mean_s * keras2.per_s > 1.5
