"""The window schedule: pure decisions, an injectable clock, no TensorFlow."""

from __future__ import annotations

import dataclasses

import pytest

from tfobs.capture.schedule import (
    Budget,
    Policy,
    next_window_start,
    pause_after_s,
    window_cost_s,
    window_full,
)
from tfobs.config import Config

DEFAULT = Policy.from_config(Config())


def _policy(**changes: float) -> Policy:
    return dataclasses.replace(DEFAULT, **changes)


def _starts(upto: int, policy: Policy) -> list[int]:
    """Every window start up to `upto`, as the runtime walks them."""
    starts, step = [], 0
    while (step := next_window_start(step, policy)) <= upto:
        starts.append(step)
        step += 1
    return starts


class FakeClock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


# Windows planned at the whole budget: the arithmetic of the pause alone.
POLICY = Policy(interval_steps=500, window_steps=20, first_window_step=20, window_max_s=10.0,
                overhead_budget=0.01, active_cost=0.2, background_cost=0.5, plan_share=1.0)


def test_window_starts_are_aligned_to_step_numbers():
    assert _starts(2000, POLICY) == [20, 500, 1000, 1500, 2000]
    assert next_window_start(0, POLICY) == 20
    assert next_window_start(21, POLICY) == 500
    assert next_window_start(500, POLICY) == 500
    assert next_window_start(501, POLICY) == 1000


def test_workers_starting_at_different_steps_agree():
    # A worker restored from a checkpoint at step 737 joins the same windows as the others.
    late = next_window_start(737, POLICY)
    assert late == 1000 and late in _starts(2000, POLICY)


def test_first_window_when_first_step_beyond_interval():
    p = _policy(interval_steps=10, window_steps=5, first_window_step=3)
    assert _starts(30, p) == [3, 10, 20, 30]


def test_window_holds_whole_number_of_steps():
    assert not window_full(500, 518, POLICY.window_steps)
    assert window_full(500, 519, POLICY.window_steps)  # 20 steps: 500..519


def test_cost_model_and_pause():
    cost = window_cost_s(active_s=1.0, background_s=0.4, policy=POLICY)
    assert cost == pytest.approx(0.2 + 0.2)
    assert pause_after_s(cost, POLICY) == pytest.approx(40.0)  # 0.4 s at 1 % -> 40 s


def test_budget_spaces_windows_to_the_target():
    clock = FakeClock()
    budget = Budget(POLICY, clock)
    assert budget.allows()  # first window right away
    clock.t += 2.0
    not_before = budget.charge(active_s=1.0, background_s=0.4)  # cost 0.4 s
    assert not_before == pytest.approx(clock.t + 40.0)
    clock.t += 39.9
    assert not budget.allows()
    clock.t += 0.2
    assert budget.allows()
    # cost so far 0.4 s over 42.1 s elapsed: just under the 1 % target
    assert budget.overhead() == pytest.approx(0.4 / 42.1)
    assert budget.overhead() <= POLICY.overhead_budget
    assert budget.duty_cycle() == pytest.approx(1.0 / 42.1)


def test_budget_charges_add_up_reduction_after_capture():
    clock = FakeClock(0.0)
    budget = Budget(POLICY, clock)
    budget.charge(active_s=0.5, background_s=0.1)  # 0.1 + 0.05 = 0.15 -> 15 s
    budget.charge(background_s=0.2)  # + 0.1 -> 10 s more
    assert budget.not_before == pytest.approx(25.0)


def test_budget_holds_long_run_overhead_under_target():
    clock = FakeClock(0.0)
    budget = Budget(POLICY, clock)
    windows = 0
    while clock.t < 3600:
        if budget.allows():
            windows += 1
            budget.charge(active_s=0.6, background_s=0.5)
        clock.t += 1.7  # a due window every 1.7 s; most are skipped
    assert windows > 10
    assert budget.overhead() <= POLICY.overhead_budget + 1e-9


def test_policy_defaults_are_the_config_defaults():
    assert (DEFAULT.interval_steps, DEFAULT.window_steps, DEFAULT.first_window_step,
            DEFAULT.window_max_s, DEFAULT.overhead_budget) == (500, 20, 20, 10.0, 0.01)


def test_policy_from_config():
    p = Policy.from_config(Config.load(environ={}, interval_steps=100, window_steps=5))
    assert (p.interval_steps, p.window_steps, p.background_cost) == (100, 5, 1.0)


def test_default_plan_leaves_a_margin_under_the_budget():
    p = _policy(overhead_budget=0.01, background_cost=0.5)
    assert p.plan_share == pytest.approx(0.8)
    assert pause_after_s(0.4, p) == pytest.approx(50.0)  # 0.4 s at 0.8 % -> 50 s


def test_step_cost_takes_its_share_of_the_plan_first():
    clock = FakeClock(0.0)
    p = _policy(overhead_budget=0.01, background_cost=0.5, plan_share=0.8)
    budget = Budget(p, clock)
    clock.t = 10.0
    # 4,000 steps of 2.5 ms in 10 s, 5 us of tfobs work each: 0.02 s, a 0.2 % share; windows
    # get the other 0.6 %.
    not_before = budget.charge(active_s=0.05, background_s=0.3, steps_s=0.02)
    window_cost = 0.05 * 0.2 + 0.3 * 0.5
    assert not_before == pytest.approx(10.0 + window_cost / 0.006)
    assert budget.overhead() == pytest.approx((window_cost + 0.02) / 10.0)


def test_tiny_steps_still_leave_windows_a_floor():
    clock = FakeClock(0.0)
    p = _policy(overhead_budget=0.01, background_cost=0.5, plan_share=0.8)
    budget = Budget(p, clock)
    clock.t = 1.0
    # 100 us steps: markers alone take 5 %, past the budget; windows keep a quarter of the plan.
    not_before = budget.charge(background_s=0.1, steps_s=0.05)
    assert not_before == pytest.approx(1.0 + 0.05 / 0.002)


def test_long_run_with_step_cost_stays_under_the_plan():
    clock = FakeClock(0.0)
    p = _policy(overhead_budget=0.01, background_cost=0.5)
    budget = Budget(p, clock)
    windows, steps_s = 0, 0.0
    while clock.t < 3600:
        if budget.allows():
            windows += 1
            budget.charge(active_s=0.1, background_s=0.3, steps_s=steps_s)
            steps_s = 0.0
        clock.t += 1.7
        steps_s += 680 * 5e-6  # 2.5 ms steps, 5 us of tfobs work each
    assert windows > 10
    assert budget.overhead() <= p.overhead_budget * p.plan_share + 1e-4
