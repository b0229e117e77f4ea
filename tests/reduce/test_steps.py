"""Steps: markers, Keras 3 inferred steps, per-step top events, JSON round trip."""

from __future__ import annotations

import bisect
import json
import re

import pytest

import tfobs
from tests.conftest import CAPTURES
from tests.support.raw_capture import host_events, step_spans_ps
from tfobs.summary import CATEGORIES, WindowSummary

KERAS3 = CAPTURES / "generated__tf2.20cpu__keras3_fit.xplane.pb"
TFKERAS = CAPTURES / "generated__tf2.20cpu__tfkeras_fit.xplane.pb"


def test_keras3_steps_are_inferred_and_fit_the_window() -> None:
    s = tfobs.analyze(KERAS3)
    assert s.steps.method == "inferred"
    assert "multi_step_on_iterator" in s.steps.note
    assert s.steps.count == 18  # 20 executions, first and last dropped as XProf does
    total = sum(x.duration_s for x in s.steps.items)
    assert 0 < total <= s.duration_s
    # 20 steps of about the mean duration fill the recorded window almost exactly.
    assert 20 * s.steps.mean_s == pytest.approx(s.duration_s, rel=0.15)
    starts = [x.start_ns for x in s.steps.items]
    assert starts == sorted(starts)
    for a, b in zip(s.steps.items, s.steps.items[1:], strict=False):
        assert a.start_ns + a.duration_s * 1e9 <= b.start_ns + 1  # steps do not overlap
    assert s.start_ns <= starts[0] <= s.start_ns + s.duration_s * 1e9


def test_breakdown_adds_up_to_step_time() -> None:
    s = tfobs.analyze(TFKERAS)
    for step in s.steps.items:
        assert set(step.breakdown_s) == set(CATEGORIES)
        assert sum(step.breakdown_s.values()) == pytest.approx(step.duration_s, rel=1e-6)
    assert s.steps.mean_s == pytest.approx(sum(s.breakdown_s.values()), rel=1e-6)


def test_top_events_are_bounded_and_inside_their_step() -> None:
    s = tfobs.analyze(TFKERAS, top_n=3)
    for step in s.steps.items:
        assert 0 < len(step.top_events) <= 3
        durations = [e.duration_s for e in step.top_events]
        assert durations == sorted(durations, reverse=True)
        for e in step.top_events:
            assert e.kind in ("op", "tfdata", "kernel")
            assert e.start_ns >= step.start_ns - 1
    assert any(e.name == "IteratorGetNext" or "Iterator" in e.name
               for step in s.steps.items for e in step.top_events)
    assert tfobs.analyze(TFKERAS, top_n=0).steps.items[0].top_events == ()


def test_summary_json_round_trip_and_keys() -> None:
    s = tfobs.analyze(TFKERAS)
    d = json.loads(json.dumps(s.to_dict()))
    assert d["steps"]["method"] == "markers" and d["steps"]["count"] == 18
    assert set(d["steps"]["items"][0]) >= {"step_num", "duration_s", "breakdown_s"}
    assert d["input_bound"]["verdict"] == "highly"
    assert 0.98 < d["input_bound"]["ratio"] <= 1.0
    for key in ("total_s", "tensor_core_s", "eligible_op_s", "eligible_op_tensor_core_s"):
        assert key in d["kernels"]
    assert WindowSummary.from_dict(d) == s


def test_input_pipeline_matches_xprof_window_totals() -> None:
    s = tfobs.analyze(TFKERAS)
    # XProf: preprocessing_us 17220157.901 for this capture, nothing else.
    assert s.input_pipeline.host_input_total_s["preprocessing"] == pytest.approx(17.22016,
                                                                                 rel=1e-4)
    assert s.input_pipeline.host_input_s["preprocessing"] == pytest.approx(17.22016 / 18,
                                                                           rel=1e-4)
    assert s.input_pipeline.slowest_stage is not None
    assert "Map" in s.input_pipeline.slowest_stage.name


