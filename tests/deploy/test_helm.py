"""The Helm chart, rendered by Helm's own template engine (helm-python-sdk binds Helm's Go
SDK), linted, and its manifests validated against the Kubernetes schemas.

kubernetes-validate has schemas for built-in kinds only. PodMonitor, ServiceMonitor and
PrometheusRule are prometheus-operator CRDs: their schema validation is skipped (only for
those kinds) and replaced by checks that mean more here: the PrometheusRule's spec passes
`promtool check rules` and equals dashboards/alerts.yml, the monitors point at the port and
path tfobs serves.
"""

from __future__ import annotations

import json
import pathlib
import re
import shutil
import subprocess
import tarfile

import pytest
import yaml

helm = pytest.importorskip("helm_python")
kv = pytest.importorskip("kubernetes_validate")

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "tfobs"
DASHBOARDS = ROOT / "dashboards"
CRD_KINDS = {"PodMonitor", "ServiceMonitor", "PrometheusRule"}
ALL_ON = {"collector": {"enabled": True}, "serviceMonitor": {"enabled": True},
          "prometheusRule": {"labels": {"release": "kube-prometheus-stack"}}}


def render(values: dict | None = None, name: str = "ml") -> list[dict]:
    chart = helm.Chart.load(CHART)
    out = chart.render(values or {}, name=name, namespace="training")
    docs = []
    for path, text in out.items():
        if path.endswith(".txt"):
            continue
        docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def test_lint_is_clean() -> None:
    report = helm.lint(CHART, strict=True, kube_version="v1.30.0")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []
    assert report["total_charts_linted"] == 1


def test_default_render_objects() -> None:
    kinds = sorted(d["kind"] for d in render())
    # Defaults: PodMonitor, PrometheusRule, one ConfigMap per dashboard; no collector.
    assert kinds == ["ConfigMap", "ConfigMap", "ConfigMap", "PodMonitor", "PrometheusRule"]


@pytest.mark.parametrize("values", [{}, ALL_ON], ids=["defaults", "all-enabled"])
def test_builtin_kinds_validate_against_kubernetes_schemas(values) -> None:
    version = kv.utils.latest_version()
    checked = 0
    for doc in render(values):
        assert doc["metadata"]["namespace"] == "training"
        assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == "ml"
        if doc["kind"] in CRD_KINDS:
            continue  # CRD: no schema in kubernetes-validate (see the module docstring)
        kv.utils.validate(doc, version, strict=True)
        checked += 1
    assert checked == (6 if values else 3)


@pytest.mark.parametrize("release", ["r" * 46, "x" * 47 + "-tfobs", "a" * 53])
def test_longest_release_names_give_every_object_its_own_valid_name(release: str) -> None:
    # Helm allows release names of up to 53 characters. Cut at 63 characters, the three
    # dashboards' ConfigMaps had all been "<release>-tfobs-das": one name for three objects.
    assert helm.validate_release_name(release) is None
    docs = render(ALL_ON, name=release)
    names = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert len(set(names)) == len(names) == 9, names
    for _kind, name in names:
        assert len(name) <= 63 and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name), name
    maps = [d["metadata"]["name"] for d in by_kind(docs, "ConfigMap")]
    for dashboard in ("training-efficiency", "input-pipeline", "workers"):
        assert sum(name.endswith(f"-dashboard-{dashboard}") for name in maps) == 1, maps
    (dep,) = by_kind(docs, "Deployment")
    (svc,) = by_kind(docs, "Service")
    assert dep["metadata"]["name"] == svc["metadata"]["name"]
    assert svc["metadata"]["name"].endswith("-collector")
    notes = helm.Chart.load(CHART).render(ALL_ON, name=release, namespace="training")
    notes = next(text for path, text in notes.items() if path.endswith("NOTES.txt"))
    assert f"http://{svc['metadata']['name']}.training:4317" in notes
    version = kv.utils.latest_version()
    for doc in docs:
        if doc["kind"] not in CRD_KINDS:
            kv.utils.validate(doc, version, strict=True)


