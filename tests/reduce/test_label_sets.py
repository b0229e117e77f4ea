"""The fixed label sets in `tfobs.summary` (read by the exporters in the training process,
which never loads the analysis) equal what the analysis emits: the advice table's rule ids in
its order, and every label a reduction of real captures (TensorFlow CPU, H100 and MI300 JAX)
puts in a summary."""

from __future__ import annotations

import pytest

import tfobs
from tests.conftest import CAPTURES
from tfobs import summary as labels
from tfobs.analysis.advice import RULES
from tfobs.summary import WindowSummary

# Captures whose summaries hold GPU idle causes and copies, advice of every severity, steps
# found every way, input by kind.
NAMES = (
    "advice__tfdata_py_function",
    "advice__callback_between_steps",
    "advice__eager_ops",
    "generated__tf2.21cpu__retrace_loop",
    "generated__tf2.21cpu__markers_without_root",
    "generated__tf2.21cpu__predict_only",
    "recorded__h100_jax0.11.2__h2d_d2h_copies",
    "recorded__h100_jax0.11.2__input_bound_host_wait",
    "recorded__h100_jax0.11.2__launch_bound_tiny_ops",
    "tracelens__mi300_jax08_gemm__tw003",
    "generated__tf2.21cpu__gru_fit",  # steps by XProf's per-iteration rule
    "generated__tf2.21cpu__ps_chief",  # a coordinator's steps, timed by the markers
    "generated__tf2.20cpu__keras3_fit",  # inferred steps
)


def test_rule_ids_are_the_advice_tables_ids_in_its_order() -> None:
    assert tuple(r.id for r in RULES) == labels.RULE_IDS
    assert len(set(labels.RULE_IDS)) == len(labels.RULE_IDS)


def test_catalog_reads_the_rule_ids_from_the_summary() -> None:
    from tfobs.export import catalog

    assert catalog.ADVICE_RULES is labels.RULE_IDS


@pytest.mark.parametrize("name", NAMES)
def test_every_label_a_reduction_emits_is_in_its_fixed_set(name: str) -> None:
    s: WindowSummary = tfobs.analyze(CAPTURES / f"{name}.xplane.pb")
    assert {a.code for a in s.advice} <= set(labels.RULE_IDS)
    assert {a.severity for a in s.advice} <= set(labels.SEVERITIES)
    assert set(s.breakdown_s) <= set(labels.CATEGORIES)
    for step in s.steps.items:
        assert set(step.breakdown_s) <= set(labels.CATEGORIES)
    assert s.input_bound.verdict in labels.VERDICTS
    assert s.steps.method in labels.STEP_METHODS
    assert set(s.input_pipeline.host_input_s) <= set(labels.INPUT_KINDS)
    assert set(s.input_pipeline.host_input_total_s) <= set(labels.INPUT_KINDS)
    for d in s.devices:
        assert set(d.idle_s) <= set(labels.IDLE_CAUSES)
        assert set(d.copy_s) <= set(labels.COPY_DIRECTIONS)
        assert set(d.copy_bytes) <= set(labels.COPY_DIRECTIONS)


def test_the_captures_cover_the_label_sets() -> None:
    """The captures above emit labels of every set (so the subset checks can fail)."""
    summaries = [tfobs.analyze(CAPTURES / f"{n}.xplane.pb") for n in NAMES]
    severities = {a.severity for s in summaries for a in s.advice}
    causes = {c for s in summaries for d in s.devices for c, v in d.idle_s.items() if v > 0}
    copies = {c for s in summaries for d in s.devices for c, v in d.copy_s.items() if v > 0}
    assert severities == set(labels.SEVERITIES)
    assert {s.steps.method for s in summaries} == set(labels.STEP_METHODS)
    assert len({a.code for s in summaries for a in s.advice}) >= 8
    assert {"kernel_launch", "input"} <= causes
    assert {"h2d", "d2h"} <= copies