def test_capture_without_steps_says_none() -> None:
    s = tfobs.analyze(CAPTURES / "tracelens__mi300_jax08_gemm__tw003.xplane.pb")
    assert s.steps.method == "none" and s.steps.count == 0
    assert s.input_bound.verdict == "unknown"
    assert s.environment.device_type == "GPU" and s.environment.device_count >= 1


def test_a_long_dropped_first_step_is_named_in_the_note() -> None:
    # The iterator is made inside the window: its first next() fills a 20,000-element
    # shuffle buffer. XProf drops that step (the first) and so do the figures; the note says
    # how long it took, against the steps kept, so a window of 0.16 s is not read as 2 ms
    # steps alone.
    s = tfobs.analyze(CAPTURES / "generated__tf2.21cpu__shuffle_fill_in_window.xplane.pb")
    first = re.search(r"the first took ([\d.]+) ms, (\d+)x the mean step", s.steps.note)
    assert first is not None, s.steps.note
    assert float(first.group(2)) >= 10 and "the last took" not in s.steps.note
    assert float(first.group(1)) / 1e3 > s.steps.count * s.steps.mean_s  # most of the window
    # Steps of even length: no such words.
    even = tfobs.analyze(CAPTURES / "generated__tf2.21cpu__tiny_steps_long.xplane.pb")
    assert "first and last step dropped" in even.steps.note
    assert "x the mean step" not in even.steps.note


def test_a_long_dropped_first_step_that_traced_a_tf_function_says_so() -> None:
    # A tf.function(reduce_retracing=True) step warmed on batch 64 only: the window's first
    # step (batch 80) traces it again with a generalised shape (the job counted the trace
    # there) and instantiates the new function, 127 ms against 1.8 ms steps. XProf drops
    # that step; the note names the trace with its time instead of guessing.
    s = tfobs.analyze(CAPTURES / "generated__tf2.21cpu__reduce_retracing_batches_loop"
                      ".xplane.pb")
    note = s.steps.note
    assert re.search(r"the first took [\d.]+ ms, \d+x the mean step, in none of the figures: "
                     r"tf\.function traced a graph in it, [\d.]+ ms, and [\d.]+ ms "
                     r"instantiating the new function in its first call", note), note
    assert 60 < _ms("the first took", note) and _ms("traced a graph in it,", note) > 50
    assert "shuffle buffer" not in note
    # a long first step that traced nothing keeps the general words
    fill = tfobs.analyze(CAPTURES / "generated__tf2.21cpu__shuffle_fill_in_window.xplane.pb")
    assert "shuffle buffer filling" in fill.steps.note
    assert "traced a graph" not in fill.steps.note


def _ms(pattern: str, note: str) -> float:
    found = re.search(pattern + r" ([\d.]+) ms", note)
    assert found is not None, (pattern, note)
    return float(found.group(1))


def test_a_dropped_first_step_that_loads_from_the_compilation_cache_is_named() -> None:
    # A restarted job (jax.clear_caches() after the cache was written): the first marked
    # step traces and lowers the jitted step and loads it from JAX's persistent compilation
    # cache (JAX's own timers, in the provenance: tracing 71.6 ms, lowering 23.6 ms, cache
    # read 5.0 ms). XProf drops that step: the note says what it held, whatever its ratio.
    s = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__compilation_cache_load.xplane.pb")
    note = s.steps.note
    assert re.search(r"the first took [\d.]+ ms, \d+x the mean step, in none of the "
                     r"figures: JAX built jitted sgd_fn in it", note), note
    assert _ms("tracing", note) == pytest.approx(71.6, rel=0.1)
    assert _ms("lowering", note) == pytest.approx(23.6, rel=0.15)
    assert _ms("persistent compilation cache", note) == pytest.approx(5.0, rel=0.2)
    assert "instead of an XLA compile" in note and "XLA compile " not in note
    assert "saves only the XLA compile: each restart still pays the tracing and lowering" in note
    assert "shuffle buffer" not in note and "the last took" not in note
    # The Python tracer off (tfobs's live windows): the lowering is a TraceMe, and no
    # compile follows it: a load; the tracing and the load are the call's rest.
    off = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__compilation_cache_load_no_tracer"
                        ".xplane.pb").steps.note
    assert "JAX built jitted sgd_fn in it (the call that compiled it" in off, off
    assert _ms("lowering", off) == pytest.approx(11.8, rel=0.2)  # JAX's timer: 11.8 ms
    assert "no XLA compile: its executable came from JAX's persistent compilation cache" in off
    assert "tracing" in off and not re.search(r"tracing [\d.]+ ms", off)


