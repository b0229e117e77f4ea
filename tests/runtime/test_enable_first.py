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

from tests.support.prometheus_server import free_port

pytest.importorskip("tensorflow")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

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
print(json.dumps({"idle": ok, "windows": handle.health.windows,
                  "errors": handle.health.errors, "reason": handle.health.last_reason}))
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
    "central_storage": """
strategy = tf.distribute.experimental.CentralStorageStrategy()
with strategy.scope():
    v = tf.Variable(1.0)
strategy.run(tf.function(lambda: v.assign_add(1.0)))
""",
    # TF_CONFIG names a real one-worker cluster (set before the process starts, as a
    # launcher does): the strategy starts its gRPC server and runs collectives on it.
    "multi_worker_mirrored_tf_config": """
strategy = tf.distribute.MultiWorkerMirroredStrategy()
assert strategy.cluster_resolver.task_type == "worker"
assert handle.identity["tf_job"] == "worker" and handle.identity["tf_cluster"] != "none"
with strategy.scope():
    v = tf.Variable(1.0, aggregation=tf.VariableAggregation.MEAN)
for i in range(3):
    strategy.run(tf.function(lambda: v.assign_add(1.0)))
""",
    # An in-process cluster (TensorFlow's own recipe for ParameterServerStrategy): one
    # worker and one parameter server, this process the coordinator.
    "parameter_server": """
from tensorflow.python.training.server_lib import ClusterSpec
spec = ClusterSpec({"worker": [f"127.0.0.1:{FREE_PORTS[0]}"],
                    "ps": [f"127.0.0.1:{FREE_PORTS[1]}"]})
servers = [tf.distribute.Server(spec, job_name=j, task_index=0, protocol="grpc")
           for j in ("worker", "ps")]
resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(spec, rpc_layer="grpc")
strategy = tf.distribute.ParameterServerStrategy(resolver)
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
with strategy.scope():
    v = tf.Variable(1.0)
coordinator.schedule(tf.function(lambda: v.assign_add(1.0)))
coordinator.join()
""",
}
# Cases that need TF_CONFIG in the environment before the process starts.
TF_CONFIG_CASES = {"multi_worker_mirrored_tf_config"}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_enable_first_then_configure(case, tmp_path):
    ports = [free_port(), free_port()]
    script = (textwrap.dedent(_PRELUDE) + f"FREE_PORTS = {ports!r}\n"  # enable() stays first
              + textwrap.dedent(CASES[case]) + textwrap.dedent(_TRAIN))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TFOBS_CAPTURE_DIR=str(tmp_path))
    env.pop("TF_CONFIG", None)
    if case in TF_CONFIG_CASES:
        env["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"127.0.0.1:{ports[0]}"]},
                                       "task": {"type": "worker", "index": 0}})
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["idle"]
    # Training after the configuration still gets profiled.
    assert result["windows"].get("captured", 0) >= 1, result
