"""tfobs: a TensorFlow training job that explains its own efficiency while it runs.

`import tfobs` stays light: TensorFlow, OpenTelemetry and the HTTP server load only when
`enable()` (or a command that needs them) runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tfobs.errors import CaptureError, ConfigError
from tfobs.summary import WindowSummary

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

__version__ = "0.1.0"

__all__ = [
    "CaptureError",
    "ConfigError",
    "KerasCallback",
    "WindowSummary",
    "analyze",
    "capture_now",
    "disable",
    "enable",
    "step",
    "__version__",
]


def analyze(source: Any, **options: Any) -> WindowSummary:
    """Reduce one capture (path, TensorBoard log folder, or XSpace bytes) to a summary."""
    from tfobs.analysis import analyze as _analyze

    return _analyze(source, **options)


def enable(**options: Any) -> Any:
    """Start tfobs in this training process; returns the running handle (idempotent)."""
    from tfobs.runtime import enable as _enable

    return _enable(**options)


def disable(timeout_s: float = 5.0) -> None:
    """Stop tfobs: close any open window, stop threads and the HTTP server."""
    from tfobs.runtime import disable as _disable

    _disable(timeout_s=timeout_s)


def capture_now() -> bool:
    """Ask for a profile window at the next step, within the duty-cycle budget."""
    from tfobs.runtime import capture_now as _capture_now

    return _capture_now()


def step(step_num: int) -> AbstractContextManager[None]:
    """Mark one training step of a custom loop: `with tfobs.step(i): ...`."""
    from tfobs.capture.markers import step as _step

    return _step(step_num)


def __getattr__(name: str) -> Any:
    if name == "KerasCallback":  # imports TensorFlow/Keras, so only on first use
        from tfobs.capture.markers import KerasCallback

        return KerasCallback
    raise AttributeError(f"module 'tfobs' has no attribute {name!r}")
