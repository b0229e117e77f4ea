"""The reduce helper: a plain `python -m tfobs.reduce` child of the training process.

The training process (`tfobs/reduce/helper.py`) starts it at `enable()` and sends
it, one JSON line per window on its stdin, the path of a capture in the scratch folder; it
reads, parses and reduces the capture and answers one JSON line: the `WindowSummary` as a
dict, or why not. So the reduction's CPU, memory and GIL are the helper's, never the job's.

It imports no TensorFlow, runs at low priority with a data-size limit of its own (both set
by itself, so the parent needs no `preexec_fn`), and never outlives the job: it asks the
kernel for SIGKILL when its parent dies (`PR_SET_PDEATHSIG`), exits on stdin EOF, and a
watchdog thread exits when its parent's pid changes (a parent killed before the prctl).

Protocol (one line each way, UTF-8 JSON):

    request: {"path": str, "top_n": int, "short_gap_s": float, "max_events": int,
              "max_top_events": int}
    answer:  {"ok": true, "summary": {...}} | {"ok": false, "kind": KIND, "message": str}

KIND is `too_large` (over max_events), `memory` (the helper's limit; it exits after
answering, so the next window gets a fresh heap) or `error`. The first line the helper
writes is `{"ready": true, "pid": N}` once its imports are done.
"""

from __future__ import annotations

MODULE = "tfobs.reduce"
KINDS = ("too_large", "memory", "error")

__all__ = ["KINDS", "MODULE"]
