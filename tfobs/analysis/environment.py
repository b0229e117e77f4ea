"""Run environment: hosts, accelerator type and count, framework version, window span."""

from __future__ import annotations

from tfobs.summary import Environment
from tfobs.xspace.reader import PlaneView, SpaceView
from tfobs.xspace.schema import HOST_PLANE

_VERSION_STATS = ("framework_version", "tf_version", "jax_version", "build_version")
# Host events only one framework writes (JAX first: a JAX job fed by tf.data has both).
_JAX_EVENTS = ("PjitFunction(",)
_TF_EVENTS = ("FunctionRun", "EagerExecute", "EagerLocalExecute", "SessionRun",
              "__inference_", "Iterator::")
# Keras 3's fit loop as the Python tracer names its frames (its trainer and its epoch
# iterator; a trainer.py alone may be another library's).
_KERAS_FRAMES = ("$trainer.py:", "$epoch_iterator.py:")


def accelerator_planes(space: SpaceView) -> tuple[str, list[PlaneView]]:
    """("GPU" | "TPU" | "CPU", planes of that kind that recorded events)."""
    for kind in ("GPU", "TPU"):
        planes = [p for p in space.planes_with_prefix(f"/device:{kind}:")
                  if any(p.line_counts)]  # counted, not decoded
        if planes:
            return kind, planes
    return "CPU", []


def reduce_environment(space: SpaceView) -> Environment:
    kind, planes = accelerator_planes(space)
    version = ""
    keys: set[str] = set()
    for plane in space.planes:
        if plane.name in ("/host:metadata", "Task Environment", "/host:CPU"):
            stats = plane.plane_stats()
            for key in _VERSION_STATS:
                if isinstance(stats.get(key), str) and stats[key]:
                    version = stats[key]
                    keys.add(key)
    return Environment(
        hosts=tuple(h for h in space.hostnames if isinstance(h, str))[:64],
        device_type=kind,
        device_count=len(planes),
        framework_version=version[:200],
        framework=_framework(space, keys),
        keras=_keras(space),
    )


def _keras(space: SpaceView) -> bool:
    """Whether Keras's fit loop ran in the window: both of its frames are among the host's
    Python tracer events."""
    host = space.plane(HOST_PLANE)
    if host is None:
        return False
    seen = {prefix for n in host.used_event_names.values() for prefix in _KERAS_FRAMES
            if n.startswith(prefix)}
    return len(seen) == len(_KERAS_FRAMES)


def _framework(space: SpaceView, version_keys: set[str]) -> str:
    """Who wrote the capture: its version stat's name, else the host events only one
    framework writes; "" where neither tells."""
    if "jax_version" in version_keys:
        return "jax"
    if "tf_version" in version_keys:
        return "tensorflow"
    host = space.plane(HOST_PLANE)
    names = host.used_event_names.values() if host is not None else ()
    if any(n.startswith(_JAX_EVENTS) for n in names):
        return "jax"
    if any(n.startswith(_TF_EVENTS) for n in names):
        return "tensorflow"
    return ""


def window_span(space: SpaceView) -> tuple[int, float]:
    """(start ns since the epoch, duration s) from the profiler's own start/stop stats."""
    task = space.plane("Task Environment")
    if task is not None:
        stats = task.plane_stats()
        start, stop = stats.get("profile_start_time"), stats.get("profile_stop_time")
        if isinstance(start, int) and isinstance(stop, int) and 0 < start <= stop < 2**62:
            return start, (stop - start) / 1e9
    return 0, 0.0
