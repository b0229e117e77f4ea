"""How many steps the next window traces: `window_steps`, or fewer where the window's export
slows the step it overlaps by more than `export_step_stretch` times a usual step.

TensorFlow exports a capture in one thread of the job, and that export's CPU grows with the
steps traced (19-21 ms of CPU for 20 steps of the demo model, 4-5 ms for 5; RESULTS.md).
Where training keeps every core busy (a CPU job; a GPU job whose input pipeline fills the
host), the step that overlaps the export loses a core to it: 20-step windows made that step
2.2-2.7x the median on 2 cores, against 1.4-1.6x with a core left free. The steps traced
are the one lever tfobs has over the export, so the length is steered by what the export
was measured to do, not by a guess about the machine:

* After each window the training thread reports the longest step that overlapped the export
  and the median of the steps just before the window; their ratio is the stretch.
* A stretch over the limit moves the next window down to the rung predicted to meet it
  (the slowdown taken as proportional to the steps traced); two windows in a row with room
  for twice the steps move it one rung up. A rung whose window broke the limit is not
  tried again for RETRY_AFTER windows, twice that after each new failure (up to
  MAX_RETRY_AFTER): short windows often look roomier than the long one proved to be.
* Lengths move on a ladder, `window_steps` halved down to MIN_STEPS, so the workers of a
  synchronous job, which all wait on the same slow step, land on the same length and keep
  profiling the same steps.
* Before anything is measured, the first window is full length where a core is free over
  the steps just before it (the job's process used less than `usable_cores() - FREE_CORE`
  cores and the machine had FREE_CORE idle: a GPU job's host, usually), and starts at the
  lowest rung where none is: there the export is known to take a core from someone, the
  steps or a neighbour the steps then wait for.
"""

from __future__ import annotations

import math
import os

MIN_STEPS = 5  # fewer leaves XProf 3 steps once it drops the first and the last
GROW_AFTER = 2  # windows in a row with room for twice the steps before a rung up
RETRY_AFTER = 8  # windows before a rung that broke the limit is tried again (4000 steps)
MAX_RETRY_AFTER = 64
FREE_CORE = 0.75  # cores training must leave idle for the first window to be full
MIN_TICKS = 20  # /proc/stat counts in 10 ms ticks: fewer over the probe say nothing


def machine_ticks() -> tuple[int, int] | None:
    """(idle, total) CPU ticks of the whole machine so far (/proc/stat); None where
    unreadable."""
    try:
        with open("/proc/stat", "rb") as f:
            user, nice, system, idle, iowait, irq, softirq, steal = (
                int(x) for x in f.readline().split()[1:9])
    except (OSError, ValueError):
        return None
    return idle + iowait, user + nice + system + idle + iowait + irq + softirq + steal


def idle_cores(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """Cores the machine left idle between two `machine_ticks()`, or None when unknown."""
    if before is None or after is None or after[1] - before[1] < MIN_TICKS:
        return None
    share = (after[0] - before[0]) / (after[1] - before[1])
    return share * (os.cpu_count() or 1)


def usable_cores() -> float:
    """Cores this process may run on: its CPU affinity, capped by a cgroup v2 CPU quota
    (a container's `cpu` limit)."""
    try:
        cores = float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        cores = float(os.cpu_count() or 1)
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            cores = min(cores, max(int(quota) / int(period), 0.01))
    except (OSError, ValueError):
        pass
    return cores


def ladder(window_steps: int) -> tuple[int, ...]:
    """The lengths a window may take, longest first: `window_steps`, then halved (rounded
    up) while at least MIN_STEPS."""
    rungs = [window_steps]
    while math.ceil(rungs[-1] / 2) >= MIN_STEPS and rungs[-1] > MIN_STEPS:
        rungs.append(math.ceil(rungs[-1] / 2))
    return tuple(rungs)


class WindowLength:
    """The steps of the next window; `observe` feeds it each window's measured stretch."""

    def __init__(self, window_steps: int, stretch_limit: float) -> None:
        self.rungs = ladder(window_steps) if stretch_limit > 0 else (window_steps,)
        self.limit = stretch_limit
        self._rung = 0
        self._room = 0  # windows in a row that had room for twice the steps
        self._seen = 0  # windows observed
        self._retry_at: dict[int, int] = {}  # rung -> first window that may try it again
        self._wait: dict[int, int] = {}  # rung -> windows it waits after its last failure

    @property
    def steered(self) -> bool:
        """False where the length never changes (off, or `window_steps` under 2 rungs)."""
        return len(self.rungs) > 1

    def first_window(self, busy_cores: float, cores: float, idle: float | None = None) -> int:
        """Before any window was measured: the lowest rung when the job used nearly every
        core it may use, or the machine had no core idle (`idle`, None: unknown), over the
        steps before the window; else the full length."""
        busy = busy_cores > cores - FREE_CORE or (idle is not None and idle < FREE_CORE)
        if self._seen == 0 and busy:
            self._rung = len(self.rungs) - 1
        return self.steps

    @property
    def steps(self) -> int:
        return self.rungs[self._rung]

    def observe(self, stretch: float, traced_steps: int) -> int:
        """A window of `traced_steps` steps stretched the step overlapping its export by
        `stretch` (worst overlapping step / median step); returns the next length."""
        if not self.steered or traced_steps <= 0 or not math.isfinite(stretch):
            return self.steps
        excess = max(stretch - 1.0, 0.0)
        self._seen += 1
        if stretch > self.limit:
            self._room = 0
            wait = min(self._wait.get(self._rung, RETRY_AFTER // 2) * 2, MAX_RETRY_AFTER)
            self._wait[self._rung] = wait
            self._retry_at[self._rung] = self._seen + wait
            # The slowdown grows with the steps traced: the most steps predicted to keep
            # the stretch at the limit, and the longest rung not above it (the lowest one
            # when none is), never longer than now.
            fits = traced_steps * (self.limit - 1.0) / excess
            self._rung = max(self._rung,
                             next((i for i, r in enumerate(self.rungs) if r <= fits),
                                  len(self.rungs) - 1))
            return self.steps
        up = self._rung - 1
        if up >= 0 and 1.0 + excess * self.rungs[up] / traced_steps <= self.limit \
                and self._seen >= self._retry_at.get(up, 0):
            self._room += 1
            if self._room >= GROW_AFTER:
                self._rung -= 1
                self._room = 0
        else:
            self._room = 0
        return self.steps
