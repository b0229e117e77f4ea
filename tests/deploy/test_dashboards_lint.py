"""Lint the Grafana dashboards the way grafana's dashboard-linter does, plus what tfobs
promises: a `datasource` variable used by every panel and query, units on every panel,
current panel types only, job/worker/device variables, exemplars linked to traces, and
PromQL that parses (dashboards and alert rules)."""

from __future__ import annotations

import re

import promql_parser
import pytest

from tests.support.dashboards import (
    DASHBOARD_FILES,
    all_queries,
    dashboard_queries,
    load,
    panels,
    recorded_names,
    substitute,
)

DEPRECATED = {"graph", "singlestat", "table-old", "grafana-piechart-panel",
              "grafana-worldmap-panel", "graph-old", "heatmap-old", "flot"}
DS_REF = {"type": "prometheus", "uid": "${datasource}"}
NAMES = [p.name for p in DASHBOARD_FILES]


def test_the_three_dashboards_exist() -> None:
    assert set(NAMES) == {"training-efficiency.json", "input-pipeline.json", "workers.json"}


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=NAMES)
def test_current_schema_and_no_export_inputs(path) -> None:
    d = load(path)
    assert d["schemaVersion"] >= 39
    assert "__inputs" not in d and "__requires" not in d
    assert "${DS_" not in path.read_text(), "exported-for-sharing datasource placeholders"
    assert d["uid"].startswith("tfobs-") and d["title"].startswith("tfobs / ")
    assert "tfobs" in d["tags"]


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=NAMES)
def test_datasource_variable_is_used_by_every_panel_and_target(path) -> None:
    d = load(path)
    variables = {v["name"]: v for v in d["templating"]["list"]}
    ds = variables["datasource"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    for var in variables.values():
        if var["type"] == "query":
            assert var["datasource"] == DS_REF, var["name"]
    checked = 0
    for panel in panels(d):
        if panel["type"] == "row":
            continue
        assert panel.get("datasource") == DS_REF, panel["title"]
        assert panel["targets"], f"{panel['title']} has no query"
        for target in panel["targets"]:
            assert target.get("datasource") == DS_REF, panel["title"]
            checked += 1
    assert checked >= 5


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=NAMES)
def test_units_on_every_panel_and_no_deprecated_types(path) -> None:
    ids = set()
    for panel in panels(load(path)):
        assert panel["type"] not in DEPRECATED, panel["title"]
        assert panel["id"] not in ids
        ids.add(panel["id"])
        if panel["type"] == "row":
            continue
        assert panel["fieldConfig"]["defaults"].get("unit"), f"{panel['title']}: no unit"
        if re.search(r"_ratio\b", " ".join(t["expr"] for t in panel["targets"])) and \
                "/" not in " ".join(t["expr"] for t in panel["targets"]):
            assert panel["fieldConfig"]["defaults"]["unit"] in {"percentunit"}, panel["title"]


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=NAMES)
def test_job_worker_variables_filter_every_query(path) -> None:
    d = load(path)
    names = {v["name"] for v in d["templating"]["list"]}
    assert {"datasource", "job", "tf_job", "worker"} <= names
    if path.name == "training-efficiency.json":
        assert {"device", "tracing"} <= names
    for q in dashboard_queries(path):
        for selector in re.findall(r"\btfobs_\w+\{([^}]*)\}", q.expr):
            assert 'job=~"$job"' in selector and 'tf_task=~"$worker"' in selector, q.where
        # Recording rules' series (tfobs:...) carry the job labels; job-wide ones no worker.
        for selector in re.findall(r"\btfobs:\w+\{([^}]*)\}", q.expr):
            assert 'job=~"$job"' in selector and 'tf_cluster=~"$tf_cluster"' in selector, q.where
        assert not re.search(r"\btfobs:\w+(?![\w{])", q.expr), f"{q.where}: unfiltered rule"


WORKERS = next(p for p in DASHBOARD_FILES if p.name == "workers.json")


def test_workers_dashboard_is_the_pod_viewer_over_the_same_steps() -> None:
    d = load(WORKERS)
    names = [v["name"] for v in d["templating"]["list"]]
    assert names.index("tf_cluster") < names.index("tf_job") < names.index("worker")
    by_title = {p["title"]: p for p in panels(d)}
    exprs = {t: " ".join(x["expr"] for x in p.get("targets", [])) for t, p in by_title.items()}
    # The pod viewer: each worker's breakdown by category, stacked, one bar per worker.
    pod = next(p for t, p in by_title.items() if t.startswith("Step-time breakdown per worker"))
    assert pod["type"] == "barchart" and pod["options"]["stacking"] == "normal"
    expr = exprs[pod["title"]]
    assert "tfobs_step_time_breakdown_seconds" in expr
    assert re.search(r"by \(tf_job, tf_task, local_rank, category\)", expr)
    join = next(t for t in pod["transformations"] if t["id"] == "joinByLabels")["options"]
    assert join["value"] == "category" and join["join"] == ["tf_job", "tf_task", "local_rank"]
    # ... over the same steps: the window's first and last step per worker next to it.
    steps = exprs["Window steps per worker"]
    assert "tfobs_window_first_step" in steps and "tfobs_window_last_step" in steps
    # Stragglers from the recording rules, which alerts.yml defines.
    used = set(re.findall(r"\btfobs:\w+", " ".join(exprs.values())))
    assert {"tfobs:worker_own_step_seconds", "tfobs:job_straggler_factor",
            "tfobs:job_slowest_worker_own_step_seconds"} <= used
    assert used <= recorded_names(), used - recorded_names()
    assert "tfobs_input_bound_verdict" in exprs["Input-bound verdict per worker"]


def test_exemplars_on_step_time_panel_link_to_tracing_datasource() -> None:
    d = load(next(p for p in DASHBOARD_FILES if p.name == "training-efficiency.json"))
    tracing = next(v for v in d["templating"]["list"] if v["name"] == "tracing")
    assert tracing["type"] == "datasource" and tracing["query"] in {"tempo", "jaeger"}
    step = next(p for p in panels(d)
                if p["type"] == "timeseries" and p["title"].startswith("Step time"))
    assert any(t.get("exemplar") for t in step["targets"])
    assert any("tfobs_step_duration_seconds_bucket" in t["expr"] for t in step["targets"])
    # The series are histogram_quantile results: they have no trace_id field for a data link
    # to read. The exemplar's own link comes from the datasource's exemplarTraceIdDestinations.
    links = step["fieldConfig"]["defaults"].get("links", [])
    assert not any("__data.fields.trace_id" in link["url"] for link in links)
    assert "exemplarTraceIdDestinations" in step["description"]


def test_every_promql_expression_parses() -> None:
    queries = all_queries()
    assert len(queries) > 60
    for q in queries:
        try:
            promql_parser.parse(substitute(q.expr))
        except Exception as e:  # the parser raises its own ValueError subclasses
            pytest.fail(f"{q.where}: {e}\n{q.expr}")


def test_parser_rejects_broken_promql() -> None:
    # The check above means something only if the parser refuses bad input.
    for bad in ("sum(rate(x[5m])", "tfobs_x{job=~}", "rate(tfobs_x[$__rate_interval])"):
        with pytest.raises(Exception):  # noqa: B017 - any parser error will do
            promql_parser.parse(bad)
