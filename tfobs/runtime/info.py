"""Who this worker is, for `tfobs_info` and the OpenTelemetry resource.

Device names come from TensorFlow only once the job has run a step (a device query would
initialise TensorFlow's runtime before the job configures it); before that they are empty.
"""

from __future__ import annotations

import logging
import os
import platform
import sys
from typing import Any

_log = logging.getLogger(__name__)


def info_labels(query_devices: bool) -> dict[str, str]:
    """tfobs, Python and TensorFlow versions and (when `query_devices`) the device names."""
    from tfobs import __version__

    labels = {"version": __version__, "python_version": platform.python_version(),
              "tensorflow_version": "", "jax_version": "", "devices": ""}
    # never import a framework just for a version string
    tf, jax = _done("tensorflow"), _done("jax")
    if tf is not None:
        labels["tensorflow_version"] = str(getattr(tf, "__version__", ""))
        if query_devices:
            labels["devices"] = ",".join(_devices(tf))
    if jax is not None:
        labels["jax_version"] = str(getattr(jax, "__version__", ""))
        if query_devices and not labels["devices"]:
            labels["devices"] = ",".join(_jax_devices(jax))
    return labels


def _done(name: str) -> Any:
    """The module if the job has finished importing it (never half-imported: reading one
    from this thread while the job's thread imports it can deadlock or fail)."""
    from tfobs.capture.import_watch import imported

    return sys.modules.get(name) if imported(name) else None


def _jax_devices(jax: Any) -> list[str]:
    try:
        return sorted(f"/device:{d.platform.upper()}:{d.id}" for d in jax.local_devices())
    except Exception:  # a label left empty, not a failed enable()
        _log.debug("tfobs: JAX devices unreadable", exc_info=True)
        return []


def _devices(tf: Any) -> list[str]:
    try:
        found = tf.config.list_physical_devices()
    except Exception:  # a label left empty, not a failed enable()
        _log.debug("tfobs: TensorFlow devices unreadable", exc_info=True)
        return []
    return sorted(d.name.replace("/physical_device:", "/device:") for d in found)


def worker_resource(identity: dict[str, str]) -> dict[str, Any]:
    """What the runtime adds to the OTel resource (`otel.resource_attributes` fills in the
    service, host and versions): the worker identity, the process and its devices."""
    tf = _done("tensorflow")
    return {"process.pid": os.getpid(),
            **identity,  # tf_job, tf_task, tf_cluster, local_rank
            "devices": _devices(tf) if tf is not None else []}
