"""The overview page, rendered from real captures' summaries and loaded in a real headless
Chromium (Debian's chromium + chromedriver through Selenium): what a user sees."""

from __future__ import annotations

import pathlib
import shutil
import tempfile

import pytest

import tfobs
from tfobs.export.page import render_page

CAPTURES = pathlib.Path(__file__).parents[1] / "data" / "captures"
INPUT_BOUND = CAPTURES / "generated__tf2.20cpu__tfkeras_fit.xplane.pb"
BFC = CAPTURES / "generated__tf2.20cpu__custom_loop_compute_bfc.xplane.pb"
GPU = CAPTURES / "tracelens__mi300_jax08_gemm__tw003.xplane.pb"

HEALTH = {
    "identity": {"tf_job": "trainer", "tf_task": "3"},
    "info": {"version": tfobs.__version__},
    "steps_observed": 1234,
    "windows": {"captured": 4, "skipped_busy": 1},
    "errors": {"capture": 2},
    "dropped": {},
    "duty_cycle_ratio": 0.008,
    "estimated_overhead_ratio": 0.004,
}


@pytest.fixture(scope="module")
def browser():
    chromium = shutil.which("chromium")
    driver_bin = shutil.which("chromedriver")
    if not (chromium and driver_bin):
        pytest.skip("chromium/chromedriver missing: scripts/test.sh installs them")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="tfobs-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for flag in ("--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                 f"--user-data-dir={profile}", "--window-size=1400,1800"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(driver_bin), options=opts)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def load(browser, tmp_path: pathlib.Path, page: str):
    path = tmp_path / "overview.html"
    path.write_text(page, encoding="utf-8")
    browser.get(path.as_uri())
    return browser


def text_of(browser, css: str) -> str:
    from selenium.webdriver.common.by import By

    return browser.find_element(By.CSS_SELECTOR, css).text


@pytest.mark.slow  # starts chromium and chromedriver
def test_input_bound_capture_page_shows_step_time_breakdown_and_verdict(browser, tmp_path):
    from selenium.webdriver.common.by import By

    summary = tfobs.analyze(INPUT_BOUND)
    b = load(browser, tmp_path, render_page(summary, HEALTH))
    assert b.title == "tfobs overview"
    assert "tf_job=trainer tf_task=3" in text_of(b, "header")
    step_ms = f"{summary.steps.mean_s * 1e3:.2f} ms"
    assert text_of(b, "#kpi-step-time .v") == step_ms
    assert text_of(b, "#kpi-steps .v") == str(summary.steps.count)
    assert text_of(b, "#kpi-outside-steps .v") == f"{summary.steps.outside_ratio * 100:.1f} %"
    verdict = text_of(b, "#verdict")
    assert "highly input-bound" in verdict and "HIGHLY input-bound" in verdict
    # The breakdown bar draws each category with its share as width; input dominates.
    segments = b.find_elements(By.CSS_SELECTOR, "#breakdown .bar span")
    widths = {s.get_attribute("data-category"): s.size["width"] for s in segments}
    bar_width = b.find_element(By.CSS_SELECTOR, "#breakdown .bar").size["width"]
    assert max(widths, key=widths.get) == "input"
    assert widths["input"] == pytest.approx(bar_width * summary.breakdown_ratio["input"], abs=3)
    ops = text_of(b, "#top-ops")
    assert summary.ops.top[0].name in ops
    health = text_of(b, "#health")
    assert "captured 4" in health and "capture 2" in health and "0.8 %" in health
    assert b.find_elements(By.CSS_SELECTOR, "#kernels") == []  # CPU capture: no kernels
    b.save_screenshot(str(pathlib.Path(tempfile.gettempdir()) / "tfobs_page_input_bound.png"))


@pytest.mark.slow  # starts chromium and chromedriver
def test_gpu_capture_page_shows_kernels_and_devices(browser, tmp_path):
    summary = tfobs.analyze(GPU)
    b = load(browser, tmp_path, render_page(summary))
    kernels = text_of(b, "#kernels")
    top = max(summary.kernels.items, key=lambda k: k.total_s)
    assert top.name[:40] in kernels
    devices = text_of(b, "#devices")
    assert summary.devices[0].device in devices and "Idle: launch" in devices
    b.save_screenshot(str(pathlib.Path(tempfile.gettempdir()) / "tfobs_page_gpu.png"))


