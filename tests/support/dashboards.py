"""Reading the shipped dashboards and alert rules: every PromQL expression, with Grafana's
template variables replaced so Prometheus (or a parser) can take it."""

from __future__ import annotations

import json
import pathlib
import re
from collections.abc import Iterator
from dataclasses import dataclass

import yaml

DASHBOARDS = pathlib.Path(__file__).resolve().parents[2] / "dashboards"
DASHBOARD_FILES = tuple(sorted(DASHBOARDS.glob("*.json")))
RULES = DASHBOARDS / "alerts.yml"

# What Grafana puts in place of its built-in interval variables, for a one-hour view.
BUILTINS = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h"}
_VAR = re.compile(r"\$\{?(\w+)\}?")


@dataclass(frozen=True)
class Query:
    where: str  # "<file>: <panel title> [<refId>]"
    expr: str  # as written, with template variables


def load(path: pathlib.Path) -> dict:
    return json.loads(path.read_text())


def panels(dashboard: dict) -> Iterator[dict]:
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])  # collapsed rows keep theirs inside


def dashboard_queries(path: pathlib.Path) -> list[Query]:
    out = []
    for panel in panels(load(path)):
        for target in panel.get("targets", []):
            if target.get("expr"):
                where = f"{path.name}: {panel['title']} [{target.get('refId')}]"
                out.append(Query(where, target["expr"]))
    return out


def variable_queries(path: pathlib.Path) -> list[Query]:
    """label_values(<selector>, label) queries of the template variables: their selectors."""
    out = []
    for var in load(path)["templating"]["list"]:
        if var["type"] != "query":
            continue
        q = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q.strip())
        if m:
            out.append(Query(f"{path.name}: variable {var['name']}", m.group(1)))
    return out


def rule_queries() -> list[Query]:
    doc = yaml.safe_load(RULES.read_text())
    return [Query(f"alerts.yml: {r.get('alert') or r.get('record')}", r["expr"])
            for g in doc["groups"] for r in g["rules"]]


def recorded_names() -> set[str]:
    """Series the recording rules in alerts.yml create (`tfobs:...`): not on /metrics."""
    doc = yaml.safe_load(RULES.read_text())
    return {r["record"] for g in doc["groups"] for r in g["rules"] if "record" in r}


def all_queries() -> list[Query]:
    out = rule_queries()
    for path in DASHBOARD_FILES:
        out += dashboard_queries(path) + variable_queries(path)
    return out


def substitute(expr: str, values: dict[str, str] | None = None) -> str:
    """Grafana's substitution: built-in intervals, then the dashboard's variables (default
    `.*`, which is what "All" sends for a regex matcher)."""
    for name, value in BUILTINS.items():
        expr = expr.replace(name, value)
    values = values or {}
    return _VAR.sub(lambda m: values.get(m.group(1), ".*"), expr)


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (parsed, not pattern-matched)."""
    import promql_parser

    names: set[str] = set()

    def visit(node: object) -> None:
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            names.add(node.name)

    promql_parser.walk(promql_parser.parse(substitute(expr)), visit)
    return names


# What only a GPU machine produces: NVML samples and TensorFlow's GPU memory info.
GPU_SOURCE_METRICS = frozenset({
    "tfobs_gpu_utilization_ratio", "tfobs_gpu_memory_used_bytes", "tfobs_gpu_memory_total_bytes",
    "tfobs_gpu_power_watts", "tfobs_gpu_temperature_celsius", "tfobs_gpu_sm_clock_hertz",
    "tfobs_gpu_memory_clock_hertz", "tfobs_gpu_throttle_active", "tfobs_device_memory_bytes",
    "tfobs_device_memory_peak_bytes",
    # NVML GPM, Hopper and newer
    "tfobs_gpu_tensor_active_ratio", "tfobs_gpu_tensor_pipe_active_ratio",
    "tfobs_gpu_sm_active_ratio", "tfobs_gpu_sm_occupancy_ratio",
    "tfobs_gpu_dram_bandwidth_ratio", "tfobs_gpu_math_pipe_active_ratio",
})


class _SyntheticNvml:
    """Stands in for NvmlSampler on machines without a GPU: fixed, plausible H100 samples."""

    available = True
    gpm_available = True

    def latest(self):
        from tfobs.sources.gpm import GpmFigures
        from tfobs.sources.nvml import GpuSample

        gpm = GpmFigures(tensor_active_ratio=0.748, tensor_pipe_ratio=(("hmma", 0.748),),
                         sm_active_ratio=0.763, sm_occupancy_ratio=0.113,
                         dram_bandwidth_ratio=0.143, math_pipe_ratio=(("fp32", 0.0),),
                         interval_s=1.0)

        return (GpuSample(index=0, uuid="GPU-00000000-synthetic", name="synthetic H100",
                          device="/device:GPU:0", utilization_ratio=0.42,
                          memory_used_bytes=30 << 30, memory_total_bytes=80 << 30,
                          power_watts=350.0, temperature_celsius=61.0, sm_clock_hertz=1.98e9,
                          memory_clock_hertz=2.6e9, throttle_reasons=("sw_power_cap",),
                          gpm=gpm),)


class _SyntheticTfMemory:
    def latest(self):
        from tfobs.sources.tfmemory import DeviceMemorySample

        return (DeviceMemorySample(device="/device:GPU:0", current_bytes=12 << 30,
                                   peak_bytes=20 << 30),)


def live_exporter(summary, port: int, tf_job: str = "exporter", gpu_sources: bool = False):
    """The real PrometheusExporter serving on 127.0.0.1:`port`: a real capture's summary
    published, steps, a window, a capture error and a dropped span counted in its health
    ledger as the runtime counts them. `gpu_sources=True` adds synthetic NVML and TensorFlow
    GPU memory samples (there is no GPU on this machine)."""
    from tfobs.config import Config
    from tfobs.export.prometheus import PrometheusExporter
    from tfobs.health import HealthLedger
    from tfobs.runtime.info import info_labels
    from tfobs.window import WindowRecord

    health = HealthLedger(info_labels(False))
    sources = {"nvml": _SyntheticNvml(), "tfmemory": _SyntheticTfMemory()} if gpu_sources else {}
    exporter = PrometheusExporter(Config.load(metrics_port=port, metrics_bind="127.0.0.1"),
                                  {"tf_job": tf_job, "tf_task": "0"}, health, **sources)
    window = WindowRecord(index=0)
    for i in range(20):
        exporter.step_sink.observe(0.05 + 0.001 * i, window.exemplar(i))
    health.steps = 20
    health.count_window("captured", exemplar=window.exemplar())
    health.count_error("capture")
    health.count_dropped("spans")
    health.observe_capture(0.3, 2_000_000)
    health.observe_reduce(0.05)
    health.set_cost(0.008, 0.004)
    exporter.publish(summary, window)
    exporter.start()
    return exporter