def test_a_label_set_twice_is_written_once_with_the_more_specific_value() -> None:
    # values.yaml offers `release` both as a common label and as a monitor label. Written
    # twice, the manifests held the key twice (PyYAML and Helm keep the last, a strict
    # parser such as `kubectl apply`'s refuses the object); a label from --set as a number
    # or boolean made an object Kubernetes refuses.
    values = {**ALL_ON, "commonLabels": {"release": "common", "team": 7, "grafana_dashboard": "0",
                                         "spot": True},
              "monitorLabels": {"release": "kube-prometheus-stack"},
              "prometheusRule": {"labels": {"release": "rules"}}}
    out = helm.Chart.load(CHART).render(values, name="ml", namespace="training")
    docs = []
    for path, text in out.items():
        if path.endswith(".txt"):
            continue
        for doc in filter(None, yaml.compose_all(text)):
            labels = next(v for k, v in next(v for k, v in doc.value
                                             if k.value == "metadata").value
                          if k.value == "labels")
            keys = [k.value for k, _ in labels.value]
            assert len(keys) == len(set(keys)), (path, keys)
            docs.append(yaml.safe_load(yaml.serialize(doc)))
    release = {d["kind"]: d["metadata"]["labels"]["release"] for d in docs}
    assert release == {"PodMonitor": "kube-prometheus-stack", "ServiceMonitor":
                       "kube-prometheus-stack", "PrometheusRule": "rules",
                       "ConfigMap": "common", "Deployment": "common", "Service": "common"}
    for cm in by_kind(docs, "ConfigMap"):
        if "-dashboard-" in cm["metadata"]["name"]:
            assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"  # the sidecar's
    version = kv.utils.latest_version()
    for doc in docs:
        assert doc["metadata"]["labels"]["team"] == "7"
        assert doc["metadata"]["labels"]["spot"] == "true"
        assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == "ml"
        if doc["kind"] not in CRD_KINDS:
            kv.utils.validate(doc, version, strict=True)


def test_validator_rejects_a_broken_manifest() -> None:
    bad = by_kind(render(ALL_ON), "Deployment")[0]
    bad["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "4317"
    with pytest.raises(kv.utils.ValidationError):
        kv.utils.validate(bad, kv.utils.latest_version(), strict=True)


def test_prometheus_rule_is_the_shipped_alerts_and_passes_promtool(tmp_path) -> None:
    rule = by_kind(render(ALL_ON), "PrometheusRule")[0]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["spec"] == yaml.safe_load((DASHBOARDS / "alerts.yml").read_text())
    if shutil.which("promtool") is None:
        pytest.skip("promtool missing: scripts/test.sh installs it")
    path = tmp_path / "rule.yml"
    path.write_text(yaml.safe_dump(rule["spec"]))
    result = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    # Helm must not have eaten the rules' own {{ $labels }} templates.
    assert "{{ $labels.tf_job }}" in path.read_text()


def test_monitors_scrape_the_tfobs_port() -> None:
    docs = render(ALL_ON)
    pm = by_kind(docs, "PodMonitor")[0]["spec"]
    assert pm["selector"] == {"matchLabels": {"tfobs.io/scrape": "true"}}
    (ep,) = pm["podMetricsEndpoints"]
    assert (ep["port"], ep["path"], ep["interval"]) == ("tfobs-metrics", "/metrics", "30s")
    sm = by_kind(docs, "ServiceMonitor")[0]["spec"]
    assert sm["endpoints"][0]["port"] == "tfobs-metrics"
    custom = render({"podMonitor": {"jobLabel": "training.kubeflow.org/job-name",
                                    "interval": "15s"}})
    pm = by_kind(custom, "PodMonitor")[0]["spec"]
    assert pm["jobLabel"] == "training.kubeflow.org/job-name"
    assert pm["podMetricsEndpoints"][0]["interval"] == "15s"


@pytest.mark.parametrize("kind", ["podMonitor", "serviceMonitor"])
def test_both_monitors_take_https_and_basic_auth(kind: str) -> None:
    # tfobs with TFOBS_METRICS_TLS_CERT and TFOBS_METRICS_BASIC_AUTH answers a plain-HTTP
    # scrape with a refusal: the ServiceMonitor had no scheme, basicAuth or tlsConfig, so
    # behind a Service it could only scrape a tfobs without them.
    auth = {"username": {"name": "tfobs-scrape", "key": "user"},
            "password": {"name": "tfobs-scrape", "key": "password"}}
    tls = {"ca": {"secret": {"name": "tfobs-ca", "key": "ca.crt"}}, "serverName": "trainer"}
    docs = render({**ALL_ON, kind: {"enabled": True, "scheme": "https", "basicAuth": auth,
                                    "tlsConfig": tls}})
    spec = by_kind(docs, kind[0].upper() + kind[1:])[0]["spec"]
    (ep,) = spec["podMetricsEndpoints" if kind == "podMonitor" else "endpoints"]
    assert (ep["scheme"], ep["basicAuth"], ep["tlsConfig"]) == ("https", auth, tls)
    plain = by_kind(render(ALL_ON), kind[0].upper() + kind[1:])[0]["spec"]
    (ep,) = plain["podMetricsEndpoints" if kind == "podMonitor" else "endpoints"]
    assert ep["scheme"] == "http" and "basicAuth" not in ep and "tlsConfig" not in ep


def test_dashboard_configmaps_carry_the_dashboards_for_the_sidecar() -> None:
    maps = by_kind(render(), "ConfigMap")
    found = {}
    for cm in maps:
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["metadata"]["annotations"]["grafana_folder"] == "tfobs"
        ((key, text),) = cm["data"].items()
        found[key] = json.loads(text)
    for path in DASHBOARDS.glob("*.json"):
        assert found.pop(path.name) == json.loads(path.read_text())
    assert found == {}


def test_packaged_chart_carries_the_one_copy_of_dashboards_and_rules(tmp_path) -> None:
    # The chart's dashboards/ is a link to the repository's dashboards/ (Helm reads files
    # only inside the chart, and follows the link); `helm package` stores real files.
    assert (CHART / "dashboards").is_symlink()
    assert (CHART / "dashboards").resolve() == DASHBOARDS
    tracked = subprocess.run(["git", "ls-files", "*.json", "*alerts*.yml"], cwd=ROOT,
                             capture_output=True, text=True).stdout.split()
    copies = [t for t in tracked if not t.startswith(("dashboards/", "tests/"))]
    assert copies == [], "dashboards and rules live in dashboards/ only"
    packaged = helm.package(CHART, destination=tmp_path)
    with tarfile.open(packaged) as tar:
        files = {m.name.removeprefix("tfobs/dashboards/"): tar.extractfile(m).read()
                 for m in tar.getmembers() if m.name.startswith("tfobs/dashboards/")}
        assert all(m.isfile() for m in tar.getmembers())  # no link left in the package
    want = {p.name: p.read_bytes() for p in DASHBOARDS.glob("*.json")}
    want["alerts.yml"] = (DASHBOARDS / "alerts.yml").read_bytes()
    assert files == want  # nothing else (README, rule tests) travels with the chart


def test_collector_is_optional_and_forwards_traces() -> None:
    assert by_kind(render(), "Deployment") == []
    docs = render({"collector": {"enabled": True, "tracesEndpoint": "tempo:4317"}})
    (cfg,) = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("collector")]
    conf = yaml.safe_load(cfg["data"]["config.yaml"])
    assert conf["exporters"]["otlp"]["endpoint"] == "tempo:4317"
    assert conf["service"]["pipelines"]["traces"]["receivers"] == ["otlp"]
    assert conf["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"].endswith(":4317")
    (svc,) = by_kind(docs, "Service")
    assert {p["port"] for p in svc["spec"]["ports"]} == {4317, 4318}
    (dep,) = by_kind(docs, "Deployment")
    assert dep["spec"]["selector"]["matchLabels"].items() <= \
        dep["spec"]["template"]["metadata"]["labels"].items()
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()


