"""A summary as plain data and back: `to_dict()` gives what `dataclasses.asdict` gives and
`from_dict` restores the summary, on every test capture. The helper process sends each
window's summary this way, and the training process reads it back; both walk the fields
from plans made once per class (a window of thousands of steps holds tens of thousands of
objects; asdict's deep copy took longer than the reduction)."""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
from typing import Any

import pytest

import tfobs.analysis.pipeline as reduction
from tests.conftest import capture_paths
from tfobs.errors import CaptureError
from tfobs.summary import (
    Allocation,
    MemoryStat,
    Step,
    Steps,
    TfDataStage,
    TimedEvent,
    WindowSummary,
    build_all,
)


def _json(d: dict[str, Any]) -> str:
    return json.dumps(d, sort_keys=True)


@pytest.mark.parametrize("capture", capture_paths(), ids=lambda p: p.name.split(".")[0])
def test_to_dict_is_asdict_and_from_dict_restores_the_summary(capture: pathlib.Path) -> None:
    try:
        s = reduction.analyze(capture)
    except CaptureError:
        pytest.skip("a capture the reduction refuses (tested in test_fuzz_reduce)")
    d = s.to_dict()
    assert d == dataclasses.asdict(s) or _json(d) == _json(dataclasses.asdict(s))  # NaN
    back = WindowSummary.from_dict(json.loads(json.dumps(d)))
    assert _json(back.to_dict()) == _json(d)
    # The objects read back are the classes' own, equal and hashable as built ones.
    for step in back.steps.items[:3]:
        assert type(step) is Step and step == Step(**dataclasses.asdict(step) | {
            "top_events": tuple(TimedEvent(**e) for e in
                                dataclasses.asdict(step)["top_events"])})
        assert all(hash(e) == hash(dataclasses.replace(e)) for e in step.top_events)


def test_to_dict_copies_what_asdict_copies() -> None:
    """Changing the plain data leaves the summary as it was (asdict copies dicts and
    tuples; the plans must too)."""
    step = Step(1, 2, 0.5, {"input": 0.1}, (TimedEvent("op", "op", 3, 0.2),))
    s = WindowSummary(steps=Steps(count=1, items=(step,)), breakdown_s={"input": 0.1})
    d = s.to_dict()
    d["breakdown_s"]["input"] = 9.0
    d["steps"]["items"][0]["breakdown_s"]["input"] = 9.0
    assert s.breakdown_s == {"input": 0.1} and step.breakdown_s == {"input": 0.1}
    assert d["steps"]["items"][0]["top_events"][0] == dataclasses.asdict(step.top_events[0])
    assert isinstance(d["steps"]["items"], tuple)  # as asdict keeps them


def test_values_off_their_declared_type_are_handled_as_asdict_handles_them() -> None:
    """A list where a tuple is declared, a nested dataclass in an untyped place, None in
    an optional field: the same plain data as asdict."""
    mem = MemoryStat("GPU_0_bfc", 1, 2, math.nan, top_allocations=[  # type: ignore[arg-type]
        Allocation("op", 4)])
    s = WindowSummary(memory=(mem,), input_pipeline=dataclasses.replace(
        WindowSummary().input_pipeline, slowest_stage=None,
        stages=(TfDataStage("Iterator::Root", 0.1),)))
    assert _json(s.to_dict()) == _json(dataclasses.asdict(s))
    assert isinstance(s.to_dict()["memory"][0]["top_allocations"], list)
    back = WindowSummary.from_dict(json.loads(json.dumps(s.to_dict())))
    assert back.input_pipeline.slowest_stage is None
    assert back.memory[0].top_allocations == (Allocation("op", 4),)


def test_from_dict_ignores_fields_it_does_not_know_and_fills_missing_ones() -> None:
    """Plain data from another tfobs version: unknown keys are left out, missing
    fields take their defaults (the slow path of the plans)."""
    d = WindowSummary(steps=Steps(count=2, mean_s=0.5)).to_dict()
    d["steps"]["new_field"] = 1
    del d["steps"]["note"]
    back = WindowSummary.from_dict(d)
    assert back.steps.count == 2 and back.steps.note == "" and back.steps.mean_s == 0.5


def test_build_all_makes_the_objects_the_constructor_makes() -> None:
    """The reduction's bulk builder (thousands of steps and events per window): equal,
    hashable and frozen as constructed ones; a missing column is refused."""
    built = build_all(TimedEvent, ["a", "b"], ["op", "kernel"], [1, 2], [0.5, 0.25],
                      ["", "/device:GPU:0"])
    assert built == [TimedEvent("a", "op", 1, 0.5), TimedEvent("b", "kernel", 2, 0.25,
                                                              "/device:GPU:0")]
    assert hash(built[0]) == hash(TimedEvent("a", "op", 1, 0.5))
    with pytest.raises(dataclasses.FrozenInstanceError):
        built[0].name = "c"  # type: ignore[misc]
    with pytest.raises(TypeError, match="one column for each"):
        build_all(TimedEvent, ["a"], ["op"], [1], [0.5])
    with pytest.raises(ValueError):  # rows of unequal length
        build_all(TimedEvent, ["a", "b"], ["op"], [1], [0.5], [""])
