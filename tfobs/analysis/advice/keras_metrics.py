"""The metrics compiled into a Keras train step, against the step.

Keras updates every compiled metric in every training step. Most cost nothing beside the
model; a metric that scans thresholds (AUC, PrecisionAtRecall, SensitivityAtSpecificity:
a confusion matrix per threshold, cumulative sums over them) costs in proportion to its
thresholds, and with thousands of them outweighs a small model's whole step. XProf lists
the ops (unscoped: `StatefulPartitionedCall/Cumsum_3`) and says nothing; tfobs sums the
step's ops outside its model's, loss's, gradient's and optimizer's name scopes
(`ops.keras_top_level_s`).
"""

from __future__ import annotations

from tfobs.analysis.advice.rule import PROFILER, Rule, steps_run
from tfobs.summary import Advice, WindowSummary

METRICS = Rule(
    "keras_metrics_cost", "keras metrics",
    "a Keras train step's ops outside its model's, loss's (compile_loss/), gradient's and "
    "optimizer's name scopes (its metrics' updates) >= 30 % of the window's op time and "
    ">= 20 % of the steps' time, tf.data's iterators left out",
    "keep the training step's metrics cheap: a metric that scans thresholds (AUC, "
    "PrecisionAtRecall, SensitivityAtSpecificity) costs per threshold in every step, so "
    "give it fewer (AUC's default num_thresholds=200) or measure it only in evaluate() / "
    "on the validation data (compile the model for training without it and evaluate "
    "with a model compiled with it, or compute it in a callback at the epoch's end); "
    "time a few steps compiled without the metric to see what it costs",
    f"{PROFILER}: TensorFlow stats (the op table); Keras metrics (keras.io/api/metrics): "
    "AUC's num_thresholds")
RULES = (METRICS,)
OP_SHARE = 0.3  # of the window's op time
STEP_SHARE = 0.2  # of the steps' time


def check(s: WindowSummary) -> list[Advice]:
    ops = s.ops
    op_s = ops.host_s + ops.device_s - sum(st.self_s for st in s.input_pipeline.stages)
    if ops.keras_top_level_s <= 0 or op_s <= 0 or not s.steps.count:
        return []
    share = ops.keras_top_level_s / op_s
    per_step = ops.keras_top_level_s / steps_run(s)
    step_share = per_step / s.steps.mean_s if s.steps.mean_s > 0 else 0.0
    if share < OP_SHARE or step_share < STEP_SHARE:
        return []
    return [METRICS.advice(
        "warning",
        f"Keras's train step spends {100 * share:.0f} % of its op time "
        f"({1e3 * per_step:.2f} ms per step, {100 * step_share:.0f} % of the "
        f"{1e3 * s.steps.mean_s:.2f} ms step) outside the model, the loss, the gradient and "
        "the optimizer: in the compiled metrics' updates (top op types: "
        f"{', '.join(ops.keras_top_level_types)}).",
        {"metrics_s_per_step": per_step, "metrics_share_of_ops": share,
         "metrics_share_of_step": step_share},
        f"Keras step ops outside the model's, loss's, gradient's and optimizer's scopes >= "
        f"{100 * OP_SHARE:g} % of op time and >= {100 * STEP_SHARE:g} % of step time "
        "(tfobs)")]
