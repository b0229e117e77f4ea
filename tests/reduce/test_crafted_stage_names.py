"""tf.data stage names made to hurt the reduction (red team 3): advice that reads the
names above a stage costs the name's length, not its length times its depth."""

from __future__ import annotations

import dataclasses
import time

import pytest

import tfobs
from tests.conftest import CAPTURES
from tfobs.analysis.advice import advise
from tfobs.summary import TfDataStage


def test_a_deep_slowest_stage_costs_its_length_not_each_prefix() -> None:
    # The per-replica rule's "the dataset's own stages" left out the names above the slow
    # stage by making each of them: a stage 32,000 `::` deep (a 350 KB capture) made 32,000
    # copies of a name of up to 160 KB: 24 s and 2.5 GB in tfobs analyze.
    s = tfobs.analyze(CAPTURES / "generated__tf2.21cpu__mirrored.xplane.pb")
    assert s.input_pipeline.per_replica_input and s.input_pipeline.python_op_s == 0
    above = "Iterator::Root" + "::Map" * 20_000
    stages = (
        TfDataStage(above + "::Generator", 9.0, 10),  # the slowest
        TfDataStage(above, 1.0, 10),  # above it: left out
        TfDataStage("Iterator::Root", 1.0, 10),  # above it: left out
        TfDataStage("Iterator::Root::Map::Rebatch", 2.0, 10),  # the dataset's own
        TfDataStage("Iterator::Ro", 0.5, 10),  # a prefix, but of no whole name: its own
        TfDataStage(above + ":", 0.25, 10),  # ends in half a `::`: its own
    )
    s = dataclasses.replace(s, input_pipeline=dataclasses.replace(
        s.input_pipeline, stages=stages, slowest_stage=stages[0]))
    t0 = time.process_time()
    found = [a for a in advise(s) if a.code == "tfdata_per_replica_input"]
    took = time.process_time() - t0
    assert len(found) == 1, [a.code for a in advise(s)]
    assert found[0].evidence["dataset_stages_s_per_step"] == pytest.approx(
        2.75 / s.steps.count)
    assert took < 1.5, took
