"""Window length steered by what the export did to the step it overlapped: the rule
(`WindowLength`), the training thread's measure of the step (`Windows`), and real jobs
whose training leaves a core free or keeps every core busy."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from tfobs.capture.window_length import (
    FREE_CORE,
    MAX_RETRY_AFTER,
    MIN_STEPS,
    WindowLength,
    idle_cores,
    ladder,
    machine_ticks,
    usable_cores,
)
from tfobs.config import Config, ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_ladder_halves_down_to_five_steps_and_leaves_short_windows_alone():
    assert ladder(20) == (20, 10, 5)
    assert ladder(100) == (100, 50, 25, 13, 7)
    assert ladder(9) == (9, 5)
    assert ladder(MIN_STEPS) == (MIN_STEPS,) and ladder(3) == (3,)
    assert WindowLength(20, 0.0).rungs == (20,)  # off: always window_steps


def test_a_stretch_over_the_limit_moves_to_the_rung_predicted_to_meet_it():
    length = WindowLength(20, 1.5)
    assert length.observe(1.9, 20) == 10  # 0.9 over at 20 steps: 11 steps would meet 1.5
    length = WindowLength(20, 1.5)
    assert length.observe(2.6, 20) == 5  # 6 steps would: the rung below that
    length = WindowLength(20, 1.5)
    assert length.observe(40.0, 20) == 5  # never under the lowest rung
    assert length.observe(1.0, 5) == 5  # one roomy window is not enough to grow
    assert length.observe(1.0, 5) == 10  # two in a row are


def test_growth_needs_room_for_twice_the_steps_in_a_row():
    length = WindowLength(20, 1.5)
    length.observe(2.5, 20)
    assert length.steps == 5
    for stretch in (1.2, 1.3, 1.2, 1.3):  # twice the steps would reach 1.4-1.6
        length.observe(stretch, 5)
    assert length.steps == 5  # 1.3 breaks the run every time
    length.observe(1.2, 5)
    length.observe(1.2, 5)
    assert length.steps == 10


def test_a_rung_that_broke_the_limit_waits_longer_after_each_failure():
    length = WindowLength(20, 1.5)
    tried_full = []
    for n in range(400):
        stretch = 2.4 if length.steps == 20 else 1.1  # short windows look roomy; 20 is not
        if length.steps == 20:
            tried_full.append(n)
        length.observe(stretch, length.steps)
    gaps = [b - a for a, b in zip(tried_full, tried_full[1:], strict=False)]
    assert tried_full[0] == 0 and len(gaps) >= 4
    assert gaps == sorted(gaps) and gaps[-1] <= MAX_RETRY_AFTER + 5
    assert gaps[-1] > gaps[0]  # backs off instead of paying the 2.4x step every few windows


def test_the_first_window_is_full_unless_training_keeps_every_core_busy():
    assert WindowLength(20, 1.5).first_window(busy_cores=0.9, cores=2.0) == 20
    assert WindowLength(20, 1.5).first_window(busy_cores=2.0 - FREE_CORE + 0.05,
                                              cores=2.0) == 5
    # The job leaves a core, but the machine has none idle: its neighbours pay, and the
    # steps wait for them.
    assert WindowLength(20, 1.5).first_window(busy_cores=0.5, cores=2.0, idle=0.3) == 5
    assert WindowLength(20, 1.5).first_window(busy_cores=0.5, cores=2.0, idle=1.2) == 20
    length = WindowLength(20, 1.5)
    length.observe(1.0, 20)
    assert length.first_window(busy_cores=2.0, cores=2.0) == 20  # measured beats guessed
    assert WindowLength(20, 0.0).first_window(busy_cores=2.0, cores=2.0) == 20


def test_usable_cores_is_at_most_the_affinity_and_idle_cores_at_most_the_machine():
    cores = usable_cores()
    assert 0 < cores <= len(os.sched_getaffinity(0))
    before = machine_ticks()
    time.sleep(0.3)
    idle = idle_cores(before, machine_ticks())
    assert idle is not None and 0 <= idle <= (os.cpu_count() or 1)
    assert idle_cores(before, before) is None  # too few ticks to say


@pytest.mark.parametrize("value", [0.5, 1.0, -1.0, float("nan"), 1000.0, True])
def test_bad_stretch_settings_are_refused_naming_the_option(value):
    with pytest.raises(ConfigError, match="export_step_stretch"):
        Config.load(environ={}, export_step_stretch=value)


def test_stretch_setting_defaults_and_switches_off():
    assert Config.load(environ={}).export_step_stretch == 1.5
    assert Config.load(environ={"TFOBS_EXPORT_STEP_STRETCH": "0"}).export_step_stretch == 0.0
    assert Config.load(environ={}, export_step_stretch=2).export_step_stretch == 2.0


def test_windows_hold_the_longest_step_overlapping_the_export_against_the_median():
    """The training thread's side, driven step by step: steps before the window set the
    median; the step that overlaps the export is the worst; the first step begun after the
    export closes the watch, steers the next length and reaches the health ledger."""
    from tfobs.capture.schedule import Budget, Policy
    from tfobs.capture.session import ProfilerSlot
    from tfobs.health import HealthLedger
    from tfobs.runtime.failures import Failures
    from tfobs.runtime.windows import Windows

    policy = Policy(interval_steps=1000, window_steps=20, first_window_step=10**6,
                    window_max_s=10.0, overhead_budget=0.5, export_step_stretch=1.5)
    health = HealthLedger()
    windows = Windows(policy, Budget(policy), ProfilerSlot.__new__(ProfilerSlot), health,
                      Failures(health), None, lambda *a: None)

    def step(duration_s: float) -> None:
        time.sleep(duration_s)
        windows.step_end(0, duration_s)

    for _ in range(10):
        step(0.002)
    windows._base_s = 0.002  # what _open takes from the steps before the window

    class Window:  # what export_began reads of an open window
        class record:
            first_step, last_step = 100, 119

    watch = windows.export_began(Window)
    assert watch is not None and watch.traced_steps == 20
    step(0.002)
    step(0.006)  # overlapped the export: 3x the median
    watch.ended = time.monotonic()
    assert health.snapshot().export_step_stretch is None  # not closed before a step after
    step(0.002)  # begun after the export: closes the watch
    snap = health.snapshot()
    assert snap.export_step_stretch == pytest.approx(3.0)
    assert snap.next_window_steps == windows.length.steps == 5
    assert windows._watch is None


JOB = textwrap.dedent("""
    import json, sys, time
    import tensorflow as tf
    import tfobs

    busy = sys.argv[1] == "busy"
    rt = tfobs.enable(metrics_port=-1, window_steps=20, interval_steps=40,
                      first_window_step=20, overhead_budget=0.5, nvml=False,
                      export_step_stretch=1.5)
    x = tf.random.normal((700, 700))

    @tf.function
    def work(x):
        for _ in range(4):
            x = tf.tanh(tf.matmul(x, x) * 1e-3)
        return x

    lengths = []
    rt.add_listener(lambda rec, summ: lengths.append(rec.last_step - rec.first_step + 1))
    for i in range(140):
        with tfobs.step(i):
            if busy:
                work(x).numpy()  # TensorFlow's pool on every core
            else:
                time.sleep(0.02)  # waiting on a device or a feed: the cores are idle
                work(x[:8, :8]).numpy()
    rt.wait_idle(60)
    snap = rt.health.snapshot()
    print(json.dumps({"lengths": lengths, "stretch": snap.export_step_stretch,
                      "next": snap.next_window_steps}))
    tfobs.disable()
""")


def _run_job(kind: str) -> dict:
    import json

    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("TFOBS_EXPORT_STEP_STRETCH", None)
    out = subprocess.run([sys.executable, "-c", JOB, kind], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.alone
def test_a_job_that_leaves_the_cores_idle_keeps_full_windows():
    got = _run_job("idle")
    assert got["lengths"] and got["lengths"][0] == 20, got
    assert all(n in ladder(20) for n in got["lengths"]), got
    assert got["stretch"] is not None and got["next"] in ladder(20), got


@pytest.mark.slow
@pytest.mark.alone
def test_a_job_that_keeps_every_core_busy_starts_short_and_stays_on_the_ladder():
    """Real TensorFlow on every core: the steps before the first window say no core is free,
    so it traces MIN_STEPS; later lengths follow the measured stretch on the same ladder."""
    got = _run_job("busy")
    assert got["lengths"] and got["lengths"][0] == MIN_STEPS, got
    assert all(n in ladder(20) for n in got["lengths"]), got
    assert got["stretch"] is not None and got["stretch"] > 0 and got["next"] in ladder(20), got
