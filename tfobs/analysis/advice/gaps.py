"""Time outside the device's work: XProf's 'All Others' and host time between steps.

'All Others' is XProf's statement and thresholds (3 % moderate, 15 % high of step time;
not reported when the input verdict already blamed it: POTENTIALLY input-bound). The gap
between one step's end marker and the next one's start (Keras callbacks, metrics, Python
between steps) is tfobs's figure.
"""

from __future__ import annotations

from tfobs.analysis.advice.rule import GPU, PROFILER, Rule, category_advice
from tfobs.summary import Advice, WindowSummary

ALL_OTHERS = Rule(
    "all_others_bound", "gaps between steps",
    "'All Others' >= 3 % of step time (XProf: moderate >= 3 %, high >= 15 %)",
    "move Python work out of the step: wrap it in tf.function, run several steps per call "
    "(Model.compile(steps_per_execution=N))",
    f"{PROFILER}: Overview page (step-time graph); {GPU}: 2. Debug the performance of one GPU")
STEP_GAP = Rule(
    "step_gap", "gaps between steps",
    "host time between one step's end and the next one's start >= 10 % of the step period",
    "lighten or drop per-batch Keras callbacks and metrics, or run several steps per call "
    "with Model.compile(steps_per_execution=N)",
    f"{GPU}: 2. Debug the performance of one GPU (gaps between steps); "
    f"{PROFILER}: Best practices (steps_per_execution)")
RULES = (ALL_OTHERS, STEP_GAP)

GAP_SHARE = 0.10

# XProf's sentence (kAllOthersPythonExplanation), after the percentage.
ALL_OTHERS_TEXT = (" % of the total step time sampled is spent on 'All Others' time. "
                   "This could be due to Python execution overhead.")


def check(s: WindowSummary) -> list[Advice]:
    out: list[Advice] = []
    if s.input_bound.verdict != "potentially":  # the verdict already says it
        found = category_advice(ALL_OTHERS, s, "other", "'All Others'", ALL_OTHERS_TEXT)
        out += [found] if found else []
    gap = _gap(s)
    if gap is not None:
        out.append(gap)
    return out


def _gap(s: WindowSummary) -> Advice | None:
    items = s.steps.items
    if len(items) < 2:
        return None
    gaps = [max(0.0, (b.start_ns - a.start_ns) / 1e9 - a.duration_s)
            for a, b in zip(items, items[1:], strict=False)]
    period = (items[-1].start_ns - items[0].start_ns) / 1e9 / (len(items) - 1)
    mean_gap = sum(gaps) / len(gaps)
    share = mean_gap / period if period > 0 else 0.0
    if share < GAP_SHARE:
        return None
    return STEP_GAP.advice(
        "warning",
        f"{100 * share:.0f} % of each step period ({1e3 * mean_gap:.2f} ms of "
        f"{1e3 * period:.2f} ms) is host time between steps, outside the training step.",
        {"gap_s": mean_gap, "period_s": period, "gap_share": share},
        f"gap between steps >= {100 * GAP_SHARE:g} % of the step period (tfobs)")
