"""What a rule is, the guides' sections it cites, and the window figures rules share."""

from __future__ import annotations

import operator
import weakref
from dataclasses import dataclass

import numpy as np

from tfobs.summary import CATEGORIES, Advice, RuleId, Steps, WindowSummary

# The three guides the fixes come from, as "<guide>: <section>".
PROFILER = "TensorFlow Profiler guide (tensorflow.org/guide/profiler)"
GPU = ("Optimize TensorFlow GPU performance with the TensorFlow Profiler "
       "(tensorflow.org/guide/gpu_performance_analysis)")
TFDATA = "tf.data performance guide (tensorflow.org/guide/data_performance)"
# A JAX job's own documentation, where a rule's fix in JAX's terms has a source of its own.
JAX_DOCS = "JAX documentation (docs.jax.dev)"

@dataclass(frozen=True)
class Rule:
    """One recommendation: its stable id, when it fires, the fix and where the fix is from."""

    id: RuleId  # one of tfobs.summary.RULE_IDS
    family: str
    fires_when: str  # the README's sentence
    fix: str
    guide: str
    # The fix in a JAX job's terms, where `fix` names TensorFlow's (tf.function, Keras,
    # TF_GPU_THREAD_MODE); "" where `fix` holds for both.
    jax_fix: str = ""
    # Where `jax_fix` comes from, where `guide` is TensorFlow's alone; "" keeps `guide`.
    jax_guide: str = ""

    def advice(self, severity: str, message: str, evidence: dict[str, float],
               threshold: str, fix: str = "") -> Advice:
        return Advice(self.id, severity, message, dict(evidence), threshold,
                      fix or self.fix, self.guide)


def step_pct(s: WindowSummary, category: str) -> float:
    """A category's share of the total step time in percent, as XProf sums it over steps."""
    total, sums = _step_sums(s.steps)
    if total > 0:
        return 100.0 * sums.get(category, 0.0) / total
    return 100.0 * s.breakdown_ratio.get(category, 0.0)


def step_total_s(s: WindowSummary, category: str = "") -> float:
    """The steps' total time, or one category's summed over the steps (seconds)."""
    total, sums = _step_sums(s.steps)
    return sums.get(category, 0.0) if category else total


# The last window's step sums, as one tuple (one read and one write: safe across the
# reduce threads): every rule reads them, and a long window has thousands of steps. The
# steps are held weakly: the cache never keeps a window's thousands of steps alive. The
# last item: each step's seconds per category (rows in step order, CATEGORIES' columns).
_LAST: tuple[weakref.ref[Steps] | None, float, dict[str, float], np.ndarray | None] = (
    None, 0.0, {}, None)


def remember_step_sums(steps: Steps, total_s: float, sums: dict[str, float],
                       seconds: np.ndarray | None = None) -> None:
    """The reduction's own sums over `steps.items` (step time, and each category's, added
    left to right over the steps as `_step_sums` adds them), so the rules need not add
    them again; `seconds`: the steps' breakdowns as the array their dicts were made of."""
    global _LAST
    _LAST = (weakref.ref(steps), total_s, sums, seconds)


def _step_sums(steps: Steps) -> tuple[float, dict[str, float]]:
    global _LAST
    last = _LAST
    if last[0] is None or last[0]() is not steps:
        sums: dict[str, float] = {}
        for st in steps.items:
            for k, v in st.breakdown_s.items():
                sums[k] = sums.get(k, 0.0) + v
        # the same left-to-right float sums as summing each category over the steps
        last = _LAST = (weakref.ref(steps), sum(st.duration_s for st in steps.items), sums,
                        None)
    return last[1], last[2]


def step_seconds(steps: Steps, category: str) -> np.ndarray:
    """Each step's seconds in one category, in step order (a long window's thousands of
    steps read from the reduction's own array where it is at hand)."""
    last = _LAST
    if (last[0] is not None and last[0]() is steps and last[3] is not None
            and category in CATEGORIES and last[3].shape == (len(steps.items), len(CATEGORIES))):
        return np.ascontiguousarray(last[3][:, CATEGORIES.index(category)])
    return np.array([st.breakdown_s.get(category, 0.0) for st in steps.items], np.float64)


# The last window's step fields read as arrays (same tuple discipline as _LAST).
_FIELDS: tuple[weakref.ref[Steps] | None, dict[str, np.ndarray]] = (None, {})


def remember_step_fields(steps: Steps, start_ns: np.ndarray | None,
                         duration_s: np.ndarray) -> None:
    """The reduction's own columns of the steps' start (None where it has none) and
    duration, which their items were made of, for `step_field`."""
    global _FIELDS
    columns = {"duration_s": duration_s}
    if start_ns is not None:
        columns["start_ns"] = start_ns
    if all(c.shape == (len(steps.items),) for c in columns.values()):
        for c in columns.values():
            c.flags.writeable = False  # shared by the rules
        _FIELDS = (weakref.ref(steps), columns)


def step_field(steps: Steps, name: str) -> np.ndarray:
    """Each step's `name` ("start_ns": int64, "duration_s": float64) in step order, read
    once per window: several rules read them, and a long window has thousands of steps."""
    global _FIELDS
    last = _FIELDS
    if last[0] is None or last[0]() is not steps:
        last = _FIELDS = (weakref.ref(steps), {})
    column = last[1].get(name)
    if column is None:
        dtype = np.int64 if name == "start_ns" else np.float64
        column = np.fromiter(map(operator.attrgetter(name), steps.items), dtype,
                             len(steps.items))
        column.flags.writeable = False  # shared by the rules
        last[1][name] = column
    return column


