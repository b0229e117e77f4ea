"""Hints for the user's configuration mistakes: a misspelled `TFOBS_*` variable, and warnings
that point at the user's `enable()` call rather than at tfobs's own line.

Kept apart from config.py's parsing so both can change independently; config.py calls
`warn_unknown_env()` once per load.
"""

from __future__ import annotations

import difflib
import logging
import os
import sys
import warnings
from collections.abc import Iterable, Mapping
from types import FrameType

_log = logging.getLogger(__name__)
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def unknown_env(environ: Mapping[str, str], known: Iterable[str],
                prefix: str = "TFOBS_") -> list[tuple[str, str]]:
    """(variable, closest known variable or '') for each `prefix*` variable tfobs does not read.

    `TFOBS_INTERVALSTEPS` -> `TFOBS_INTERVAL_STEPS`: compared without underscores and case,
    so a dropped or doubled underscore still finds its option.
    """
    known = sorted(known)
    squashed = {_squash(k, prefix): k for k in known}
    out = []
    for name in sorted(environ):
        if not name.upper().startswith(prefix) or name in known:
            continue
        key = _squash(name, prefix)
        close = difflib.get_close_matches(key, list(squashed), n=1, cutoff=0.75)
        out.append((name, squashed[close[0]] if close else ""))
    return out


def _squash(name: str, prefix: str) -> str:
    return name.upper().removeprefix(prefix).replace("_", "")


def unknown_env_message(name: str, suggestion: str) -> str:
    if suggestion:
        return f"ignoring unknown {name}: did you mean {suggestion}?"
    return f"ignoring unknown {name}: not a tfobs option (see `tfobs doctor` or docs/options.md)"


def user_stacklevel() -> int:
    """The `stacklevel` for `warnings.warn` called in tfobs that names the first frame outside
    tfobs (the user's `enable()` call). Python 3.12's `skip_file_prefixes` does this too;
    counting frames works on 3.11 as well."""
    frame: FrameType | None = sys._getframe(1)  # the caller: the one calling warnings.warn
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    return level


def warn_unknown_env(environ: Mapping[str, str], known: Iterable[str]) -> None:
    """One RuntimeWarning per misspelled or unknown `TFOBS_*` variable, at the user's call."""
    for name, suggestion in unknown_env(environ, known):
        message = unknown_env_message(name, suggestion)
        try:
            warnings.warn(message, RuntimeWarning, stacklevel=user_stacklevel())
        except Exception:  # PYTHONWARNINGS=error: a hint must not stop training
            _log.warning(message)
