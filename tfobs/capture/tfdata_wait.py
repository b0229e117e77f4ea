"""A JAX job's waits for its tf.data batches, written into its windows.

jax.profiler records no TensorFlow op, so a JAX step fed by tf.data waits inside the
iterator's next() with nothing in the capture to say so: XProf counts that wait as
'All Others' (or host compute, with the Python tracer on) and never as input. While tfobs
runs a JAX job that has imported TensorFlow, each next() of a tf.data iterator (`for batch
in dataset`, `next(iterator)`, `iterator.get_next()`, and `as_numpy_iterator()`, which
calls them) runs inside a trace event named `TFDATA_NEXT_EVENT`, which the reduction reads
as the steps' input wait (`analysis/python_time.py`). The event is made only while a trace
runs (jaxlib's `TraceMe.is_enabled()`); benchmarks/tfdata_wait_cost.py times what it adds.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
from collections.abc import Callable
from typing import Any

_log = logging.getLogger(__name__)

# The name the reduction looks for (`analysis/python_time.py` holds the same string: the
# analysis never imports the capture side; a test keeps the two equal).
TFDATA_NEXT_EVENT = "tf.data next() (tfobs)"
_WRAPPED = ("__next__", "get_next")
_STAR_ARGS = inspect.CO_VARARGS | inspect.CO_VARKEYWORDS

_lock = threading.Lock()
_saved: dict[str, Any] = {}  # method name -> the class's own method


def install() -> bool:
    """Wrap tf.data's iterator methods (idempotent); True when wrapped."""
    with _lock:
        if _saved:
            return True
        from jax._src.lib import _profiler  # jaxlib's TraceMe, as tfobs's JAX markers
        from tensorflow.python.data.ops import iterator_ops

        cls = iterator_ops.OwnedIterator
        for name in _WRAPPED:
            original = cls.__dict__.get(name)
            if original is None:  # another TensorFlow: leave what is there
                continue
            _saved[name] = original
            setattr(cls, name, _annotated(original, _profiler.TraceMe))
        return bool(_saved)


def uninstall() -> None:
    """Put tf.data's own methods back."""
    with _lock:
        if not _saved:
            return
        from tensorflow.python.data.ops import iterator_ops

        for name, original in _saved.items():
            setattr(iterator_ops.OwnedIterator, name, original)
        _saved.clear()


def _annotated(original: Callable[..., Any], trace_me: Any) -> Callable[..., Any]:
    enabled = trace_me.is_enabled  # between traces: this one static check, no event made

    def annotated(call: Callable[[], Any]) -> Any:
        try:
            event = trace_me(TFDATA_NEXT_EVENT)
            event.__enter__()
        except Exception:  # never into the training loop: this batch goes unannotated
            _log.debug("tfobs: tf.data wait annotation failed", exc_info=True)
            return call()
        try:
            return call()  # StopIteration passes through as is
        finally:
            try:
                event.__exit__(None, None, None)
            except Exception:
                _log.debug("tfobs: tf.data wait annotation end failed", exc_info=True)

    code = getattr(original, "__code__", None)
    if code is not None and code.co_argcount == 1 and not code.co_flags & _STAR_ARGS:
        # next() and get_next() take no argument: packing *args, **kwargs would cost more
        # than the rest of the wrapper (about 0.3 us a batch).
        @functools.wraps(original)
        def wrapper(self: Any) -> Any:
            if not enabled():
                return original(self)
            return annotated(lambda: original(self))
    else:
        @functools.wraps(original)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not enabled():
                return original(self, *args, **kwargs)
            return annotated(lambda: original(self, *args, **kwargs))

    return wrapper
