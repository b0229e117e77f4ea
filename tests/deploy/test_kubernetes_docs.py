"""The chart is scraped and rule-loaded beside kube-prometheus-stack, and
the Grafana and Kubernetes pages (docs/grafana.md, docs/kubernetes.md) work as written
(rendered by Helm's own engine, validated against the Kubernetes schemas; nothing here
needs a cluster or Docker)."""

from __future__ import annotations

import json
import pathlib
import re
import shlex

import pytest
import yaml

helm = pytest.importorskip("helm_python")
kv = pytest.importorskip("kubernetes_validate")

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "tfobs"
# The pages under docs/ hold the sections the README once did.
DOCS = "".join(p.read_text() for p in sorted((ROOT / "docs").glob("*.md")))
MONITOR_KINDS = {"PodMonitor", "ServiceMonitor", "PrometheusRule"}


def section(name: str) -> str:
    m = re.search(rf"<!-- section: {name}\b.*?-->(.*?)<!-- /section: {name} -->", DOCS, re.S)
    assert m, name
    return m.group(1)


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def render(values: dict) -> tuple[list[dict], str]:
    out = helm.Chart.load(CHART).render(values, name="tfobs", namespace="monitoring")
    notes = "".join(t for p, t in out.items() if p.endswith("NOTES.txt"))
    docs = [d for p, t in out.items() if not p.endswith(".txt")
            for d in yaml.safe_load_all(t) if d]
    return docs, notes


def set_values(command: str) -> dict:
    """`--set a.b=c` arguments of a helm command line as a values tree."""
    args = shlex.split(command)
    values: dict = {}
    for i, arg in enumerate(args):
        if arg == "--set":
            key, value = args[i + 1].split("=", 1)
            *path, leaf = key.split(".")
            node = values
            for part in path:
                node = node.setdefault(part, {})
            node[leaf] = value
    return values


def test_monitor_labels_reach_monitors_and_rules_only() -> None:
    docs, _ = render({"monitorLabels": {"release": "kps"}, "serviceMonitor": {"enabled": True},
                      "prometheusRule": {"labels": {"team": "ml"}}})
    kinds = {d["kind"] for d in docs}
    assert MONITOR_KINDS <= kinds
    for d in docs:
        labels = d["metadata"]["labels"]
        assert (labels.get("release") == "kps") == (d["kind"] in MONITOR_KINDS), d["kind"]
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    assert rule["metadata"]["labels"]["team"] == "ml"
    # Both set the same key: one label, prometheusRule.labels wins, the YAML stays valid.
    docs, _ = render({"monitorLabels": {"release": "a"},
                      "prometheusRule": {"labels": {"release": "b"}}})
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    assert rule["metadata"]["labels"]["release"] == "b"


def test_notes_warn_when_kube_prometheus_stack_would_not_select_the_chart() -> None:
    _, notes = render({})
    assert "WARNING" in notes and "monitorLabels.release" in notes
    _, notes = render({"monitorLabels": {"release": "kube-prometheus-stack"}})
    assert "WARNING" not in notes


def test_readme_helm_install_is_selected_by_kube_prometheus_stack() -> None:
    (command,) = [line for b in blocks(section("kubernetes"), "bash") for line in b.splitlines()
                  if line.startswith("helm install")]
    values = set_values(command)
    docs, notes = render(values)
    monitors = [d for d in docs if d["kind"] in MONITOR_KINDS]
    assert {d["kind"] for d in monitors} == {"PodMonitor", "PrometheusRule"}
    # kube-prometheus-stack's default selectors: matchLabels {release: <its release>}.
    assert all(d["metadata"]["labels"]["release"] == "kube-prometheus-stack" for d in monitors)
    assert "WARNING" not in notes


def test_readme_training_job_validates_and_is_selected_by_the_podmonitor() -> None:
    (manifest,) = [yaml.safe_load(b) for b in blocks(section("kubernetes"), "yaml")
                   if "kind: Job" in b]
    kv.utils.validate(manifest, kv.utils.latest_version(), strict=True)
    docs, _ = render({})
    (pm,) = [d for d in docs if d["kind"] == "PodMonitor"]
    pod = manifest["spec"]["template"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    (container,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert ports[endpoint["port"]] == int(env["TFOBS_METRICS_PORT"])


def test_readme_exemplar_setting_names_the_label_tfobs_puts_on_exemplars() -> None:
    (values,) = [yaml.safe_load(b) for b in blocks(section("kubernetes"), "yaml")
                 if "exemplarTraceIdDestinations" in b]
    dest = values["grafana"]["sidecar"]["datasources"]["exemplarTraceIdDestinations"]
    from tfobs.window import WindowRecord

    exemplar = WindowRecord(index=0, start_ns=0, end_ns=1).exemplar(3)
    assert dest["traceIdLabelName"] in exemplar
    # The compose stack's datasource uses the same label and the Tempo uid docs/kubernetes.md names.
    ds = yaml.safe_load((ROOT / "docker/grafana/provisioning/datasources/datasources.yml")
                        .read_text())["datasources"]
    prom = next(d for d in ds if d["type"] == "prometheus")
    assert prom["jsonData"]["exemplarTraceIdDestinations"] == [
        {"name": dest["traceIdLabelName"], "datasourceUid": dest["datasourceUid"]}]


def test_readme_grafana_tour_matches_the_compose_stack_and_dashboards() -> None:
    tour = section("grafana-tour")
    (command,) = blocks(tour, "bash")
    compose_file = ROOT / shlex.split(command)[3]
    compose = yaml.safe_load(compose_file.read_text())
    assert "3000:3000" in compose["services"]["grafana"]["ports"]
    assert "http://127.0.0.1:3000" in tour
    for path in (ROOT / "dashboards").glob("*.json"):
        title = json.loads(path.read_text())["title"]
        assert f"**{title}**" in tour, title