@pytest.mark.parametrize("release", ["ml", "tfobs", "ml-tfobs-traces"])
def test_the_collector_endpoint_values_yaml_gives_is_its_service(release: str) -> None:
    # values.yaml said http://<release>-collector:4317: for a release named "ml" the
    # Service is ml-tfobs-collector, so pods set that way sent every span nowhere.
    text = (CHART / "values.yaml").read_text()
    (endpoint,) = re.findall(r"OTEL_EXPORTER_OTLP_ENDPOINT=(\S+) in", text)
    (alternative,) = re.findall(r"; (<release>-collector\.<namespace>) where", text)
    if "tfobs" in release:
        endpoint = f"http://{alternative}:4317"
    (svc,) = by_kind(render({"collector": {"enabled": True}}, name=release), "Service")
    assert endpoint.replace("<release>", release).replace("<namespace>", "training") == \
        f"http://{svc['metadata']['name']}.training:4317"


@pytest.mark.parametrize("endpoint", ["[fd00::1]:4317", "*tempo:4317", "tempo:4317 #2"])
def test_collector_endpoint_reaches_its_config_as_given(endpoint: str) -> None:
    # An IPv6 address is written in brackets: unquoted, YAML read it as a list and the
    # collector's config did not parse.
    docs = render({"collector": {"enabled": True, "tracesEndpoint": endpoint}})
    (cfg,) = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("collector")]
    assert yaml.safe_load(cfg["data"]["config.yaml"])["exporters"]["otlp"]["endpoint"] == endpoint


def test_bad_values_fail_to_render() -> None:
    # A port given as a bare number instead of {name, path}: Helm's engine refuses it.
    with pytest.raises(helm.HelmError):
        helm.Chart.load(CHART).render({"metricsPort": 9464}, name="ml", namespace="training")
