"""What a newcomer reads on the overview page and the offline report, in a real headless
Chromium: a CPU job's header names no device count, the estimated overhead stands against
the budget with why it may be over it, the advice stays inside its column, and
`tfobs analyze --html` names its capture in the title and says where it wrote the page."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

import tfobs
from tests.export.test_page import HEALTH, load, text_of
from tests.export.test_page import browser as browser  # the fixture
from tfobs.config import Config
from tfobs.export.page import render_page
from tfobs.export.prometheus import PrometheusExporter
from tfobs.health import HealthLedger

ROOT = pathlib.Path(__file__).resolve().parents[2]
CAPTURES = ROOT / "tests" / "data" / "captures"
CPU = CAPTURES / "generated__tf2.20cpu__custom_loop_compute_bfc.xplane.pb"
GPU = CAPTURES / "tracelens__mi300_jax08_gemm__tw003.xplane.pb"
# `tfobs demo --input-bound`: three rules fire, with long stage names and evidence.
ADVICE = CAPTURES / "advice__demo_input_bound.xplane.pb"


@pytest.mark.slow  # starts chromium
def test_cpu_header_names_no_device_count(browser, tmp_path) -> None:
    cpu = tfobs.analyze(CPU)
    assert cpu.environment.device_count == 0  # what read "CPU × 0" before
    header = text_of(load(browser, tmp_path, render_page(cpu, HEALTH)), "header")
    assert "× 0" not in header and "· CPU" in header, header
    gpu = tfobs.analyze(GPU)
    header = text_of(load(browser, tmp_path, render_page(gpu, HEALTH)), "header")
    assert f"GPU × {gpu.environment.device_count}" in header, header


@pytest.mark.slow  # starts chromium
def test_overhead_stands_against_the_budget_with_why(browser, tmp_path) -> None:
    summary = tfobs.analyze(CPU)
    over = {**HEALTH, "estimated_overhead_ratio": 0.036, "overhead_budget": 0.01}
    b = load(browser, tmp_path, render_page(summary, over))
    health = text_of(b, "#health")
    assert "Estimated overhead 3.6 % over the 1.0 % budget (overhead_budget)" in health, health
    why = text_of(b, "#over-budget")
    assert "the first window is taken whatever it costs" in why
    assert "later windows wait until the estimate is back under the budget" in why
    under = {**HEALTH, "estimated_overhead_ratio": 0.004, "overhead_budget": 0.01}
    health = text_of(load(browser, tmp_path, render_page(summary, under)), "#health")
    assert "Estimated overhead 0.4 % of the 1.0 % budget (overhead_budget)" in health, health


def test_the_live_page_is_given_the_budget() -> None:
    cfg = Config.load(environ={}, metrics_port=-1, overhead_budget=0.02)
    exporter = PrometheusExporter(cfg, cfg.identity(), HealthLedger())
    assert exporter.page_health()["overhead_budget"] == 0.02


@pytest.mark.slow  # starts chromium
@pytest.mark.parametrize("width", [900, 1400])
def test_advice_stays_inside_the_verdict_column(browser, tmp_path, width) -> None:
    from selenium.webdriver.common.by import By

    summary = tfobs.analyze(ADVICE)
    assert len(summary.advice) >= 3
    browser.set_window_size(width, 1800)
    try:
        b = load(browser, tmp_path, render_page(summary, HEALTH))
        section = b.find_element(By.CSS_SELECTOR, "#verdict")
        right = section.rect["x"] + section.rect["width"]
        main = b.find_element(By.CSS_SELECTOR, "main")
        assert right <= main.rect["x"] + main.rect["width"] + 1  # the column fits the page
        items = b.find_elements(By.CSS_SELECTOR, "#verdict .advice li")
        assert len(items) >= 3
        for li in items:
            assert li.rect["x"] + li.rect["width"] <= right + 1, li.text[:80]
        # Nothing spills out of the section either (its content is as wide as its box).
        assert b.execute_script(
            "const s = document.querySelector('#verdict'); return s.scrollWidth <= "
            "s.clientWidth;")
    finally:
        browser.set_window_size(1400, 1800)


@pytest.mark.slow  # starts chromium
def test_analyze_html_is_titled_for_its_capture_and_says_where_it_wrote(
        browser, tmp_path) -> None:
    from selenium.webdriver.common.by import By

    out = tmp_path / "report.html"
    proc = subprocess.run([sys.executable, "-m", "tfobs.cli", "analyze", str(CPU), "--html",
                           str(out)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == f"tfobs analyze: wrote {out}\n"
    assert "tfobs analyze " in proc.stdout  # the table still goes to stdout
    browser.get(out.as_uri())
    assert browser.title == f"tfobs report: {CPU.name}"
    assert browser.find_element(By.CSS_SELECTOR, "header h1").text == \
        f"tfobs report: {CPU.name}"
    assert browser.find_element(By.CSS_SELECTOR, "#overview h2").text == f"Capture {CPU.name}"
    assert "Latest profile window" not in browser.find_element(By.TAG_NAME, "body").text
