"""`tfobs.enable()`: every option a typed keyword, so a type checker and an IDE see them.

The keywords are `EnableOptions` (tfobs/runtime/enable_options.py), generated from
`tfobs.config.Config`'s fields, where each option, its type, default and check are written
once. A keyword left out or None is not given: the `TFOBS_<NAME>` variable, else the default.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tfobs.config import Config
from tfobs.runtime.core import Runtime
from tfobs.runtime.lifecycle import enable_config

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack from Python 3.11

    from tfobs.runtime.enable_options import EnableOptions


def enable(**options: Unpack[EnableOptions]) -> Runtime | None:
    """Start tfobs in this training process and return its handle (see `Runtime`).

    Call it once, before training starts; a second call returns the running handle (new
    options are ignored until `tfobs.disable()`, with a warning). Each keyword is one option
    of the options table (docs/options.md, `tfobs options`) (meaning, unit, default): an
    explicit keyword wins over its `TFOBS_<NAME>` variable, which wins over the default.
    Returns None when `enabled=False` (or `TFOBS_ENABLED=false`).

    Raises `tfobs.ConfigError` naming the option and what is allowed for a bad or unknown
    keyword; a bad variable only warns, and a metrics port already in use is said in one line
    and another port served. Without TensorFlow it says how to install it and returns None.
    """
    if _importing_main_in_a_child():
        return None
    given: dict[str, Any] = {name: value for name, value in options.items() if value is not None}
    return enable_config(Config.load(**given), explicit=bool(given))


def _importing_main_in_a_child() -> bool:
    """True while a multiprocessing child started by spawn or forkserver (a Pool's worker,
    a data loader's) imports the job's main script again as `__mp_main__`: an `enable()` at
    the script's top level meant the job, not each worker. Each worker started a whole tfobs
    of its own (threads, a metrics server on another port, said as "port ... is in use
    (another job or notebook serving there?)"). multiprocessing's own flag for that phase;
    `enable()` in the function a child runs is not affected."""
    import logging
    import sys

    mp = sys.modules.get("multiprocessing")
    if mp is None:
        return False
    try:
        return bool(getattr(mp.current_process(), "_inheriting", False))
    except Exception:  # a multiprocessing stand-in without current_process: enable as usual
        logging.getLogger(__name__).debug("tfobs: no multiprocessing state", exc_info=True)
        return False


# AutoGraph calls an "autograph artifact" as it is rather than converting it: enable()
# called inside a tf.function otherwise ran a converted copy whose `global` assignment was
# lost, so a second enable() started a second runtime (two servers, two pipelines).
enable.autograph_info__ = frozenset()  # type: ignore[attr-defined]