@pytest.mark.slow  # starts chromium and chromedriver
def test_memory_section_from_bfc_capture(browser, tmp_path):
    summary = tfobs.analyze(BFC)
    assert summary.memory, "the BFC capture records allocator events"
    b = load(browser, tmp_path, render_page(summary))
    memory = text_of(b, "#memory")
    assert summary.memory[0].allocator in memory and "Fragmentation" in memory


@pytest.mark.slow  # starts chromium and chromedriver
def test_no_window_yet_and_hostile_names_are_escaped(browser, tmp_path):
    from selenium.webdriver.common.by import By

    b = load(browser, tmp_path, render_page(None, {"identity": {"tf_job": "<script>x</script>",
                                                                "tf_task": "0"}}))
    assert "No profile window yet" in b.find_element(By.TAG_NAME, "main").text
    assert "<script>x</script>" in text_of(b, "header")  # shown as text, not run
    assert b.find_elements(By.CSS_SELECTOR, "header script") == []


def test_page_is_self_contained():
    page = render_page(tfobs.analyze(GPU), HEALTH)
    for needle in ("<script src", "<link ", "http://", "https://", "@import", "url("):
        assert needle not in page
    assert page.startswith("<!DOCTYPE html>")


@pytest.mark.slow  # starts chromium and chromedriver
def test_metrics_server_serves_the_page_at_root(browser):
    from tests.support.prometheus_server import free_port
    from tfobs.export import replay

    summary = tfobs.analyze(INPUT_BOUND)
    port = free_port()
    server = replay.start([summary], port)
    try:
        browser.get(f"http://127.0.0.1:{port}/")
        assert browser.title == "tfobs overview"
        assert "tf_job=replay tf_task=0" in text_of(browser, "header")
        assert "highly input-bound" in text_of(browser, "#verdict")
        assert "captured 1" in text_of(browser, "#health")
    finally:
        server.shutdown(2.0)


@pytest.mark.slow  # starts chromium and chromedriver
def test_input_wait_between_steps_has_a_kpi_of_its_own(browser, tmp_path):
    # `for batch in dataset:` with the marker inside: the input-bound KPI reads 0 % while a
    # quarter of the step period is input wait between the markers.
    summary = tfobs.analyze(CAPTURES / "generated__tf2.21cpu__for_loop_slow_input.xplane.pb")
    b = load(browser, tmp_path, render_page(summary, HEALTH))
    share = summary.steps.input_between_s / summary.steps.interval_s
    assert share > 0.05 and summary.input_bound.ratio < 0.01
    assert text_of(b, "#kpi-input-between .v") == f"{share * 100:.1f} %"
    assert "Input wait between steps" in text_of(b, "#kpi-input-between")
    b = load(browser, tmp_path, render_page(tfobs.analyze(INPUT_BOUND), HEALTH))
    assert not b.find_elements("css selector", "#kpi-input-between")  # fetched in the step


def test_control_characters_in_names_never_reach_the_page_raw():
    # A capture's names are the job's: an ANSI escape or a NUL in an op name is shown as
    # its code, not written into the page (markup is escaped already).
    import dataclasses

    s = tfobs.analyze(GPU)
    top = s.ops.top[0]
    hostile = dataclasses.replace(top, name="op\x1b[31mred\x00<b>")
    s = dataclasses.replace(s, ops=dataclasses.replace(s.ops, top=(hostile, *s.ops.top[1:])))
    page = render_page(s, HEALTH)
    assert "\x1b" not in page and "\x00" not in page
    assert "op\\x1b[31mred\\x00&lt;b&gt;" in page
    # As in `tfobs analyze`'s text: the C1 controls (\x9b is CSI, an escape of its own on
    # terminals that take 8-bit controls) and the bidirectional overrides (an op name
    # shown reversed, "Trojan Source") are shown as codes too.
    hostile = dataclasses.replace(top, name="op\x9b31mred\u202edne\u2066x\u2069")
    s = dataclasses.replace(s, ops=dataclasses.replace(s.ops, top=(hostile, *s.ops.top[1:])))
    page = render_page(s, HEALTH)
    assert not any(c in page for c in "\x9b\u202e\u2066\u2069")
    assert "op\\x9b31mred\\u202edne\\u2066x\\u2069" in page
