"""fork() after enable() (issue 13, item 9): the child closes the inherited listening socket,
so the parent's disable() frees the port, and a fork during a window stops the copied
profiler session in the child (its tracing would grow its memory, and its own profiler could
not start: "Another profiling session active")."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent("""
    import os, socket, sys, tempfile, time
    import tensorflow as tf, tfobs
    rt = tfobs.enable(metrics_port=0, metrics_bind="127.0.0.1", capture_dir=sys.argv[1],
                      window_steps=1000, interval_steps=5000, first_window_step=2,
                      window_max_s=60, nvml=False)
    port = rt.metrics_port

    @tf.function
    def train(x):
        return tf.reduce_sum(x * x)

    for i in range(5):
        with tfobs.step(i):
            train(tf.ones((8,)))
    assert rt.slot.state == "active"  # a window is tracing now
    r, w = os.pipe()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        # TF ops are not fork-safe; the profiler session is: start one of our own.
        from tensorflow.python.profiler.internal import _pywrap_profiler
        time.sleep(0.5)  # the copied session is dropped on a short-lived thread
        try:
            session = _pywrap_profiler.ProfilerSession()
            session.start(tempfile.mkdtemp(), {})
            del session
            os.write(ready_w, b"1")
        except Exception as exc:
            print("child profiler:", exc, flush=True)
            os.write(ready_w, b"0")
        os.read(r, 1)  # live on while the parent disables
        os._exit(0)
    child_profiler_ok = os.read(ready_r, 1) == b"1"
    for i in range(5, 8):
        with tfobs.step(i):
            train(tf.ones((8,)))
    rt.train_end()
    parent_window_ok = rt.wait_idle(30) and rt.health.windows.get("captured") == 1
    tfobs.disable()
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        port_free = False
    except OSError:
        port_free = True
    again = tfobs.enable(metrics_port=port, metrics_bind="127.0.0.1", nvml=False,
                         capture_dir=sys.argv[1])
    reenabled = again is not None and again.metrics_port == port
    tfobs.disable()
    os.write(w, b"x")
    os.waitpid(pid, 0)
    print("RESULT", child_profiler_ok, parent_window_ok, port_free, reenabled, flush=True)
""")


def test_fork_during_a_window_frees_port_and_profiler_in_the_child(tmp_path: object) -> None:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True,
                          text=True, timeout=180, env=env)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT")]
    assert proc.returncode == 0 and lines, proc.stdout + proc.stderr[-3000:]
    child_profiler_ok, parent_window_ok, port_free, reenabled = lines[0].split()[1:]
    assert child_profiler_ok == "True", proc.stdout  # the copied session was stopped
    assert parent_window_ok == "True"  # the parent's own window is unaffected
    assert port_free == "True"  # the child no longer holds the listening socket
    assert reenabled == "True"
