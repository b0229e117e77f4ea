"""Steps whose markers close before their compiled work runs (JAX's asynchronous dispatch on
a CPU): tfobs keeps XProf's steps and says that they time the dispatch."""

from __future__ import annotations

import pytest

import tfobs
from tests.conftest import CAPTURES, capture_paths
from tfobs.analysis.advice.steps import DISPATCH_VERDICT_FIX, SUPERSEDED_BY_DISPATCH
from tfobs.analysis.xla_cpu_work import DISPATCH_NOTE_START, markers_time_dispatch
from tfobs.summary import WindowSummary

# Marked around the call alone, no block_until_ready inside the marker.
DISPATCH_ONLY = ("generated__jax0.10cpu__async_two_jits_steps",
                 "generated__jax0.10cpu__async_dispatch_steps",
                 "generated__jax0.10cpu__async_epoch_end_block_steps")


def _summary(stem: str) -> WindowSummary:
    return tfobs.analyze(CAPTURES / f"{stem}.xplane.pb")


@pytest.mark.parametrize("stem", DISPATCH_ONLY)
def test_steps_that_time_their_dispatch_are_named_with_the_fix(stem: str) -> None:
    s = _summary(stem)
    st = s.steps
    assert st.method == "markers" and st.count == 10  # XProf's steps, kept
    assert DISPATCH_NOTE_START in st.note
    assert st.work_outside_ratio >= 0.5 and st.work_outside_s >= st.mean_s * st.count > 0
    codes = [a.code for a in s.advice]
    assert "markers_time_dispatch" in codes
    # The figures around dispatch-only markers are the compiled work, not Python.
    assert not set(codes) & set(SUPERSEDED_BY_DISPATCH)
    rule = next(a for a in s.advice if a.code == "markers_time_dispatch")
    assert "block_until_ready" in rule.fix and rule.severity == "warning"
    assert rule.evidence["work_outside_s"] == pytest.approx(st.work_outside_s)
    assert rule.evidence["work_outside_ratio"] == pytest.approx(st.work_outside_ratio)
    verdict = [a for a in s.advice if a.code == "input_bound"]
    assert all(a.fix == DISPATCH_VERDICT_FIX for a in verdict)


def test_a_pause_that_waits_for_the_queued_steps_is_not_work_to_run_less_often() -> None:
    """Four queued steps an epoch (markers around the call alone), the weights waited for
    and the loss read at each epoch's end, outside the markers: 9.3 ms pauses of
    block_until_ready against 0.09 ms markers (the epoch's wall time 2.3-2.4 ms a step).
    step_pause read them as work of their own ("epoch-end callbacks, validation, checkpoint
    writes ... run it less often or off the training thread"), a warning; the pause is the
    steps' compiled work, which nothing makes rarer: said so, an info, pointing to
    markers_time_dispatch."""
    s = _summary("generated__jax0.10cpu__async_epoch_end_block_steps")
    assert s.steps.pause_top[0].endswith(" block_until_ready")
    codes = [a.code for a in s.advice]
    assert "markers_time_dispatch" in codes
    pause = next(a for a in s.advice if a.code == "step_pause")
    assert pause.severity == "info"
    assert "the loop waiting for the steps' own compiled work" in pause.message
    assert "run it less often" not in pause.fix and "markers_time_dispatch" in pause.fix


def test_python_in_dispatch_only_markers_is_weighed_against_the_step_period() -> None:
    """The same window's markers hold 0.09 ms of dispatch, 0.01 ms of it Python (the
    batch's numpy slice): 13.9 % of the marker, 0.6 % of the 2.15 ms between the steps'
    starts, where their queued work runs. python_in_step said 13.9 % with the fix that
    loads batches ahead; under 3 % of the period, it is not said."""
    s = _summary("generated__jax0.10cpu__async_epoch_end_block_steps")
    st = s.steps
    assert st.python_traced_s / st.mean_s > 0.1 and st.python_traced_s / st.interval_s < 0.03
    assert "python_in_step" not in [a.code for a in s.advice]


def test_the_clear_case_leaves_most_of_the_work_outside_every_step() -> None:
    st = _summary("generated__jax0.10cpu__async_two_jits_steps").steps
    # 12 steps of about 0.2 ms of work each, markers of 0.02-0.05 ms
    assert st.work_outside_ratio > 0.75
    assert st.work_outside_s > 3 * st.mean_s * st.count
    assert st.work_outside_s > 1e-3


@pytest.mark.parametrize("path", [p for p in capture_paths()
                                  if p.name.split(".xplane")[0] not in DISPATCH_ONLY],
                         ids=lambda p: p.name.split(".xplane")[0])
def test_steps_that_wait_for_their_work_are_not_called_dispatch_only(path) -> None:
    s = tfobs.analyze(path)
    assert DISPATCH_NOTE_START not in s.steps.note
    assert "markers_time_dispatch" not in [a.code for a in s.advice]
    if "jax" not in path.name or "h100" in path.name:
        # no XLA CPU runtime threads (TensorFlow), or a GPU (device spans instead)
        assert s.steps.work_outside_s == 0.0
    elif s.steps.count:
        # JAX on a CPU, each step waiting for its work: what is left outside is mostly
        # the first and last steps' work, which XProf drops with them
        assert s.steps.work_outside_ratio < 0.5