def test_a_dropped_first_step_that_compiles_again_is_not_called_its_first_call() -> None:
    """The step's clip is a static argument raised every fourth step: the window's first
    step compiles the jitted function for a new clip value, long after its first call (in
    the warm-up, before the trace), and steps 8 and 12 compile it again. The note names the
    call that compiled, not "its first call", which the capture cannot know."""
    s = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__static_arg_every_4_steps.xplane.pb")
    note = s.steps.note
    assert "JAX built jitted clipped_fn in it (the call that compiled it" in note, note
    assert "first call" not in note
    retrace = next(a for a in s.advice if a.code == "tf_function_retracing")
    assert retrace.evidence["graph_builds"] == 2  # steps 8 and 12 of the kept 5-14


def test_a_dropped_first_step_that_compiles_is_named_and_steps_that_do_not_are_not() -> None:
    # Each epoch's first step compiles again after jax.clear_caches(): the window's first
    # (dropped, 4.4x the mean) is named with its compile; the kept ones are
    # tf_function_retracing's. Not every kept step compiles, so the dropped one is no
    # ordinary step.
    note = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__clear_caches_each_epoch"
                         ".xplane.pb").steps.note
    assert "the first took 308.6 ms, 4.4x the mean step, in none of the figures: JAX built " \
        "jitted sgd in it" in note, note
    assert _ms("XLA compile", note) > 100 and "persistent compilation cache" in note
    # Every step compiles (a new static argument each call): the dropped ones are like the
    # rest, and tf_function_retracing names it.
    every = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__recompile_each_step.xplane.pb")
    assert "JAX built" not in every.steps.note
    # A dropped first step whose compile ran on another thread (a loader thread's first
    # jnp.asarray) while the step waited on its queue: not the step's own, and the long
    # step keeps the general words.
    loader = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__python_loader_thread.xplane.pb")
    assert "JAX built" not in loader.steps.note and "14x the mean step" in loader.steps.note
    # Warmed-up steps: nothing.
    for case in ("sleep_throttled_steps", "bf16_cpu_steps", "tiny_steps_long"):
        note = tfobs.analyze(CAPTURES / f"generated__jax0.10cpu__{case}.xplane.pb").steps.note
        assert "JAX built" not in note and "x the mean step" not in note, (case, note)


def test_steps_of_several_marker_names_are_said_per_name() -> None:
    # A loop marking "train" steps and, every fifth, a "test" step: XProf times them
    # together; the note gives each name's count and mean, so an evaluation's steps are not
    # read as the training's.
    s = tfobs.analyze(CAPTURES / "generated__tf2.21cpu__train_and_test_markers.xplane.pb")
    found = re.search(r"steps of 2 marker names, timed together as XProf does "
                      r"\(train (\d+) of ([\d.]+) ms, test (\d+) of ([\d.]+) ms", s.steps.note)
    assert found is not None, s.steps.note
    train = [st for st in s.steps.items if st.marker == "train"]
    assert int(found.group(1)) == len(train) and int(found.group(3)) == s.steps.count - len(train)
    mean_ms = 1e3 * sum(st.duration_s for st in train) / len(train)
    assert float(found.group(2)) == pytest.approx(mean_ms, abs=0.006)
    one_name = tfobs.analyze(CAPTURES / "generated__tf2.21cpu__tiny_steps_long.xplane.pb")
    assert "marker names" not in one_name.steps.note


