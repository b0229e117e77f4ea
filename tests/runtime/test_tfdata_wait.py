"""tfobs's event around tf.data's next() in a JAX job (`tfobs.capture.tfdata_wait`): the
wrapper never changes what next() returns or raises, and never raises of its own."""

from __future__ import annotations

import pytest

from tfobs.capture import tfdata_wait


class _Recorded:
    """Stands in for jax.profiler.TraceAnnotation: records its name and its enter/exit."""

    log: list[str] = []
    enabled = True

    @classmethod
    def is_enabled(cls) -> bool:
        return cls.enabled

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> _Recorded:
        _Recorded.log.append(f"enter {self.name}")
        return self

    def __exit__(self, *exc: object) -> None:
        _Recorded.log.append("exit")


class _Broken(_Recorded):
    def __init__(self, name: str) -> None:
        raise RuntimeError("profiler gone")


class _BrokenExit(_Recorded):
    def __exit__(self, *exc: object) -> None:
        raise RuntimeError("profiler gone")


def _next(it: list[int]) -> int:
    """An iterator's next() as tf.data's: StopIteration at the end."""
    if not it:
        raise StopIteration
    return it.pop(0)


def test_next_runs_inside_the_event_and_its_end_passes_through() -> None:
    _Recorded.log = []
    wrapped = tfdata_wait._annotated(_next, _Recorded)
    items = [7]
    assert wrapped(items) == 7
    with pytest.raises(StopIteration):
        wrapped(items)
    assert _Recorded.log == [f"enter {tfdata_wait.TFDATA_NEXT_EVENT}", "exit"] * 2
    assert wrapped.__name__ == "_next" and wrapped.__wrapped__ is _next


def test_no_event_is_made_while_no_trace_runs(monkeypatch) -> None:
    _Recorded.log = []
    monkeypatch.setattr(_Recorded, "enabled", False)
    wrapped = tfdata_wait._annotated(_next, _Recorded)
    assert wrapped([3]) == 3 and _Recorded.log == []


def _next_of(it: list[int], *more: int, default: int | None = None) -> int:
    """A next() that takes arguments (another TensorFlow's get_next, say)."""
    return _next(it) + sum(more) + (default or 0)


@pytest.mark.parametrize("annotation", [_Broken, _BrokenExit])
def test_a_failing_event_never_reaches_the_training_loop(annotation) -> None:
    wrapped = tfdata_wait._annotated(_next, annotation)
    items = [1, 2]
    assert [wrapped(items), wrapped(items)] == [1, 2]
    with pytest.raises(StopIteration):
        wrapped(items)


def test_a_next_with_arguments_gets_them_all() -> None:
    _Recorded.log = []
    wrapped = tfdata_wait._annotated(_next_of, _Recorded)
    assert wrapped([1], 2, 3, default=4) == 10
    assert _Recorded.log == [f"enter {tfdata_wait.TFDATA_NEXT_EVENT}", "exit"]


_INSTALL = r"""
import tensorflow as tf
from tensorflow.python.data.ops import iterator_ops
from tfobs.capture import tfdata_wait

cls = iterator_ops.OwnedIterator
before = {name: cls.__dict__[name] for name in ("__next__", "get_next")}
assert tfdata_wait.install() and tfdata_wait.install()  # idempotent
assert cls.__dict__["__next__"].__wrapped__ is before["__next__"]
it = iter(tf.data.Dataset.range(3))
assert [int(next(it)), int(it.get_next())] == [0, 1]
assert [int(v) for v in it] == [2]  # the end of the dataset still ends the loop
tfdata_wait.uninstall()
assert {name: cls.__dict__[name] for name in before} == before
print("ok")
"""


def test_install_wraps_tf_datas_iterator_and_uninstall_puts_it_back() -> None:
    # In a process of its own: importing JAX here would change how later tests' runtimes
    # choose their framework.
    import importlib.util
    import os
    import subprocess
    import sys

    if importlib.util.find_spec("jax") is None or importlib.util.find_spec("tensorflow") is None:
        pytest.skip("needs JAX and TensorFlow in one environment")
    done = subprocess.run([sys.executable, "-c", _INSTALL], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0 and done.stdout.split()[-1:] == ["ok"], done.stderr[-3000:]
