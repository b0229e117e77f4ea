"""Who this process is in a job: the labels every metric and span carries.

`tf_job`/`tf_task` come from TF_CONFIG's task (or the tf_job/tf_task options), `tf_cluster`
from its cluster spec, `local_rank` from the launcher's rank variables. Every value is a short
plain label value, whatever TF_CONFIG holds: a long or odd task type would otherwise become a
long, odd label value on every series.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Mapping
from typing import Protocol

_log = logging.getLogger(__name__)

# Environment variables that carry a process's rank on its host (torchrun/Horovod/MPI/Slurm).
LOCAL_RANK_VARS: tuple[str, ...] = (
    "LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "SLURM_LOCALID",
)
MAX_LOCAL_RANK_DIGITS = 5
# The most characters of one identity label value (tf_job, tf_task), from TF_CONFIG or the
# options alike.
MAX_IDENTITY_VALUE = 32
LABEL_CHARS = "A-Z a-z 0-9 _ . : -"  # the characters a label value keeps, for messages
_LABEL_TEXT = re.compile(r"[A-Za-z0-9_.:-]*")
_NOT_LABEL_TEXT = re.compile(r"[^A-Za-z0-9_.:-]+")
# Task types that run no training steps of their own: tfobs schedules no windows there.
STEPLESS_TASK_TYPES: frozenset[str] = frozenset({"ps", "evaluator"})


class IdentityOptions(Protocol):
    """The options that name this worker (a `tfobs.config.Config` has them)."""

    @property
    def tf_job(self) -> str: ...

    @property
    def tf_task(self) -> str: ...


def is_label_value(text: str) -> bool:
    """True when `text` is a label value as it is: short and of plain characters only."""
    return len(text) <= MAX_IDENTITY_VALUE and _LABEL_TEXT.fullmatch(text) is not None


def label_value(raw: object, default: str) -> str:
    """`raw` as a bounded label value: odd characters become `_`, at most 32 characters. A
    value changed so ends in `-` and 8 hex digits of the original, so two identities that
    clean alike (`a}b`, `a_b`; two long names with one start) stay two label values."""
    text = str(raw).strip()
    clean = _NOT_LABEL_TEXT.sub("_", text)
    if clean != text or len(clean) > MAX_IDENTITY_VALUE:
        clean = f"{clean[:MAX_IDENTITY_VALUE - 9]}-{distinct_suffix(text)}"
    return clean or default


def distinct_suffix(text: str) -> str:
    """8 hex digits of `text`: what keeps a cleaned name apart from another's."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def keep_ends(text: str, limit: int, middle: str = "...") -> str:
    """`text`, at most `limit` characters: where longer, its start and its end (a name's own
    kind) joined by `middle`."""
    if len(text) <= limit:
        return text
    head = (limit - len(middle)) // 2
    return text[:head] + middle + text[-(limit - len(middle) - head):]


def local_rank(environ: Mapping[str, str] | None = None) -> int:
    """This process's rank among the training processes on its host (0 when unknown)."""
    env = os.environ if environ is None else environ
    for var in LOCAL_RANK_VARS:
        raw = env.get(var, "").strip()
        # ASCII digits only ("²".isdigit() is True) and a sane length (int() of 5,000 digits
        # raises): anything else is not a rank.
        if raw.isascii() and raw.isdigit() and len(raw) <= MAX_LOCAL_RANK_DIGITS:
            return int(raw)
    return 0


def worker_identity(
    config: IdentityOptions | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The labels naming this process in a job (every metric, every span carries them):

    * `tf_job`, `tf_task`: TF_CONFIG's task type and index (the tf_job/tf_task options win,
      already checked to be label values), else `local`/`0`;
    * `tf_cluster`: 8 hex digits of TF_CONFIG's cluster spec, the same on every task of one
      job and different between jobs, so job-wide rules group by it (`none` without one);
    * `local_rank`: the process's rank on its host (LOCAL_RANK and the like), else `0`.
    """
    env = os.environ if environ is None else environ
    job, task, cluster = "local", "0", "none"
    raw = env.get("TF_CONFIG", "")
    if raw:
        try:
            tf_config = json.loads(raw)
            spec = tf_config.get("task") or {}
            raw_job, raw_task = str(spec.get("type") or job), str(spec.get("index", task))
            if len(raw_job) > MAX_IDENTITY_VALUE or len(raw_task) > MAX_IDENTITY_VALUE:
                # Every series carries these labels: an unbounded value would bloat each scrape.
                _log.warning("tfobs: TF_CONFIG task type/index over %d characters; truncated",
                             MAX_IDENTITY_VALUE)
            job = label_value(raw_job, "local")
            task = label_value(raw_task, "0")
            if tf_config.get("cluster"):
                digest = hashlib.sha256(
                    json.dumps(tf_config["cluster"], sort_keys=True).encode()
                ).hexdigest()
                cluster = digest[:8]
        except (ValueError, AttributeError, TypeError, RecursionError):
            _log.warning("TF_CONFIG is not valid JSON with a 'task' entry; using tf_job=local")
    if config is not None:
        job = config.tf_job or job
        task = config.tf_task or task
    return {"tf_job": job, "tf_task": task, "tf_cluster": cluster,
            "local_rank": str(local_rank(env))}


def runs_steps(identity: Mapping[str, str]) -> bool:
    """False for parameter servers and evaluators: no scheduled windows there."""
    return identity.get("tf_job", "") not in STEPLESS_TASK_TYPES