def _loop_iteration_runs(name: str, s: WindowSummary) -> list[tuple[int, int, int, int]]:
    """(start ps, end ps cut at its step's end, iter_num, step id) of every
    `ExecutorState::Process` event past a loop's first iteration (`iter_num` > 0) that
    starts in one of `s`'s kept steps, read from the capture's own events."""
    spans = step_spans_ps(s)
    out = []
    for event, stats, at, e in host_events(CAPTURES / f"{name}.xplane.pb", s):
        if event != "ExecutorState::Process" or stats.get("iter_num", 0) <= 0:
            continue
        for b, end in spans:
            if b <= at < end:
                out.append((at, min(end, at + e.duration_ps), stats["iter_num"], stats["id"]))
    return out


def _covered_ns(runs: list[tuple[int, int, int, int]]) -> float:
    """The time some run covers, each instant once (ns)."""
    total, reach = 0, -(2**63)
    for start, end, *_ in sorted(runs):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total / 1e3


MAP_FN = "generated__tf2.21cpu__map_fn_per_example_loop"


def test_in_graph_loop_time_is_the_iterations_executor_runs_counted_once() -> None:
    """A per-row tf.map_fn over 64-row batches in the tf.function step: its body's ops write
    no op event, only ExecutorState::Process runs with iter_num 1..64, which overlap one
    another on the thread. The figure is their covered time per kept step (the runs'
    durations added up read about 15 % more), its highest iteration 64 in every step, and
    the loop named by the tensor tf.map_fn unstacks ('map')."""
    s = tfobs.analyze(CAPTURES / f"{MAP_FN}.xplane.pb")
    st = s.steps
    runs = _loop_iteration_runs(MAP_FN, s)
    assert st.count == 8 and len(runs) == 8 * 1193
    by_hand = _covered_ns(runs) / 1e9 / st.count
    assert st.in_graph_loop_s == pytest.approx(by_hand, rel=1e-6)
    added = sum(end - start for start, end, *_ in runs) / 1e12 / st.count
    assert added > 1.1 * st.in_graph_loop_s
    assert 0.35 < st.in_graph_loop_s / st.mean_s < 0.45  # about 1 ms of each 2.4 ms step
    starts = [x.start_ns * 1000 for x in st.items]
    top = [0] * st.count
    for start, _, it, _ in runs:
        k = bisect.bisect_right(starts, start) - 1
        top[k] = max(top[k], it)
    assert top == [64] * 8
    assert st.in_graph_loop_iterations == st.in_graph_loop_iterations_max == 64
    assert st.in_graph_loop_op_s == 0.0 and st.in_graph_loop_scopes == ("map",)
    assert not st.in_graph_loop_recurrent
    back = WindowSummary.from_dict(s.to_dict())  # the figures survive JSON
    assert back.steps == st
    old = s.to_dict()
    for key in [k for k in old["steps"] if k.startswith("in_graph_loop")]:
        del old["steps"][key]  # a summary written before these figures still loads
    assert WindowSummary.from_dict(old).steps.in_graph_loop_s == 0.0


def test_a_steps_per_execution_loops_own_iterations_are_no_in_graph_loop() -> None:
    """Keras 3's steps_per_execution=4 runs its four training steps as iterations of one
    while loop that fetches a batch each (its runs reach iter_num 4, the exit test): most
    of each call is in runs past iteration 0, yet none is an in-graph loop inside a step.
    A GRU inside such a loop (steps_per_execution=3) keeps its iterations past that count."""
    s = tfobs.analyze(CAPTURES / "generated__tf2.21cpu__keras3_spe4_plain.xplane.pb")
    runs = _loop_iteration_runs("generated__tf2.21cpu__keras3_spe4_plain", s)
    assert _covered_ns(runs) / 1e9 > 0.3 * s.steps.count * s.steps.mean_s
    assert max(it for _, _, it, _ in runs) == 4
    assert s.steps.in_graph_loop_s == 0.0 and s.steps.in_graph_loop_iterations == 0
    gru = tfobs.analyze(CAPTURES / "generated__tf2.21cpu__gru_spe3_fit.xplane.pb").steps
    assert gru.in_graph_loop_iterations == 16 and gru.in_graph_loop_recurrent
    assert 0.3 * gru.mean_s < gru.in_graph_loop_s < 0.8 * gru.mean_s
