"""Advice where users see it: `tfobs analyze` (table and JSON), the overview page,
`tfobs_advice_active{rule}`, the window span's events, `tfobs demo`'s line and docs/advice.md,
all from the real capture of `tfobs demo --input-bound`'s pipeline."""

from __future__ import annotations

import contextlib
import io
import json
import pathlib
import types

import prometheus_client
from prometheus_client.parser import text_string_to_metric_families

import tfobs
from tests.conftest import CAPTURES
from tfobs.analysis.advice import RULE_IDS, markdown_table
from tfobs.cli import main
from tfobs.commands.demo import format_window
from tfobs.config import Config
from tfobs.export.otel import EVENT_ADVICE, plan_window
from tfobs.export.page import render_page
from tfobs.export.prometheus import PrometheusExporter
from tfobs.health import HealthLedger
from tfobs.summary import WindowSummary
from tfobs.window import WindowRecord

SLOW = CAPTURES / "advice__demo_input_bound.xplane.pb"
HEALTHY = CAPTURES / "advice__healthy.xplane.pb"
ADVICE_PAGE = pathlib.Path(__file__).parents[2] / "docs" / "advice.md"
FIRED = {"input_bound", "tfdata_py_function", "tfdata_map_serial"}


def _cli(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["analyze", *argv]) == 0
    return out.getvalue()


def test_analyze_table_shows_each_rule_with_evidence_fix_and_guide() -> None:
    text = _cli(str(SLOW))
    block = text[text.index("Advice (rule"):]
    assert "[critical] input_bound: Your program is HIGHLY input-bound" in block
    assert "[warning] tfdata_map_serial: The slowest tf.data stage is a sequential map " \
           "(slowest stage Iterator::Root::Prefetch::Map" in block
    assert "fix: pass num_parallel_calls=tf.data.AUTOTUNE to Dataset.map" in block
    assert "guide: tf.data performance guide (tensorflow.org/guide/data_performance): " \
           "Parallelizing data transformation" in block
    assert "evidence: input_pct=" in block and "(threshold: " in block


def test_analyze_json_carries_the_advice_fields_and_round_trips() -> None:
    doc = json.loads(_cli(str(SLOW), "--format", "json"))
    by_code = {a["code"]: a for a in doc["advice"]}
    assert set(by_code) == FIRED
    py = by_code["tfdata_py_function"]
    assert py["evidence"]["python_op_s_per_step"] > 0.028
    assert py["fix"] and py["guide"] and py["threshold"] and py["severity"] == "warning"
    again = WindowSummary.from_dict(doc)
    assert again.advice == tfobs.analyze(SLOW).advice


def test_overview_page_lists_each_rule_with_its_fix() -> None:
    page = render_page(tfobs.analyze(SLOW))
    for code in FIRED:
        assert f'data-rule="{code}"' in page
    assert "Fix: pass num_parallel_calls=tf.data.AUTOTUNE to Dataset.map" in page
    assert "Evidence: input_pct=" in page and "Guide: tf.data performance guide" in page


def test_advice_active_metric_has_one_series_per_rule_and_marks_the_fired_ones() -> None:
    cfg = Config.load(metrics_port=-1)
    exp = PrometheusExporter(cfg, cfg.identity(), HealthLedger())
    exp.start()
    try:
        exp.publish(tfobs.analyze(SLOW), WindowRecord(index=0))
        text = prometheus_client.generate_latest(exp.registry).decode()
    finally:
        exp.shutdown(1.0)
    values = {s.labels["rule"]: s.value for fam in text_string_to_metric_families(text)
              for s in fam.samples if s.name == "tfobs_advice_active"}
    assert set(values) == set(RULE_IDS)  # bounded: the fixed ids, no more
    assert {r for r, v in values.items() if v == 1.0} == FIRED


def test_window_span_carries_one_event_per_rule_with_evidence() -> None:
    s = tfobs.analyze(SLOW)
    steps = [x.step_num for x in s.steps.items]
    record = WindowRecord(index=0, start_ns=s.start_ns,
                          end_ns=s.start_ns + int(s.duration_s * 1e9),
                          first_step=min(steps), last_step=max(steps))
    root = plan_window(s, record).spans[0]
    events = {a["tfobs.advice.code"]: a for name, _t, a in root.events if name == EVENT_ADVICE}
    assert set(events) == FIRED
    serial = events["tfdata_map_serial"]
    assert serial["tfobs.advice.fix"].startswith("pass num_parallel_calls")
    assert serial["tfobs.advice.evidence.slowest_stage_s_per_step"] > 0.028
    assert "Parallelizing data transformation" in serial["tfobs.advice.guide"]


def test_demo_line_names_the_stage_and_fix_and_stays_quiet_when_healthy() -> None:
    record = types.SimpleNamespace(index=3, outcome="captured", reason="", first_step=10,
                                   last_step=17, capture_s=0.4, reduce_s=0.1, cut="")
    line = format_window(record, tfobs.analyze(SLOW))
    assert "advice: input_bound, tfdata_py_function, tfdata_map_serial" in line
    assert "Iterator::Root::Prefetch::Map" in line and "Fix: rewrite the mapped function" in line
    assert "| cut:" not in line
    healthy = tfobs.analyze(HEALTHY)
    assert "advice:" not in format_window(record, healthy)
    record.cut = "cut: memory grew 70 MiB (malloc's live bytes) while tracing (limit 64)"
    assert format_window(record, healthy).endswith(f"| {record.cut}")  # why it is short


def test_advice_page_has_the_advice_table() -> None:
    text = ADVICE_PAGE.read_text()
    start = text.index("<!-- section: advice")
    section = text[start:text.index("<!-- /section: advice -->")]
    assert markdown_table() in section
