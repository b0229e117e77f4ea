"""The live page shows the recent windows (step time and breakdown over time,
verdict changes) and refreshes itself; `/api/windows` serves the same summaries as JSON with
the same auth as /metrics; `tfobs analyze --html` with several captures is a before/after
page. Loaded in headless Chromium (Debian's chromium + chromedriver through Selenium)."""

from __future__ import annotations

import base64
import json
import pathlib
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

import pytest

import tfobs
from tests.export.test_page import browser, text_of  # noqa: F401 (the Chromium fixture)
from tfobs.config import Config
from tfobs.export.page import REFRESH_S
from tfobs.export.prometheus import PrometheusExporter
from tfobs.health import HealthLedger
from tfobs.window import WindowRecord

ROOT = pathlib.Path(__file__).parents[2]
CAPTURES = ROOT / "tests" / "data" / "captures"
INPUT_BOUND = CAPTURES / "generated__tf2.20cpu__tfkeras_fit.xplane.pb"
KERAS3 = CAPTURES / "generated__tf2.20cpu__keras3_fit.xplane.pb"
LOOP = CAPTURES / "generated__tf2.20cpu__custom_loop_compute_bfc.xplane.pb"
AUTH = "ops:s3cret"
SHOTS = pathlib.Path(tempfile.gettempdir())


def _auth_header() -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(AUTH.encode()).decode()}


@pytest.fixture(scope="module")
def live() -> PrometheusExporter:
    """The live exporter of one worker, four windows published (as the runtime publishes)."""
    summaries = [tfobs.analyze(p) for p in (KERAS3, INPUT_BOUND, LOOP, KERAS3)]
    assert len({s.input_bound.verdict for s in summaries}) >= 2  # verdict changes to show
    config = Config.load(environ={}, metrics_port=0, metrics_bind="127.0.0.1")
    exporter = PrometheusExporter(config, {"tf_job": "trainer", "tf_task": "0"},
                                  HealthLedger({"version": tfobs.__version__}))
    exporter.start()
    for i, s in enumerate(summaries):
        exporter.publish(s, WindowRecord(index=i, first_step=100 * i, last_step=100 * i + 9))
    try:
        yield exporter
    finally:
        exporter.shutdown(2.0)


@pytest.mark.slow  # starts a server and chromium
def test_live_page_shows_recent_windows_and_refreshes(browser, live) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    root = live.url.removesuffix("/metrics") + "/"
    browser.get(root)
    assert browser.title == "tfobs overview"
    rows = browser.find_elements(By.CSS_SELECTOR, "#history tbody tr")
    assert len(rows) == 4
    assert rows[0].text.startswith("#0 steps 0-9")
    items = live.recent.items()
    for row, w in zip(rows, items, strict=True):
        assert f"{w.summary.steps.mean_s * 1e3:.2f} ms" in row.text
        bars = row.find_elements(By.CSS_SELECTOR, ".bar.mini span")
        assert {b.get_attribute("data-category") for b in bars} == {
            c for c, r in w.summary.breakdown_ratio.items() if r > 0}
    changes = browser.find_elements(By.CSS_SELECTOR, "#history .changed")
    verdicts = [w.summary.input_bound.verdict for w in items]
    assert len(changes) == sum(a != b for a, b in zip(verdicts, verdicts[1:], strict=False))
    assert changes and changes[0].text == f"changed from {verdicts[0]}"
    # Step time over time: one point per window in the chart.
    assert len(browser.find_elements(By.CSS_SELECTOR, "#history-chart circle")) == 4
    refresh = browser.find_element(By.CSS_SELECTOR, 'meta[http-equiv="refresh"]')
    assert refresh.get_attribute("content") == str(REFRESH_S)
    # The latest window's detail stays below the history.
    assert f"{items[-1].summary.steps.mean_s * 1e3:.2f} ms" == text_of(browser, "#kpi-step-time .v")
    browser.save_screenshot(str(SHOTS / "tfobs_page_history.png"))


@pytest.mark.slow  # starts a server
def test_api_windows_serves_the_recent_summaries_as_json(live) -> None:
    url = live.url.removesuffix("/metrics") + "/api/windows"
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.headers["Content-Type"].startswith("application/json")
        doc = json.loads(r.read())
    assert doc["identity"] == {"tf_job": "trainer", "tf_task": "0", "tf_cluster": "none",
                               "local_rank": "0"}  # the defaults fill in what was not given
    assert [w["index"] for w in doc["windows"]] == [0, 1, 2, 3]
    for got, want in zip(doc["windows"], live.recent.items(), strict=True):
        assert got["summary"] == json.loads(json.dumps(want.summary.to_dict()))
        assert (got["first_step"], got["last_step"]) == (want.first_step, want.last_step)


