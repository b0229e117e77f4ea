"""A real tf_keras `fit` with tfobs on: its window crosses an epoch, where tf_keras numbers
its step markers from 0 again. The exemplar the runtime draws at each step's end must be the
id of the span that step becomes in the window's trace (tf_keras's name for the step, not
the global step tfobs counts), the window's first and last steps included."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.traced_training import ROOT

pytest.importorskip("tf_keras")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SCRIPT = r"""
import json
import numpy as np
import tf_keras
import tfobs
from tfobs.export.otel import SPAN_STEP, plan_window

found = []
def on_window(record, summary):
    if record.outcome != "captured":
        return
    drawn = {f"{m} {n}": f"{i:016x}" for (m, n), i in record.step_span_ids.items()}
    plan = plan_window(summary, record, top_n=0)  # draws ids for steps no exemplar named
    steps = [s for s in plan.spans if s.name == SPAN_STEP]
    found.append({"drawn": drawn, "planned": {
        f"{s.attributes['tfobs.step.marker']} {s.attributes['tfobs.step.num']}":
        f"{s.span_id:016x}" for s in steps}, "timed_only": [
        f"{s.attributes['tfobs.step.marker']} {s.attributes['tfobs.step.num']}"
        for s in steps if s.attributes.get("tfobs.step.in_summary") is False]})

handle = tfobs.enable(metrics_port=-1, first_window_step=13, interval_steps=10**6,
                      window_steps=6, overhead_budget=0.5, nvml=False)
handle.add_listener(on_window)
rng = np.random.default_rng(0)
x, y = rng.random((128, 16), np.float32), rng.random((128, 1), np.float32)
model = tf_keras.Sequential([tf_keras.Input((16,)), tf_keras.layers.Dense(32),
                             tf_keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
model.fit(x, y, batch_size=16, epochs=4, verbose=0)  # 8 steps an epoch
handle.wait_idle(120)  # the window is reduced after fit ends: let it finish
tfobs.disable()
print("RESULT " + json.dumps(found))
"""


def test_tf_keras_exemplars_name_the_spans_of_a_window_across_an_epoch() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFOBS_")}
    env.update(TF_USE_LEGACY_KERAS="1", TFOBS_QUIET="1", OTEL_SDK_DISABLED="true",
               PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                         text=True, timeout=240, check=True).stdout
    (window,) = json.loads(next(ln for ln in out.splitlines() if ln.startswith("RESULT "))[7:])
    # Global steps 13..18 are tf_keras's "train 5".."train 7" of the second epoch, then
    # "train 0".."train 2" of the third; XProf (and tfobs) drop the window's first and last
    # from the summary, and the trace still has their spans, as tfobs's marker timed them.
    assert sorted(window["drawn"]) == [f"train {n}" for n in (0, 1, 2, 5, 6, 7)]
    assert sorted(window["planned"]) == sorted(window["drawn"])
    assert sorted(window["timed_only"]) == ["train 2", "train 5"]
    for name, span in window["planned"].items():
        assert window["drawn"][name] == span, name  # the exemplar names this very span