def test_an_evaluation_between_waited_for_steps_is_no_dispatch() -> None:
    """Train steps that wait for their work, with an unmarked jitted evaluation between
    every third and fourth of them (its own program, `jit_evaluate`, called only between
    the steps): its work lies outside every step, most of the window's, yet no step left
    it behind. Left out of the steps' figures, the steps are not called dispatch-only
    (they were, with a fix asking for the block_until_ready the job already has)."""
    s = _summary("generated__jax0.10cpu__step_numbers_skip_eval_between")
    assert DISPATCH_NOTE_START not in s.steps.note
    codes = [a.code for a in s.advice]
    assert "markers_time_dispatch" not in codes and "step_pause" in codes
    assert s.steps.work_outside_ratio < 0.5
    assert s.steps.work_in_steps_s > 0.5 * s.steps.mean_s


def test_the_figure_survives_the_summary_round_trip() -> None:
    s = _summary("generated__jax0.10cpu__async_two_jits_steps")
    back = WindowSummary.from_dict(s.to_dict())
    assert back.steps.work_outside_s == s.steps.work_outside_s > 0


@pytest.mark.parametrize(("outside", "total", "steps_s", "fires"), [
    (2.0e-3, 2.4e-3, 0.45e-3, True),   # the recorded case
    (1.0e-3, 2.4e-3, 0.45e-3, False),  # under half of the work outside
    (2.0e-3, 2.4e-3, 2.5e-3, False),   # the steps hold more time than the work outside
    (2.0e-3, 2.4e-3, 0.0, False),      # no step
    (0.0, 0.0, 0.45e-3, False),        # no runtime work traced
])
def test_threshold(outside: float, total: float, steps_s: float, fires: bool) -> None:
    assert markers_time_dispatch(outside, total, steps_s) is fires


# -- XLA's CPU work that XProf's breakdown files under 'All Others' ---------------------------


def _cpu_captures() -> list:
    return [p for p in capture_paths() if "h100" not in p.name]


@pytest.mark.parametrize("path", _cpu_captures(), ids=lambda p: p.name.split(".xplane")[0])
def test_unknown_spans_add_up_to_xprofs_all_others(path) -> None:
    """The stretches `unknown_spans` gives are exactly the breakdown's unknown time, step
    by step summed, on every CPU capture (the runtime's share of 'All Others' is read
    against them)."""
    from tfobs.analysis import breakdown as bd
    from tfobs.analysis import eventtypes as et
    from tfobs.analysis.pipeline import _unknown_spans
    from tfobs.analysis.steps import find_steps
    from tfobs.analysis.timeline import Timeline, time_base_ps
    from tfobs.xspace.reader import parse

    space = parse(path.read_bytes())
    plane = space.plane("/host:CPU")
    assert plane is not None
    host = Timeline(plane, time_base_ps([plane]))
    found = find_steps(host)
    kept = bd.step_breakdowns(found.groups, False, typed=found.typed, spans=found.spans)
    rows = _unknown_spans(found, kept)
    assert int((rows[:, 1] - rows[:, 0]).sum()) == kept.totals.get(et.UNKNOWN_TIME, 0)


@pytest.mark.parametrize("path", _cpu_captures(), ids=lambda p: p.name.split(".xplane")[0])
def test_runtime_work_in_all_others_is_part_of_it(path) -> None:
    s = tfobs.analyze(path)
    assert 0.0 <= s.steps.work_in_other_s <= s.breakdown_s["other"] + 1e-12
    if "jax" not in path.name:
        assert s.steps.work_in_other_s == 0.0  # no XLA CPU runtime threads


@pytest.mark.parametrize("stem", ["generated__jax0.10cpu__sharded_two_devices",
                                  "generated__jax0.10cpu__pmap_four_devices"])
def test_all_others_that_is_the_runtimes_work_says_so(stem: str) -> None:
    from tfobs.analysis.advice.gaps import RUNTIME_FIX

    s = _summary(stem)
    a = next(a for a in s.advice if a.code == "all_others_bound")
    assert s.steps.work_in_other_s >= 0.5 * s.breakdown_s["other"] > 0
    assert "XLA's CPU runtime running the step's compiled work" in a.message
    assert a.message.startswith(f"{a.evidence['other_pct']:.1f} % of the total step time")
    assert a.fix == RUNTIME_FIX
    assert a.evidence["work_in_other_s"] == pytest.approx(s.steps.work_in_other_s)


@pytest.mark.parametrize("stem, runtime", [
    ("generated__jax0.10cpu__sharded_two_devices", True),
    ("generated__jax0.10cpu__scan_four_steps", True),
    ("generated__tf2.21cpu__python_in_step", False),
])
def test_a_potentially_verdict_names_what_holds_all_others(stem: str, runtime: bool) -> None:
    # XProf's POTENTIALLY rests on 'All Others'; its fix says what that time mostly is.
    s = _summary(stem)
    a = next(a for a in s.advice if a.code == "input_bound")
    assert s.input_bound.verdict == "potentially"
    assert (s.steps.work_in_other_s >= 0.5 * s.breakdown_s["other"] > 0) is runtime
    assert ("most of it XLA's CPU runtime running the step's compiled work" in a.fix) is runtime
    assert ("usually Python in or around the step" in a.fix) is not runtime


def test_all_others_of_a_step_that_waits_in_python_keeps_xprofs_fix() -> None:
    from tfobs.analysis.advice.gaps import ALL_OTHERS

    s = _summary("generated__jax0.10cpu__step_annotation")
    a = next(a for a in s.advice if a.code == "all_others_bound")
    assert s.steps.work_in_other_s == 0.0
    assert "XLA's CPU runtime" not in a.message and a.fix == ALL_OTHERS.jax_fix
