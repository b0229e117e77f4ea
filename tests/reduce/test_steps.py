"""Steps: markers, Keras 3 inferred steps, per-step top events, JSON round trip."""

from __future__ import annotations

import json
import re

import pytest

import tfobs
from tests.conftest import CAPTURES
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
