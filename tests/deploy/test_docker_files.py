"""The Docker files, checked without a Docker engine: the compose file parses and every file
it mounts exists, Prometheus's config passes `promtool check config` with exemplar storage
on, Grafana is provisioned with the dashboards and an exemplar link to Tempo, the collector
forwards traces to Tempo, and the Dockerfile copies what exists and serves the metrics port."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"


def compose() -> dict:
    return yaml.safe_load((DOCKER / "docker-compose.yml").read_text())


def mounts(service: dict) -> dict[str, pathlib.Path]:
    """container path -> host path, for bind mounts written as `host:container[:ro]`."""
    out = {}
    for volume in service.get("volumes", []):
        host, container = volume.split(":")[:2]
        out[container] = (DOCKER / host).resolve()
    return out


def test_compose_services_and_mounted_files_exist() -> None:
    services = compose()["services"]
    assert set(services) == {"trainer", "prometheus", "grafana", "otel-collector", "tempo"}
    n = 0
    for name, service in services.items():
        for container, host in mounts(service).items():
            assert host.exists(), f"{name}: {host} (mounted at {container}) is missing"
            n += 1
        for dep in service.get("depends_on", []):
            assert dep in services
    assert n >= 7
    build = services["trainer"]["build"]
    assert ((DOCKER / build["context"]) / build["dockerfile"]).resolve().is_file()


def test_prometheus_config_passes_promtool_with_exemplars(tmp_path) -> None:
    if shutil.which("promtool") is None:
        pytest.skip("promtool missing: scripts/test.sh installs it")
    prom = compose()["services"]["prometheus"]
    assert "--enable-feature=exemplar-storage" in prom["command"]
    # Lay the files out as the container sees them, then check that layout.
    layout = mounts(prom)
    for container, host in layout.items():
        shutil.copy(host, tmp_path / pathlib.PurePosixPath(container).name)
    config = tmp_path / "prometheus.yml"
    result = subprocess.run(["promtool", "check", "config", str(config)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 1 rule files found" in result.stdout + result.stderr
    doc = yaml.safe_load(config.read_text())
    (job,) = doc["scrape_configs"]
    trainer_port = compose()["services"]["trainer"]["ports"][0].split(":")[1]
    assert job["static_configs"][0]["targets"] == [f"trainer:{trainer_port}"]


def test_promtool_rejects_a_broken_config(tmp_path) -> None:
    if shutil.which("promtool") is None:
        pytest.skip("promtool missing: scripts/test.sh installs it")
    bad = tmp_path / "prometheus.yml"
    bad.write_text("scrape_configs:\n  - job_name: x\n    scrape_interval: often\n")
    result = subprocess.run(["promtool", "check", "config", str(bad)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode != 0


def test_grafana_is_provisioned_with_dashboards_and_trace_links() -> None:
    grafana = compose()["services"]["grafana"]
    layout = mounts(grafana)
    ds_dir = layout["/etc/grafana/provisioning/datasources"]
    datasources = {d["uid"]: d for f in ds_dir.glob("*.yml")
                   for d in yaml.safe_load(f.read_text())["datasources"]}
    assert datasources["prometheus"]["type"] == "prometheus"
    assert datasources["tempo"]["type"] == "tempo"
    links = datasources["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
    assert links == [{"name": "trace_id", "datasourceUid": "tempo"}]
    # A service map needs Tempo's metrics-generator: on only where Tempo runs one.
    tempo_conf = (ROOT / "docker" / "tempo").glob("*.y*ml")
    generator = any("metrics_generator" in (yaml.safe_load(f.read_text()) or {})
                    for f in tempo_conf)
    assert ("serviceMap" in datasources["tempo"].get("jsonData", {})) == generator
    prov_dir = layout["/etc/grafana/provisioning/dashboards"]
    (provider,) = yaml.safe_load((prov_dir / "dashboards.yml").read_text())["providers"]
    dash_dir = layout[provider["options"]["path"]]
    assert dash_dir.resolve() == ROOT / "dashboards"  # the one home of the dashboards
    rules = mounts(compose()["services"]["prometheus"])["/etc/prometheus/alerts.yml"]
    assert rules.resolve() == ROOT / "dashboards" / "alerts.yml"
    titles = {json.loads(p.read_text())["title"] for p in dash_dir.glob("*.json")}
    assert len(titles) == 3 and all(t.startswith("tfobs / ") for t in titles)
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (dash_dir / pathlib.PurePosixPath(home).name).is_file()


def test_collector_forwards_traces_to_tempo() -> None:
    services = compose()["services"]
    col = yaml.safe_load(mounts(services["otel-collector"])["/etc/otelcol/config.yaml"].read_text())
    pipeline = col["service"]["pipelines"]["traces"]
    assert pipeline["receivers"] == ["otlp"]
    for stage in ("receivers", "processors", "exporters"):
        for name in pipeline[stage]:
            assert name in col[stage], f"{stage} {name} is used but not defined"
    (exporter,) = pipeline["exporters"]
    assert col["exporters"][exporter]["endpoint"] == "tempo:4317"
    tempo = yaml.safe_load(mounts(services["tempo"])["/etc/tempo/tempo.yaml"].read_text())
    assert tempo["distributor"]["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"].endswith(
        ":4317")
    env = services["trainer"]["environment"]
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4317"


def test_dockerfile_copies_what_exists_and_serves_metrics() -> None:
    lines = [ln.strip() for ln in (DOCKER / "Dockerfile").read_text().splitlines()]
    instructions = [ln.split()[0] for ln in lines if ln and not ln.startswith("#")
                    and ln.split()[0].isupper()]
    assert instructions.count("FROM") == 1 and "CMD" in instructions
    for ln in lines:
        if ln.startswith("COPY "):
            for src in ln.split()[1:-1]:
                assert (ROOT / src).exists(), f"Dockerfile copies missing {src}"
    assert "EXPOSE 9464" in lines
    assert any("TFOBS_METRICS_BIND=0.0.0.0" in ln for ln in lines)
    assert any(ln.startswith("USER ") and "root" not in ln for ln in lines)
    assert any("pip install" in ln for ln in lines)


def test_dockerfile_build_context_builds_the_compiled_reader(tmp_path) -> None:
    # The image's `pip install .` sees only what the Dockerfile copies. Without setup.py
    # the wheel had no `tfobs.xspace._wire`: every window in the image was reduced by the
    # slower numpy reader, with nothing said.
    pytest.importorskip("build")
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: the compiled reader is optional and not built")
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    for line in (DOCKER / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            *sources, dest = line.split()[1:]
            for src in sources:
                target = ctx / dest / src if dest.endswith("/") else ctx / dest
                if (ROOT / src).is_dir():
                    shutil.copytree(ROOT / src, target, ignore=shutil.ignore_patterns(
                        "*.so", "__pycache__"))
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(ROOT / src, target)
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path),
                    str(ctx)], check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("tfobs-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    assert any(n.startswith("tfobs/xspace/_wire.") and n.endswith(".so") for n in names), names