def step_gaps(steps: Steps) -> tuple[np.ndarray, np.ndarray]:
    """(seconds from each step's start to the next's, the time between each step's end and
    the next's start, 0 where they overlap), for every step but the last."""
    start = step_field(steps, "start_ns")
    apart = (start[1:] - start[:-1]) / 1e9
    # Each as max(0.0, apart - duration) gives it (0.0 for -0.0 too), all at once.
    gap = apart - step_field(steps, "duration_s")[:-1]
    return apart, np.where(gap > 0.0, gap, 0.0)


# A step waiting in queue.get / Future.result for its batch: the job's own loader thread or
# process already works ahead of the step, and does not keep up.
LOADER_WAIT_FIX = (
    "the step waits for its batch from the job's own loader (queue.Queue.get, "
    "Future.result), which already works ahead of the step and does not keep up: loading "
    "further ahead cannot help. Give the loader more workers (threads for I/O; processes "
    "for Python or numpy work, which one thread runs under the GIL: multiprocessing, "
    "grain's worker_count, tf.data's parallel map), or make each batch cheaper "
    "(vectorize per-sample Python); timing the loader's function alone shows what it "
    "delivers per batch")


def loader_wait_pct(s: WindowSummary) -> float:
    """The steps' wait for a batch from the job's own loader, in percent of step time."""
    st = s.steps
    return 100.0 * st.python_loader_wait_s / st.mean_s if st.mean_s > 0 else 0.0


def one_digit(x: float) -> str:
    return f"{x:.1f}"


# XProf's moderate and high shares for 'All Others', 'Kernel Launch' and 'Device Collective
# Communication' (kHighlyAllOtherBoundThresholdInPercent and its siblings: all 15 %).
MODERATE_PCT = 3.0
HIGH_PCT = 15.0


def category_advice(rule: Rule, s: WindowSummary, category: str, label: str, sentence: str,
                    extra: dict[str, float] | None = None) -> Advice | None:
    """XProf's rule on one category's share of step time: info from 3 %, warning from
    15 %, the message XProf's sentence after the share; None below 3 % or without steps."""
    pct = step_pct(s, category)
    if not s.steps.count or pct < MODERATE_PCT:
        return None
    return rule.advice(
        "warning" if pct >= HIGH_PCT else "info", one_digit(pct) + sentence,
        {f"{category}_pct": pct, **(extra or {})},
        f"{label} >= {MODERATE_PCT:g} % moderate, >= {HIGH_PCT:g} % high (XProf)")


def tfdata_in_use(s: WindowSummary) -> bool:
    """XProf's TfDataInUse: reads or preprocessing seen (enqueue alone is not tf.data)."""
    t = s.input_pipeline.host_input_total_s or s.input_pipeline.host_input_s
    return any(t.get(k, 0.0) > 0 for k in ("demanded_file_read", "advanced_file_read",
                                             "preprocessing"))


def on_gpu(s: WindowSummary) -> bool:
    return s.environment.device_type == "GPU"


# 'All Others' that is mostly XLA's CPU runtime running the step's compiled work on threads
# no step is linked to (a JAX job's Eigen threads): compute the step waits for, not Python.
RUNTIME_SHARE = 0.5  # of the step's 'All Others'


def runtime_holds_other(s: WindowSummary) -> bool:
    """Whether most of the steps' 'All Others' is that compiled work (`work_in_other_s`)."""
    other = s.breakdown_s.get("other", 0.0)
    return other > 0 and s.steps.work_in_other_s >= RUNTIME_SHARE * other


# Another Python thread running Python through the steps (`steps.python_other_thread_s`):
# named from this share of step time (python_thread_contention).
OTHER_THREAD_SHARE = 0.5


def other_thread_share(st: Steps) -> float:
    """The busiest other Python thread's Python as a share of step time, where it is
    `OTHER_THREAD_SHARE` or more; else 0."""
    share = st.python_other_thread_s / st.mean_s if st.count and st.mean_s > 0 else 0.0
    return share if share >= OTHER_THREAD_SHARE else 0.0


def window_steps(s: WindowSummary) -> float:
    """The steps a window's totals (op time, tf.data's threads' time) were spent over: the
    window's length over the step period (the kept steps, the dropped first and last, parts
    of others), at least the kept steps. Dividing such a total by the kept steps alone
    reads more than a step holds."""
    st = s.steps
    by_period = s.duration_s / st.interval_s if st.interval_s > 0 else 0.0
    return max(float(st.count), by_period)


# The steps a window holds beyond the kept ones whose ops it recorded: the dropped first and
# last (a step the profiler's start or stop cuts writes little of its work).
DROPPED_STEPS = 2


# The share of the kept steps that must make a dataset iterator from Python for the
# window to be a loop taking each batch with `next(iter(dataset))` (an evaluation inside
# every fifth step makes one there too, and is no such loop).
ITERATOR_STEPS_SHARE = 0.5


def iterator_each_step(s: WindowSummary) -> bool:
    """Whether the steps make a new dataset iterator from Python (at least 2 of them, and
    `ITERATOR_STEPS_SHARE` of the kept steps): tfdata_iterator_per_step."""
    st = s.steps
    return st.count >= 2 and s.input_pipeline.step_iterators >= max(
        2, ITERATOR_STEPS_SHARE * st.count)


def steps_run(s: WindowSummary) -> float:
    """The steps whose ops a window's totals of ops that run only inside steps hold (an
    optimizer's update, an in-graph loop's ops): `window_steps`, but at most the kept steps
    and the dropped first and last. A window that also holds time with no step running (a
    capture begun before `fit`, which builds its iterator and function first, or ended
    after it) ran no such op there: its length over the step period would divide a step's
    totals by steps that never ran."""
    return max(float(s.steps.count),
               min(window_steps(s), float(s.steps.count + DROPPED_STEPS)))
