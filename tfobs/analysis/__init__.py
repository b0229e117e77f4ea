"""Reduction: one XSpace capture -> one `WindowSummary` (pure functions, no TensorFlow).

`pipeline.reduce_xspace` runs every analysis over one parse of the capture: `timeline` visits
each line of each plane once into flat lists; `steps`, `breakdown`, `ops`, `input_pipeline`,
`tfdata`, `memory`, `gpu_idle` and `kernels` read them; `advice` reads the finished figures.
It runs in the reduce helper process, not in the training job: nothing outside this package
and the helper imports it (the exporters read fixed label sets from `tfobs.summary`).

`tfobs.analysis.analyze` and `tfobs.analysis.reduce_xspace` are the pipeline's, loaded on
first use, so importing one analysis module does not load them all.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["analyze", "reduce_xspace"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("tfobs.analysis.pipeline"), name)
    raise AttributeError(f"module 'tfobs.analysis' has no attribute {name!r}")
