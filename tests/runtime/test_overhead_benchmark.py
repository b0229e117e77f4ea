"""The overhead benchmark's own machinery: its A/B plan (no TensorFlow) and a short real run.

The benchmark's figures are only as good as its switching: every window's whole cost must land
in B, and tfobs's duty-cycle clock must skip every A stretch, or B would see more windows
than a continuous tfobs run would. The short run checks the script end to end; it asserts
nothing about speed (that is the benchmark's job, on a quiet machine).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "overhead.py")


def _load_benchmark():
    spec = importlib.util.spec_from_file_location("overhead_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


class FakeBudget:
    """Records each stretch the plan leaves out of the budget (its clock start moving on)."""

    def __init__(self) -> None:
        self.paused: list[float] = []
        self.not_before = 0.0
        self._t0 = 0.0

    @property
    def t0(self) -> float:
        return self._t0

    @t0.setter
    def t0(self, value: float) -> None:
        self.paused.append(value - self._t0)
        self._t0 = value


class FakeRuntime:
    def __init__(self) -> None:
        self.idle = True
        self.budget = FakeBudget()
        self.steps_begun: list[int] = []

    # the step hooks tfobs.step calls while the plan has tfobs switched in
    def step_begin(self, step_num: int) -> None:
        self.steps_begun.append(step_num)



def _drive(plan, runtime, busy_b_steps=(), a_step_s=0.0):
    """Run the plan's loop as run_loop does; B steps in `busy_b_steps` leave tfobs busy.

    Steps reach tfobs through the step hooks the plan switches, as `tfobs.step` would.
    """
    from tfobs.capture import markers

    arms = []
    while (arm := plan.before_step()) is not None:
        arms.append(arm)
        if arm == "B":
            n = plan.numbered()
            if markers.current_hooks() is not None:
                markers.current_hooks().step_begin(n)
            runtime.idle = n not in busy_b_steps
        else:
            time.sleep(a_step_s)
            plan.after_a_step()
    assert markers.current_hooks() is None  # the plan leaves tfobs switched out
    return arms


def test_plan_alternates_abba_and_keeps_b_until_tfobs_is_idle():
    bench = _load_benchmark()
    runtime = FakeRuntime()
    plan = bench.Plan(runtime, steps_per_block=3, pairs=2, first_step=100)
    arms = _drive(plan, runtime, busy_b_steps={102, 103})
    # Pair 0 is A then B, pair 1 B then A. The first B block's third step (102) leaves tfobs
    # busy, and so does the next (103): the block runs on until a step ends with tfobs idle.
    assert [b.arm for b in plan.blocks] == ["A", "B", "B", "A"]
    assert [len(b.dur) for b in plan.blocks] == [3, 5, 3, 3]
    assert arms == ["A"] * 3 + ["B"] * 8 + ["A"] * 3
    # Only B steps reach tfobs, numbered on their own from first_step.
    assert runtime.steps_begun == list(range(100, 108))
    assert plan.blocks[1].num == [100, 101, 102, 103, 104]
    assert plan.blocks[0].num == [-1, -1, -1]
    assert all(d >= 0 for b in plan.blocks for d in b.dur)


def test_plan_pauses_tfobs_clock_for_the_whole_a_stretch():
    bench = _load_benchmark()
    runtime = FakeRuntime()
    plan = bench.Plan(runtime, steps_per_block=2, pairs=3)
    _drive(plan, runtime, a_step_s=0.005)  # A blocks long enough to tell apart
    # ABBAAB: the clock pauses once after the first A, once after the AA stretch (both
    # blocks, not only the second), and not at all between the two Bs.
    assert [b.arm for b in plan.blocks] == ["A", "B", "B", "A", "A", "B"]
    assert len(runtime.budget.paused) == 2
    a_blocks = [b.seconds for b in plan.blocks if b.arm == "A"]
    assert runtime.budget.paused[1] >= a_blocks[1] + a_blocks[2]


def test_window_cost_is_the_span_beyond_the_median_step_around_it():
    bench = _load_benchmark()
    plan = bench.Plan(FakeRuntime(), steps_per_block=1, pairs=1)
    block = bench.Block("B", 100)
    # 100 steps of 10 ms from t=1000 s; steps 40-44 (the window's span) take 30 ms.
    t = 1000.0
    for i in range(100):
        d = 0.03 if 40 <= i < 45 else 0.01
        block.wall.append(t)
        block.dur.append(d)
        block.num.append(i)
        t += d
    plan.blocks = [block]

    class Record:
        index, outcome, first_step, last_step = 0, "captured", 40, 44
        start_ns = int(block.wall[40] * 1e9)
        end_ns = int((block.wall[40] + 0.05) * 1e9)
        capture_s, reduce_s = 0.05, 0.05
        background_cpu_s = 0.08  # what the budget charges: CPU time, not the 0.1 s of wall

    done_at = block.wall[45]
    import dataclasses

    from tfobs.capture.schedule import Policy
    from tfobs.config import Config

    policy = dataclasses.replace(Policy.from_config(Config()), background_cost=0.5)
    [cost] = bench.window_costs(plan, [(Record, done_at)], policy)
    assert cost.steps == 5
    assert cost.excess_s == pytest.approx(5 * 0.02)
    assert cost.estimate_s == pytest.approx(0.05 * 0.2 + 0.08 * 0.5)
    assert cost.worst_export_step_s == pytest.approx(0.03)


@pytest.mark.slow  # runs a training process
@pytest.mark.alone
@pytest.mark.timeout(300)
def test_short_run_prints_pairs_costs_and_the_last_line():
    proc = subprocess.run(
        [sys.executable, SCRIPT, "--pairs", "7", "--block-steps", "20"],
        cwd=ROOT, capture_output=True, text=True, timeout=280,
        # tfobs at its defaults, window length steered by the export's cost included
        env={**{k: v for k, v in os.environ.items() if k != "TFOBS_EXPORT_STEP_STRETCH"},
             "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = out.strip().splitlines()
    assert re.fullmatch(r"overhead_pct=-?\d+\.\d\d", lines[-1]), lines[-1]
    for name in ("keras_fit", "custom_loop"):
        assert f"{name}: 7 A/B pairs" in out, out
        assert re.search(rf"{name}: A/B median ratio \d\.\d+ \(90% interval", out), out
        assert re.search(rf"{name}: cost by part: steps \d+\.\d us each", out), out
        assert re.search(rf"{name}: worst step during an export or reduction \d+\.\d+ ms", out), out
    # The first window (B step 20) opens in the first workload and is measured; the second
    # workload's B steps continue those numbers, and its windows wait for the budget.
    assert re.search(r"keras_fit: window \d+ \[captured\] span \d+ ms, \d+ steps \(\d+ traced\), "
                     r"measured cost -?\d+\.\d ms, tfobs's estimate \d+\.\d ms", out), out
    # The worst-step figure beside the machine's own jitter, window by window too.
    assert re.search(r"keras_fit: the worst step of \d+ window-long stretches of A blocks \(no "
                     r"tfobs\): median \d+\.\d\dx", out), out
    assert re.search(r"keras_fit: slowest step in a window's span: median \d+\.\d\dx the median "
                     r"step over \d+ windows; in A stretches of as many steps \(no tfobs\) median "
                     r"\d+\.\d\dx", out), out
    assert "errors {}" in out, out
    # No scrape failed: a rendering held by the job's garbage collection (a finalizer in the
    # render thread, benchmarks/RESULTS.md "A scrape held for seconds by the job's garbage
    # collection") answers with the previous rendering instead of timing out.
    assert re.search(r"scrapes (0|\d+ \(0 failed; \d+ answered by an earlier rendering\))",
                     out), out


def test_shift_excess_reads_no_cost_where_the_steps_did_not_change() -> None:
    """Before and after drawn from one skewed distribution: the mean-against-mean figure is
    near zero; the median baseline it replaced read the skew as a cost of every window."""
    import random
    import statistics

    bench = _load_benchmark()
    rng = random.Random(3)
    steps, t = [], 0.0
    for n in range(2000):
        d = 0.010 + rng.expovariate(1 / 0.002)  # 10 ms plus a long right tail
        steps.append((t, d, n, "A"))
        t += d
    mid = t / 2
    excess = bench.shift_excess(steps, mid, mid, [])
    after = [d for w, d, _, _ in steps if mid <= w < mid + bench.NEIGHBOURHOOD_S]
    before = [d for w, d, _, _ in steps if mid - bench.NEIGHBOURHOOD_S <= w < mid]
    median_based = sum(after) - len(after) * statistics.median(before)
    assert abs(excess) < 0.4 * median_based
    assert median_based > 0.05  # what the old figure called "counted in no part"
    # a real slowdown after the point is read as one: 2 ms more per step for 2 s
    slowed = [(w, d + (0.002 if mid <= w < mid + 2 else 0.0), n, a) for w, d, n, a in steps]
    assert bench.shift_excess(slowed, mid, mid, []) > 0.002 * len(after) * 0.8


def test_a_window_longer_than_every_a_block_meets_the_longest_stretch_not_nothing() -> None:
    """A slow machine: the job steps at 42 ms instead of 26, a window spans more steps than
    any A block holds. The jitter it is held against comes from the longest A stretches
    (the benchmark crashed on an empty median there)."""
    bench = _load_benchmark()
    plan = bench.Plan(FakeRuntime(), steps_per_block=1, pairs=1)
    slow_step = bench.Block("A", 8)
    slow_step.dur = [0.01] * 3 + [0.05] + [0.01] * 4
    plan.blocks = [slow_step, bench.Block("B", 8)]
    assert bench.a_stretch_steps(plan, 5) == 5
    assert bench.a_stretch_steps(plan, 30) == 7
    drawn = bench.placebo_worst(plan, 30, 1, n=50)
    assert len(drawn) == 50
    assert set(drawn) <= {0.01, 0.05} and 0.05 in drawn
    plan.blocks = [bench.Block("B", 8)]  # no A block at all: nothing to draw from
    assert bench.placebo_worst(plan, 30, 1, n=50) == []
