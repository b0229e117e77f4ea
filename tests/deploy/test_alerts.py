"""The alert rules load in Prometheus's own checker and pass their promtool unit tests."""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest
import yaml

DASHBOARDS = pathlib.Path(__file__).resolve().parents[2] / "dashboards"
RULES = DASHBOARDS / "alerts.yml"
RULE_TESTS = DASHBOARDS / "tests" / "alerts_test.yml"

pytestmark = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool missing: scripts/test.sh installs it"
)


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120)


def _alerts() -> list[dict]:
    doc = yaml.safe_load(RULES.read_text())
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


def test_promtool_check_rules() -> None:
    result = _promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    doc = yaml.safe_load(RULES.read_text())
    count = sum(len(g["rules"]) for g in doc["groups"])  # alerts and recording rules
    assert f"SUCCESS: {count} rules found" in result.stdout


def test_promtool_test_rules() -> None:
    result = _promtool("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_fires_in_a_case_and_is_checked_quiet_in_another() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired: set[str] = set()
    quiet: set[str] = set()
    for case in tests:
        for check in case.get("alert_rule_test", []):
            (fired if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {r["alert"] for r in _alerts()}
    assert names - fired == set(), "alerts with no firing test case"
    assert names - quiet == set(), "alerts with no test case where they must stay quiet"
    case_names = " ".join(c["name"] for c in tests)
    assert "restart" in case_names and "short" in case_names


def test_every_alert_says_what_to_do() -> None:
    for rule in _alerts():
        ann = rule["annotations"]
        assert ann.get("summary") and len(ann.get("description", "")) > 100, rule["alert"]
        assert ann["runbook"] == f"docs/dashboards.md#runbook-one-line-per-alert: {rule['alert']}"
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}
        assert rule.get("for"), f"{rule['alert']} must hold for a duration"


def test_docs_have_a_runbook_line_per_alert() -> None:
    readme = (DASHBOARDS.parent / "docs" / "dashboards.md").read_text()
    start = readme.index("<!-- section: dashboards")
    section = readme[start : readme.index("<!-- /section: dashboards -->", start)]
    for rule in _alerts():
        assert f"`{rule['alert']}`" in section, f"the runbook misses {rule['alert']}"


def test_fixes_from_the_tensorflow_guides_are_in_the_annotations() -> None:
    text = {r["alert"]: r["annotations"]["description"] for r in _alerts()}
    assert "prefetch(tf.data.AUTOTUNE)" in text["TfobsInputBoundHigh"]
    assert "TF_GPU_THREAD_MODE=gpu_private" in text["TfobsKernelLaunchBound"]
    assert "jit_compile=True" in text["TfobsKernelLaunchBound"]
    assert "mixed_float16" in text["TfobsTensorCoreEligibleUnused"]
    assert "multiples of 8" in text["TfobsTensorCoreEligibleUnused"]


def test_advice_rule_annotations_name_real_rule_ids() -> None:
    from tfobs.analysis.advice import RULE_IDS

    named = {r["alert"]: r["annotations"].get("advice_rules", "") for r in _alerts()}
    for alert, rules in named.items():
        for rule in filter(None, (x.strip() for x in rules.split(","))):
            assert rule in RULE_IDS, f"{alert} names unknown advice rule {rule}"
    assert "tfdata_map_serial" in named["TfobsInputBoundHigh"]
    assert "kernel_launch_bound" in named["TfobsKernelLaunchBound"]
    assert "tensor_core_unused" in named["TfobsTensorCoreEligibleUnused"]