@pytest.mark.slow  # starts a server
def test_api_windows_has_the_same_basic_auth_as_metrics() -> None:
    config = Config.load(environ={}, metrics_port=0, metrics_bind="127.0.0.1",
                         metrics_basic_auth=AUTH)
    exporter = PrometheusExporter(config, {"tf_job": "t", "tf_task": "0"}, HealthLedger())
    exporter.start()
    try:
        exporter.publish(tfobs.analyze(KERAS3), WindowRecord(index=0))
        base = exporter.url.removesuffix("/metrics")
        for path in ("/metrics", "/api/windows"):
            with pytest.raises(urllib.error.HTTPError) as denied:
                urllib.request.urlopen(base + path, timeout=10)
            assert denied.value.code == 401
            req = urllib.request.Request(base + path, headers=_auth_header())
            with urllib.request.urlopen(req, timeout=10) as r:
                assert r.status == 200
        # Unknown paths stay 404 (the route exists only where it is served).
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(urllib.request.Request(base + "/api/other",
                                                          headers=_auth_header()), timeout=10)
        assert missing.value.code == 404
    finally:
        exporter.shutdown(2.0)


@pytest.mark.slow  # starts chromium
def test_analyze_html_with_several_captures_is_a_before_after_page(browser,  # noqa: F811
                                                                   tmp_path) -> None:
    from selenium.webdriver.common.by import By

    out = tmp_path / "before_after.html"
    proc = subprocess.run([sys.executable, "-m", "tfobs.cli", "analyze", str(INPUT_BOUND),
                           str(KERAS3), "--html", str(out)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    browser.get(out.as_uri())
    rows = browser.find_elements(By.CSS_SELECTOR, "#history tbody tr")
    assert len(rows) == 2 and INPUT_BOUND.name[:20] in rows[0].text
    first, last = tfobs.analyze(INPUT_BOUND), tfobs.analyze(KERAS3)
    table = text_of(browser, "#before-after")
    assert f"{first.steps.mean_s * 1e3:.2f} ms" in table
    assert f"{last.steps.mean_s * 1e3:.2f} ms" in table
    change = (last.steps.mean_s - first.steps.mean_s) / first.steps.mean_s * 100
    assert f"{change:+.0f} %" in table
    browser.save_screenshot(str(SHOTS / "tfobs_page_before_after.png"))


@pytest.mark.slow  # starts a server
def test_api_windows_is_served_over_the_same_tls_as_metrics(tmp_path_factory) -> None:
    import ssl

    from tests.export.test_http_security import self_signed

    cert, key = self_signed.__wrapped__(tmp_path_factory)  # the module's PEM maker
    config = Config.load(environ={}, metrics_port=0, metrics_bind="127.0.0.1",
                         metrics_tls_cert=cert, metrics_tls_key=key)
    exporter = PrometheusExporter(config, {"tf_job": "t", "tf_task": "0"}, HealthLedger())
    exporter.start()
    try:
        exporter.publish(tfobs.analyze(KERAS3), WindowRecord(index=0))
        url = exporter.url.removesuffix("/metrics") + "/api/windows"
        assert url.startswith("https://")
        with urllib.request.urlopen(url, timeout=10,
                                    context=ssl.create_default_context(cafile=cert)) as r:
            assert [w["index"] for w in json.loads(r.read())["windows"]] == [0]
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):  # plain HTTP
            urllib.request.urlopen(url.replace("https://", "http://"), timeout=5).read()
    finally:
        exporter.shutdown(2.0)


def test_api_windows_is_strict_json_where_tf_wrote_nan() -> None:
    """An XLA allocator's fragmentation TF could not measure (NaN, as in the recorded H100 JAX
    capture) was written as a bare NaN: no strict JSON reader took /api/windows; it is null,
    as in `tfobs analyze --format json`."""
    from tfobs.export.recent import RecentWindows
    from tfobs.summary import MemoryStat, WindowSummary

    recent = RecentWindows()
    recent.add(WindowSummary(memory=(MemoryStat("xla_gpu_host_bfc", peak_bytes=1,
                                                fragmentation_ratio=float("nan"),
                                                fragmentation_known=False),)), None)

    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    doc = json.loads(recent.to_json(), parse_constant=refuse)
    (memory,) = doc["windows"][0]["summary"]["memory"]
    assert memory["fragmentation_ratio"] is None and memory["fragmentation_known"] is False
