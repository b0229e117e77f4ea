"""When a profile window opens and closes: small pure functions plus the duty-cycle budget.

* Windows are aligned to step numbers: the first at `first_window_step` (soon after warm-up),
  then at every multiple of `interval_steps`. Every worker of a synchronous job sees the same
  step numbers, so all profile the same steps without talking to each other.
* A window holds `window_steps` whole steps, or less when `window_max_s` runs out first or
  when its export was measured to slow training's steps too much (`window_length.py`).
* A duty-cycle budget keeps tfobs's whole cost under `overhead_budget`. Every step pays a
  few microseconds (marker and step-time histogram, timed in place by `markers.step`)
  whether or not a window is open; windows get what is left of the plan, `plan_share` of
  the budget (a margin for the estimate's error). After a window that cost C seconds of
  training time, the next may open only C / (plan - per-step share) seconds later. A due
  window that falls inside that pause is skipped (outcome `skipped_budget`).

Cost model (estimates, checked window by window by benchmarks/overhead.py): while the
profiler traces, training runs about `ACTIVE_COST` slower (11-23 % measured on CPU); each
CPU second of background work (export, read, reduction) costs training a whole second
(`BACKGROUND_COST`): that work holds the GIL most of the time, so a Python training loop
waits for it however many cores are idle. Charging 1/cores of it instead underestimated
windows by a third on 2 cores. The per-step work costs what the markers timed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from tfobs.config import Config

ACTIVE_COST = 0.2
BACKGROUND_COST = 1.0  # training seconds lost per CPU second of tfobs's background work
PLAN_SHARE = 0.8  # windows are planned at 80 % of the budget: room for estimate errors
MIN_WINDOW_SHARE = 0.25  # tiny steps: windows still get a quarter of the plan


@dataclass(frozen=True)
class Policy:
    """The schedule's settings; the values come from `Config` (defaults live there only)."""

    interval_steps: int
    window_steps: int
    first_window_step: int
    window_max_s: float
    overhead_budget: float
    export_step_stretch: float = 0.0  # 0: windows always hold window_steps
    active_cost: float = ACTIVE_COST
    background_cost: float = BACKGROUND_COST
    plan_share: float = PLAN_SHARE

    @classmethod
    def from_config(cls, config: Config) -> Policy:
        return cls(
            interval_steps=config.interval_steps,
            window_steps=config.window_steps,
            first_window_step=config.first_window_step,
            window_max_s=config.window_max_s,
            overhead_budget=config.overhead_budget,
            export_step_stretch=config.export_step_stretch,
        )


def next_window_start(step: int, policy: Policy) -> int:
    """The first aligned window start at or after `step`."""
    first = policy.first_window_step
    if step <= first:
        return first
    k = -(-step // policy.interval_steps)  # ceil
    return k * policy.interval_steps


def aligned_start(step: int, policy: Policy) -> int:
    """The latest aligned window start at or before `step` (`first_window_step` at least):
    a worker that joins late or whose steps jump still closes its window where the others
    close theirs."""
    k = step // policy.interval_steps * policy.interval_steps
    return k if k > policy.first_window_step else policy.first_window_step


def window_full(first_step: int, step: int, window_steps: int) -> bool:
    """True once the step that just ended completes the window's `window_steps` steps."""
    return step - first_step + 1 >= window_steps


def window_cost_s(active_s: float, background_s: float, policy: Policy) -> float:
    """Training seconds a window is estimated to cost (see the module doc)."""
    return active_s * policy.active_cost + background_s * policy.background_cost


def pause_after_s(cost_s: float, policy: Policy, step_share: float = 0.0) -> float:
    """How long the profiler rests after spending `cost_s`, to average out at the plan.

    `step_share` is the share of training time the per-step cost already takes; windows get
    the rest of the plan (never less than MIN_WINDOW_SHARE of it, or tiny steps would stop
    windows altogether).
    """
    plan = policy.overhead_budget * policy.plan_share
    share = max(plan - step_share, plan * MIN_WINDOW_SHARE)
    return cost_s / share


class Budget:
    """The duty-cycle budget: what windows cost so far and when the next one may open."""

    def __init__(self, policy: Policy, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self.clock = clock
        self.t0 = clock()
        self.not_before = self.t0  # the first window is always allowed
        self.cost_s = 0.0
        self.active_s = 0.0
        self.steps_cost_s = 0.0

    def allows(self, now: float | None = None) -> bool:
        return (self.clock() if now is None else now) >= self.not_before

    def charge(self, *, active_s: float = 0.0, background_s: float = 0.0, steps_s: float = 0.0,
               now: float | None = None) -> float:
        """Record a window's cost and the per-step work (`steps_s`, seconds on the training
        thread) since the last charge; returns the time the next window may open."""
        now = self.clock() if now is None else now
        cost = window_cost_s(active_s, background_s, self.policy)
        steps_cost = max(0.0, steps_s)
        self.steps_cost_s += steps_cost
        self.cost_s += cost + steps_cost
        self.active_s += active_s
        elapsed = now - self.t0
        step_share = self.steps_cost_s / elapsed if elapsed > 0 else 0.0
        self.not_before = max(self.not_before, now) + pause_after_s(cost, self.policy,
                                                                    step_share)
        return self.not_before

    def duty_cycle(self, now: float | None = None) -> float:
        """Share of wall time the profiler was tracing since the budget began."""
        elapsed = (self.clock() if now is None else now) - self.t0
        return min(1.0, self.active_s / elapsed) if elapsed > 0 else 0.0

    def overhead(self, now: float | None = None) -> float:
        """Estimated share of training time lost to tfobs since the budget began."""
        elapsed = (self.clock() if now is None else now) - self.t0
        return min(1.0, self.cost_s / elapsed) if elapsed > 0 else 0.0
