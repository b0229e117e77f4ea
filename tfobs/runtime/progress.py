"""tfobs's lines in the job's own log: one when `enable()` starts it (where the figures are
served, when the first window comes), one per window (step time, verdict, the top advice,
when the next window comes), one when `enable()` is called again (a notebook cell re-run).

They are INFO records of the `tfobs.progress` logger. Where the job has set no logging up
(no handler between that logger and the root), a handler of tfobs's own writes them to
stderr, so a script that only calls `enable()` sees them; once the job configures logging
(`logging.basicConfig`, a framework's handlers), the job's handlers take them in its own
format and tfobs's writes nothing, so no line shows twice. `quiet` (`TFOBS_QUIET`) turns
them off; warnings and errors of the `tfobs` logger show either way.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, TextIO

from tfobs.capture.schedule import next_window_start
from tfobs.once import OncePer
from tfobs.summary import WindowSummary
from tfobs.window import WindowRecord

if TYPE_CHECKING:
    from tfobs.runtime.core import Runtime

    _StreamHandler = logging.StreamHandler[TextIO]
else:
    _StreamHandler = logging.StreamHandler  # subscriptable at run time from Python 3.11 only

LOGGER = logging.getLogger("tfobs.progress")

# Outcomes said once per job: a budget or a busy profiler may skip every due window, and a
# line for each would be noise; the counts are in tfobs_windows_total.
_ONCE = {"skipped_budget", "skipped_busy"}


class _WhenUnconfigured(_StreamHandler):
    """Writes to the current sys.stderr only while no other handler would take the record."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)
        self.setFormatter(logging.Formatter("%(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if _others_handle(self):
            return  # the job's logging prints it, in its format
        self.setStream(sys.stderr)  # a notebook or a test may have replaced it
        super().emit(record)


def _others_handle(own: logging.Handler) -> bool:
    logger: logging.Logger | None = LOGGER
    while logger is not None:
        if any(h is not own for h in logger.handlers):
            return True
        if not logger.propagate:
            return False
        logger = logger.parent
    return False


_HANDLER = _WhenUnconfigured()


def configure(quiet: bool) -> None:
    """Called by `enable()`: the lines show at INFO unless `quiet`."""
    LOGGER.setLevel(logging.WARNING if quiet else logging.INFO)
    if _HANDLER not in LOGGER.handlers:
        LOGGER.addHandler(_HANDLER)


def say(message: str, *args: object) -> None:
    """One line in the job's log (never raises into the caller)."""
    try:
        LOGGER.info(message, *args)
    except Exception:  # a broken stream or handler of the job's: tfobs stays out of the way
        pass


def started(runtime: Runtime) -> str:
    """The line at `enable()`."""
    cfg = runtime.config
    if runtime.metrics_url:
        page = runtime.metrics_url.removesuffix("metrics")
        where = f"page {page} , metrics {runtime.metrics_url}"
    else:
        where = "no metrics server (metrics_port=-1)"
    if cfg.interval_steps > cfg.first_window_step:
        when = (f"first window at step {cfg.first_window_step}, then every "
                f"{cfg.interval_steps} steps")
    else:
        when = f"a window every {cfg.interval_steps} steps"
    return (f"tfobs: profiling this job; {where}; {when} (up to {cfg.window_steps} steps, "
            f"{cfg.overhead_budget:.0%} budget); TFOBS_QUIET=1 hides these lines")


def budget_wait_s(runtime: Runtime) -> float:
    """Seconds until the duty-cycle budget allows the next window (0: it does now)."""
    return max(0.0, runtime.budget.not_before - runtime.budget.clock())


def next_window(runtime: Runtime, after_step: int, step_s: float = 0.0) -> str:
    """When the next scheduled window comes, as a phrase: its step, and, with the step time
    (`step_s`), about when; or when the budget lets it, where the budget rests longer."""
    policy = runtime.policy
    # The plan's own next start where there is one: it moved on past a window that failed
    # to open (`after_step` -1) and starts over where the step numbers did.
    planned = runtime.next_scheduled_step() if hasattr(runtime, "next_scheduled_step") else -1
    step = planned if planned >= 0 else next_window_start(max(after_step, 0) + 1, policy)
    wait_s = budget_wait_s(runtime)
    reach_s = (step - after_step) * step_s if step_s > 0 else 0.0
    text = f"next window at step {step}"
    if wait_s > max(reach_s, 1.0):
        text += (f" if the {policy.overhead_budget:.0%} budget allows (in about "
                 f"{wait_s:.0f} s of training)")
    elif reach_s >= 1.0:
        text += f" (in about {reach_s:.0f} s)"
    return text


def refused(runtime: Runtime) -> str:
    """Why `capture_now()` said no, and when to ask again."""
    if not runtime.running:
        return "tfobs: capture_now(): tfobs is not running in this process"
    if not runtime.idle:
        return ("tfobs: capture_now(): a window is being captured or reduced; ask again once "
                "it is published")
    wait_s = budget_wait_s(runtime)
    if wait_s > 0:
        return (f"tfobs: capture_now(): the {runtime.policy.overhead_budget:.0%} overhead "
                f"budget allows the next window in about {max(wait_s, 1):.0f} s; ask again "
                "then (overhead_budget / TFOBS_OVERHEAD_BUDGET sets the budget)")
    return "tfobs: capture_now(): a window is already asked for; it opens at the next step"


def top_advice(summary: WindowSummary) -> str:
    """The first warning or critical rule that names a specific fix, else the first one."""
    shown = [a for a in summary.advice if a.severity in ("critical", "warning")]
    if not shown:
        return "no advice above info"
    shown.sort(key=lambda a: a.severity != "critical")  # critical first, order kept
    first = next((a for a in shown if a.code != "input_bound"), shown[0])
    more = f" (+{len(shown) - 1} more on the page)" if len(shown) > 1 else ""
    return f"advice {first.code}: {first.fix or first.message}{more}"


def window_line(runtime: Runtime, record: WindowRecord, summary: WindowSummary | None,
                seen: OncePer) -> str:
    """The line for one window's end ('' when it is not worth a line: a repeated skip)."""
    if record.outcome in _ONCE:
        if not seen.first(record.outcome):
            return ""
        return (f"tfobs: a due window was skipped ({record.outcome}: {record.reason}); later "
                "skips are counted in tfobs_windows_total, not logged")
    head = f"tfobs: window {record.index}"
    if record.outcome != "captured" or summary is None:
        reason = f": {record.reason}" if record.reason else ""
        return f"{head} {record.outcome}{reason}; {next_window(runtime, record.last_step)}"
    ib = summary.input_bound
    step = (f"step {summary.steps.mean_s * 1e3:.1f} ms" if summary.steps.count
            else "no steps measured")
    cut = f" ({record.cut})" if record.cut else ""
    step_s = summary.steps.mean_s if summary.steps.count else 0.0
    return (f"{head}, steps {record.first_step}-{record.last_step}{cut}: {step}, "
            f"input-bound: {ib.verdict} ({ib.ratio:.0%}); {top_advice(summary)}; "
            f"{next_window(runtime, record.last_step, step_s)}")


def again(runtime: Runtime, options_differ: bool) -> str:
    """The line for `enable()` called while tfobs already runs (a notebook cell run again)."""
    captured = runtime.health.windows.get("captured", 0)
    ignored = ("; the new options are ignored until tfobs.disable()" if options_differ
               else "")
    upcoming = runtime.next_scheduled_step()
    when = f"the next window opens at step {upcoming}" if upcoming >= 0 else \
        "no window is scheduled"
    wait_s = budget_wait_s(runtime)
    if wait_s > 0:
        when += (f" (the {runtime.policy.overhead_budget:.0%} budget allows one in about "
                 f"{max(wait_s, 1):.0f} s)")
    return (f"tfobs: already enabled in this process ({captured} window(s) captured, "
            f"{runtime.health.steps} steps seen){ignored}; {when}; for a window at the next "
            "step call tfobs.capture_now()")
