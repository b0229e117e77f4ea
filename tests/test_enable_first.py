"""`tfobs.enable()` as a script's first line leaves TensorFlow uninitialised: device
configuration and every tf.distribute strategy can follow it (each case in a fresh process,
since TensorFlow's runtime can be initialised only once per process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("tensorflow")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_PRELUDE = """
import json, os, tfobs
handle = tfobs.enable(metrics_port=0, first_window_step=3, window_steps=3,
                      interval_steps=1000, overhead_budget=0.5)
import tensorflow as tf
"""

_TRAIN = """
@tf.function
def train_step(x):
    return tf.reduce_sum(x * x)
for i in range(12):
    with tfobs.step(i):
        train_step(tf.ones((8,)))
ok = handle.wait_idle(30.0)
print(json.dumps({"idle": ok, "windows": handle.health.windows}))
tfobs.disable()
"""

CASES = {
    "logical_devices": """
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
assert len(tf.config.list_logical_devices("CPU")) == 2
""",
    "visible_devices": """
tf.config.set_visible_devices(tf.config.list_physical_devices("CPU"))
""",
    "memory_growth": """
for gpu in tf.config.list_physical_devices("GPU"):  # none on a CPU machine: a no-op there
    tf.config.experimental.set_memory_growth(gpu, True)
""",
    "mirrored": """
strategy = tf.distribute.MirroredStrategy()
""",
    "multi_worker_mirrored": """
strategy = tf.distribute.MultiWorkerMirroredStrategy()
assert strategy.num_replicas_in_sync == 1
""",
    "one_device": """
strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
""",
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_enable_first_then_configure(case, tmp_path):
    script = textwrap.dedent(_PRELUDE) + textwrap.dedent(CASES[case]) + textwrap.dedent(_TRAIN)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TFOBS_CAPTURE_DIR=str(tmp_path))
    env.pop("TF_CONFIG", None)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["idle"]
    # Training after the configuration still gets profiled.
    assert result["windows"].get("captured", 0) >= 1, result
