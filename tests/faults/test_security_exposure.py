"""What a training job with tfobs exposes, checked end to end on a real run (SECURITY.md).

* Nothing secret or private leaves the process: canary values in an environment variable,
  in TF_CONFIG's cluster addresses, in the basic-auth password and the capture token, and
  every input tensor value, are absent from `/metrics`, the overview page `/`, and every
  span and resource attribute a real OTLP receiver gets.
* Remote capture (off by default) needs the bearer token, and a granted request still obeys
  the duty-cycle budget: the next request is refused (429) while the budget has no room.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request

import pytest

from tests.support.fault_job import finish_job, start_job, wait_line
from tests.support.otlp_receiver import OtlpReceiver

pytestmark = [pytest.mark.slow, pytest.mark.waits, pytest.mark.timeout(300)]  # runs a training job

ENV_CANARY = "canary-env-5f3a9e"
HOST_CANARY = "canary-host-7c1d.example"
PASSWORD = "canary-pass-91b0"
TOKEN = "canary-token-d4e2"
TENSOR_VALUE = 4242.4242


def post_capture(url: str, token: str | None) -> int:
    headers = {"Authorization": "Basic " + base64.b64encode(f"prom:{PASSWORD}".encode()).decode()}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=b"", method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_no_secret_leaves_the_job_and_remote_capture_obeys_the_budget(tmp_path):
    tf_config = {"cluster": {"worker": [f"{HOST_CANARY}:2222"]},
                 "task": {"type": "worker", "index": 0}}
    with OtlpReceiver() as receiver:
        proc = start_job(
            {"capture_dir": str(tmp_path / "cap"), "otlp_endpoint": receiver.endpoint,
             "metrics_basic_auth": f"prom:{PASSWORD}", "remote_capture": True,
             "remote_capture_token": TOKEN,
             # Only on-demand windows, under the default 1 % budget.
             "first_window_step": 10**6, "interval_steps": 10**6, "overhead_budget": 0.01},
            steps=240,
            extra=("--input-fill", str(TENSOR_VALUE), "--dump-http", str(tmp_path / "http")),
            env={"TFOBS_TEST_CANARY": ENV_CANARY, "TF_CONFIG": json.dumps(tf_config),
                 "OTEL_BSP_SCHEDULE_DELAY": "200"},
        )
        try:
            line, before = wait_line(proc, "fault job: metrics at ")
            capture = line.rsplit(" ", 1)[1].replace("/metrics", "/capture")
            statuses = {"no_token": post_capture(capture, None),
                        "wrong_token": post_capture(capture, "not-the-token"),
                        "granted": post_capture(capture, TOKEN)}
            time.sleep(1.5)  # the granted window runs and is reduced
            statuses["over_budget"] = post_capture(capture, TOKEN)
            run = finish_job(proc, earlier="".join(before) + line + "\n")
        finally:
            if proc.poll() is None:
                proc.kill()
        spans = receiver.wait_for(lambda sp: len(sp) > 0, timeout_s=10)

    assert run.returncode == 0, run.stderr[-3000:]
    assert statuses == {"no_token": 401, "wrong_token": 401, "granted": 202,
                        "over_budget": 429}, statuses
    assert run.windows == {"captured": 1}, run.windows  # exactly the one granted window
    assert spans, "the captured window was not exported"
    assert spans[0].resource["tf_job"] == "worker"  # TF_CONFIG was read ...

    exposed = [(tmp_path / "http.metrics").read_text(), (tmp_path / "http.page").read_text()]
    for s in spans:
        exposed.append(json.dumps([s.name, s.attributes, s.resource, s.events], default=str))
    text = "\n".join(exposed)
    assert "tfobs_step_duration_seconds_count" in text and "tfobs.window" in text
    for canary in (ENV_CANARY, HOST_CANARY, PASSWORD, TOKEN, "4242.42"):
        assert canary not in text, canary  # ... but only the task's type and index
