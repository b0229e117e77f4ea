"""Step markers: where each training step begins and ends.

Markers are `tf.profiler` trace events named "train" with `step_num` and `_r=1`, the form
XProf recognises as a step, so tfobs's captures (and the user's own) open in TensorBoard with
steps. A marker costs about a microsecond when no profiler session runs (TF skips the event).
Each step's begin and end also go to the running tfobs runtime, which times every step for the
step-time histogram and opens/closes profile windows on step boundaries.

* Custom loops: `with tfobs.step(n): ...` around the whole step, `next(iterator)` included.
* Keras: `enable()` wraps `Model.fit` of Keras 3 and tf_keras so every fit gets a
  `KerasCallback` without code changes. tf_keras already emits its own "train" markers, so the
  callback only times its steps there. It also wraps `Model.train_on_batch` (GANs and other
  hand-written Keras loops): each call outside a marked step is one step.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Protocol

from tfobs import forks
from tfobs.once import Once

_log = logging.getLogger(__name__)
_perf = time.perf_counter


class StepHooks(Protocol):
    def step_begin(self, step_num: int) -> None: ...
    # trace_key: how the trace names the step (marker name, number), where it is not
    # tfobs's own ("train", step_num).
    def step_end(self, step_num: int, duration_s: float,
                 trace_key: tuple[str, int] | None = None) -> None: ...
    def train_end(self) -> None: ...


# The running runtime's hooks (set by tfobs.runtime); None when tfobs is not enabled.
_hooks: StepHooks | None = None
# The framework's profiler (framework.Backend) that makes step markers; None until the
# runtime knows which framework the job uses (until then, and without a runtime, steps are
# marked by `_plain_marker` for the job's own profiling).
_backend: Any = None
# The framework whose own step annotation announced steps (a Keras callback,
# jax.profiler.StepTraceAnnotation): tells the runtime which framework the job trains with.
marked_by: Any = None


def set_hooks(hooks: StepHooks | None) -> None:
    """Send every step's begin and end to `hooks` (None: to nobody)."""
    global _hooks
    _hooks = hooks


def clear_hooks(hooks: StepHooks) -> None:
    """Stop sending steps to `hooks`, if they are the ones receiving them now."""
    global _hooks
    if _hooks is hooks:
        _hooks = None


def current_hooks() -> StepHooks | None:
    return _hooks


def set_backend(backend: Any) -> None:
    """Make step markers with `backend` (a framework.Backend; None: make none)."""
    global _backend
    _backend = backend


def current_backend() -> Any:
    return _backend


# Without a running tfobs (no enable(), or after it stopped) steps are still marked for the
# job's own profiling (TensorBoard's Profile tab, tf.profiler.experimental.start,
# jax.profiler.trace), once a framework runs. Each framework's profiler sees only its own
# markers, and one process may run both (a JAX job fed by tf.data; TensorFlow first, JAX
# later), so a step is marked for whichever records: for the framework the job runs
# (`framework.choose`), and for the other one too once it is imported. Each marker first
# asks whether its profiler records, so the second costs a call per step.
_plain_marker: Any = None
_plain_names: tuple[str, ...] = ()  # the frameworks `_plain_marker` marks for


def _trace_begin(step_num: int) -> Any:
    backend = _backend
    if backend is not None:
        return backend.marker(step_num)
    if len(_plain_names) < 2 and (not _plain_names or _other(_plain_names[0]) in sys.modules):
        _bind_plain_marker()
    mark = _plain_marker
    return mark(step_num) if mark is not None else None


def _other(name: str) -> str:
    return "jax" if name == "tensorflow" else "tensorflow"


def _bind_plain_marker() -> None:
    global _plain_marker, _plain_names
    from tfobs.capture import framework

    first = framework.choose(marked_by)
    if first is None:
        return  # no framework runs yet: no session can record a step
    # Both: JAX's first, as its marker says reliably whether JAX records (TF 2.16's makes a
    # TraceMe every step, recording or not).
    names = ("jax", "tensorflow") if _other(first) in sys.modules else (first,)
    if names == _plain_names:
        return
    marks = []
    for name in names:
        try:
            marks.append(framework.step_marker(name))  # type: ignore[arg-type]
        except Exception:  # a broken framework install: its steps go unmarked
            _log.debug("tfobs: no step marker for %s", name, exc_info=True)
            marks.append(_no_marker)
    _plain_marker = marks[0] if len(marks) == 1 else _either(*marks)
    _plain_names = names


def _either(first: Any, second: Any) -> Any:
    """A marker of `first`'s framework where its profiler records, else of `second`'s."""
    def mark(step_num: int) -> Any:
        m = first(step_num)
        return m if m is not None else second(step_num)
    return mark


def _no_marker(step_num: int) -> None:
    return None


# Seconds tfobs's own per-step work (hooks, marker, histogram) has taken on the training
# thread, timed in place: inside a real step it runs several times slower than in a tight
# loop (cold caches). The runtime charges it to the duty-cycle budget. Written by training
# threads only; a lost update between two of them would only undercount a few microseconds.
_own_s = 0.0
_last_step = -1  # the latest step number: a step given no usable number takes the next one
_said_unnumbered = Once()


def _say_unnumbered(given: object, used: int) -> None:
    if _said_unnumbered.first():
        _log.warning("tfobs.step(%.40r): not a step number; tfobs numbers such steps itself "
                     "(this one %d). Pass the global step as an int (e.g. "
                     "int(optimizer.iterations)) so all workers profile the same steps.",
                     given, used)


def _step_number(given: Any) -> int:
    """`int(given)`, within what a profiler trace's 64-bit stat holds, signed or unsigned
    (a uint64 counter is read as int64 reads it; 2**70 was taken and shown as a window's
    steps)."""
    num = int(given)
    if not -2**63 <= num < 2**64:
        raise OverflowError(num)
    return num


def own_seconds() -> float:
    return _own_s


def any_step_begun() -> bool:
    """Whether this process has begun a marked step (a step of minutes, an XLA compile's
    first, has begun long before it ends)."""
    return _last_step != -1


# Steps open on each thread: a `train_on_batch` inside a step the user (or fit) already
# marked is part of that step, not one of its own.
_open = threading.local()
# Each stepping thread's open-step depth, in a one-item list the thread keeps and a
# registry holds: where several threads mark steps (two models trained side by side), a
# window ends only at a boundary none of the others' steps straddles. Bounded: threads past
# MAX_STEPPING_THREADS keep their depth unseen by the others.
MAX_STEPPING_THREADS = 4096
_depths: list[list[int]] = []


def _depth() -> list[int]:
    try:
        return _open.depth
    except AttributeError:
        mine = _open.depth = [0]
        if len(_depths) < MAX_STEPPING_THREADS:
            _depths.append(mine)  # atomic: no lock on any step
        return mine


def _step_depth() -> int:
    try:
        return _open.depth[0]
    except AttributeError:
        return 0


def _abandon_fit_step() -> None:
    """Close the step a Keras callback opened on this thread and no batch end closed: a
    fit that raised (a bad record, out of memory, Ctrl-C) calls neither on_train_batch_end
    nor on_train_end, and an open step makes every later one on this thread "nested", so
    uncounted. Not a step of its own: no duration is sent."""
    marker = getattr(_open, "fit_marker", None)
    if marker is None:
        return
    _open.fit_marker = None
    marker.abandon()


def steps_open_elsewhere() -> int:
    """How many other threads are inside a step now."""
    mine = _depth()
    return sum(1 for d in list(_depths) if d[0] > 0 and d is not mine)


def _forked_child() -> None:
    """A forked child has only the thread that forked: the others' depths are not its."""
    _depths[:] = [d for d in (getattr(_open, "depth", None),) if d is not None]


forks.after_fork_in_child(_forked_child)


class step:  # lower case: used like a function, `with tfobs.step(n):`
    """Marks one step of a custom training loop: `with tfobs.step(step_num): ...`.

    Wrap the whole step, `next(iterator)` included, so input waits count. `step_num` is the
    global step (the same number on every worker of a synchronous job, so they profile the
    same steps). The step's duration goes to `tfobs_step_duration_seconds`; while a profile
    window is open the step is also a "train" trace event XProf reads. Without a running
    tfobs it is only that trace event. Never raises into the step; an exception inside the
    step still ends it.
    """

    __slots__ = ("step_num", "trace_key", "_trace", "_t0", "_own", "_open", "_nested",
                 "_frame", "_offset", "_abandoned", "_owner")

    def __init__(self, step_num: int) -> None:
        global _last_step
        try:
            self.step_num = _last_step = _step_number(step_num)
        except (TypeError, ValueError, OverflowError, AttributeError):
            self.step_num = _last_step = _last_step + 1
            _say_unnumbered(step_num, self.step_num)
        # The step's name and number in the trace where another marker than tfobs's own
        # ("train", step_num) names it: a JAX annotation's, tf_keras's per-epoch numbers.
        self.trace_key: tuple[str, int] | None = None
        self._trace: Any = None
        self._t0 = 0.0
        self._own = 0.0
        self._open = False
        self._nested = False
        # The frame whose `with` opened it, while open (held, so its identity is kept:
        # Python makes a frame's object anew each time one is asked for otherwise).
        self._frame: Any = None
        self._offset = -1  # where in that frame's code its `with` is
        self._abandoned = False  # closed by abandon(): its __exit__ counts nothing
        self._owner: Any = None  # a weak reference to the annotation that began it

    def __enter__(self) -> None:
        caller = sys._getframe(1)
        if _step_depth():  # inside a step already marked (the job's own step trace, or an
            if not _left_open(caller):  # outer tfobs.step): part of that step
                self._nested = True
                return
        t = _perf()
        self._frame, self._offset = caller, caller.f_lasti
        _open.marker = self
        try:  # opened inside: a Ctrl-C lands after a call returns, and `with` calls no
            self._opened()  # __exit__ when __enter__ raises
            hooks = _hooks
            if hooks is not None:
                hooks.step_begin(self.step_num)  # may start the profiler: before the marker
            try:
                self._trace = _trace_begin(self.step_num)
            except Exception:  # never let a marker break training: timed, not traced
                _log.debug("tfobs: step trace marker failed", exc_info=True)
                self._trace = None
        except BaseException:  # Ctrl-C while the window opened
            self.abandon()
            raise
        self._t0 = _perf()
        self._own = self._t0 - t

    def __exit__(self, *exc: object) -> None:
        global _own_s
        if self._nested:
            return
        t = _perf()
        duration = t - self._t0
        try:
            if self._trace is not None:
                trace, self._trace = self._trace, None
                trace.Stop()
        finally:  # a Ctrl-C in Stop must not leave the step open on this thread; written
            if self._open:  # out, no call: a Ctrl-C lands where a call returns or a
                try:  # function is entered, which would leave the count up for good
                    depth = _open.depth
                    depth[0] = depth[0] - 1 if depth[0] > 0 else 0
                except AttributeError:
                    pass
                self._open = False
                self._frame = None  # held no longer than the step: its locals go with it
        if self._abandoned:  # closed, not ended (`abandon`): no step to count
            return
        hooks = _hooks
        if hooks is not None:
            hooks.step_end(self.step_num, duration, self.trace_key)
        _own_s += self._own + (_perf() - t)

    def abandon(self) -> None:
        """Close the step without ending it (no duration sent): its trace stopped, its
        thread no longer inside it, the runtime told training stopped mid-step."""
        self._abandoned = True
        try:
            self.__exit__(None, None, None)
        except Exception:
            _log.debug("tfobs: step trace marker failed to stop", exc_info=True)
        hooks = _hooks
        if hooks is not None:
            try:
                hooks.train_end()  # its window, if any, ends now
            except Exception:
                _log.debug("tfobs: train_end failed", exc_info=True)

    def _opened(self) -> None:
        """Count this step as open on its thread (until `__exit__`)."""
        if not self._open:
            depth = _depth()
            depth[0] += 1  # no call between these two lines, where a Ctrl-C could land:
            self._open = True  # open and counted, or neither


def _left_open(caller: Any) -> bool:
    """Whether the step counted open on this thread was left open, and is closed here: the
    marker `caller` is about to make again is its own (the same place in the same frame: the
    next turn of its loop), or the framework annotation that began it is gone. Its own turn
    never closed it: a Ctrl-C landed in tfobs's code, or an annotation was made and never
    entered. Any other open step is a live outer one (a `with` further up, a Keras batch, a
    context manager or ExitStack holding it)."""
    outer = getattr(_open, "marker", None)
    if outer is None:
        return False
    owner = outer._owner
    gone = owner is not None and owner() is None  # its annotation was freed, never closed
    if gone or (outer._frame is caller and caller.f_lasti == outer._offset):
        outer.abandon()
        return True
    return False


# Annotation names of evaluation and inference, not training: XProf makes them steps too
# (its figures mix them, and the reduction's note says so), but the live step time, the
# step count and the window plan are the training steps'.
EVALUATION_NAMES = frozenset({"eval", "evaluate", "evaluation", "test", "val", "valid",
                              "validate", "validation", "predict", "prediction", "infer",
                              "inference"})


def begin_marked(step_num: Any, framework: str, name: Any = "train",
                 maker: Any = None, owner: Any = None) -> step | None:
    """A step the framework's own annotation marks (tf_keras's "train" events,
    `jax.profiler.StepTraceAnnotation`): timed and sent to the runtime like `tfobs.step`,
    without a marker of tfobs's own. `name`: the annotation's name in the trace; `maker`:
    the frame making the annotation, `owner` the annotation (an annotation made there again
    while its last one is still counted open, or freed while open, was never entered or
    closed: that step is closed). None inside a step already marked, and for an
    evaluation's annotation (`EVALUATION_NAMES`). End it with
    `marker.__exit__(None, None, None)`."""
    global marked_by
    if _step_depth() and (maker is None or not _left_open(maker)):
        return None
    if name != "train" and str(name).lower() in EVALUATION_NAMES:
        return None
    t = _perf()
    marked_by = framework
    marker = step(step_num)
    if name != "train":
        marker.trace_key = (str(name), marker.step_num)
    if maker is not None:
        marker._frame, marker._offset = maker, maker.f_lasti
    if owner is not None:
        try:
            marker._owner = weakref.ref(owner)
        except TypeError:  # no weak references to it: judged by where it was made alone
            pass
    _open.marker = marker  # owns the thread's open step
    marker._opened()
    try:
        hooks = _hooks
        if hooks is not None:
            hooks.step_begin(marker.step_num)
    except BaseException:  # Ctrl-C while the window opened: the caller gets no marker
        marker.abandon()
        raise
    marker._t0 = _perf()
    marker._own = marker._t0 - t
    return marker


class _MarkerMixin:
    """Shared by the Keras 3 and tf_keras callbacks (see `_callback_class`)."""

    _emit_markers = True
    _supports_tf_logs = True  # tf_keras: do not convert logs to numpy (a device sync) for us

    def _tfobs_init(self) -> None:
        self._base: int | None = None
        self._count = 0
        self._batch: Any = None
        self._current: step | None = None

    # tf_keras's CallbackList asks these of every callback; Keras 3's base class lacks them,
    # so without them `tfobs.KerasCallback` (Keras 3's) would break a tf_keras fit.
    def _implements_train_batch_hooks(self) -> bool:
        return True

    def _implements_test_batch_hooks(self) -> bool:
        return False

    def _implements_predict_batch_hooks(self) -> bool:
        return False

    def on_train_begin(self, logs: Any = None) -> None:
        _abandon_fit_step()  # an earlier fit on this thread died mid-step
        model = getattr(self, "model", None)
        self._framework: str | None = "tensorflow"  # whose profiler sees the steps
        if type(model).__module__.startswith("tf_keras"):
            self._emit_markers = False  # tf_keras writes its own step markers
        else:
            self._framework = keras_framework()
        self._base = _initial_step(model)
        self._count = 0

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        t = _perf()
        if self._base is None:
            self._base = _initial_step(getattr(self, "model", None))
        # Numbered by the optimizer's iteration count: with steps_per_execution = k one
        # marker spans one execution of k iterations and the next one is numbered k higher.
        global marked_by
        marked_by = getattr(self, "_framework", "tensorflow")
        marker = step(self._base + self._count)
        self._batch = batch
        if self._emit_markers:
            marker.__enter__()
        else:  # tf_keras marks steps itself: only time them and drive the runtime
            if isinstance(batch, int):  # tf_keras numbers its markers by batch in the epoch
                marker.trace_key = ("train", batch)
            marker._opened()
            hooks = _hooks
            if hooks is not None:
                hooks.step_begin(marker.step_num)
            marker._t0 = _perf()
        marker._own = _perf() - t  # this whole callback is tfobs's per-step work
        self._current = _open.fit_marker = marker
        if marker._open:
            _open.marker = marker  # owns the thread's open step (no `with` of its own)

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        ran = batch - self._batch + 1 if isinstance(batch, int) and isinstance(
            getattr(self, "_batch", None), int) else 1
        self._count += ran if ran >= 1 else 1  # Keras passes the execution's last batch
        marker, self._current = self._current, None
        _open.fit_marker = None
        if marker is not None:
            marker.__exit__(None, None, None)

    def on_train_end(self, logs: Any = None) -> None:
        marker, self._current = self._current, None
        _open.fit_marker = None
        if marker is not None:  # fit stopped mid-step (exception, stop_training)
            self._count += 1
            marker.__exit__(None, None, None)
        self._base = None
        hooks = _hooks
        if hooks is not None:
            hooks.train_end()  # no more steps: close an open window now


def _initial_step(model: Any) -> int:
    """The global step a fit starts at: the optimizer's iteration count, so workers agree
    (and a job resumed from a checkpoint continues its numbering). Without a readable
    counter, steps continue after those earlier fits in this process ran.
    """
    try:
        iterations = model.optimizer.iterations
        return int(iterations.numpy() if hasattr(iterations, "numpy") else iterations)
    except Exception:  # no readable counter: number on from earlier fits
        _log.debug("tfobs: optimizer.iterations unreadable", exc_info=True)
        return _fallback_next


_fallback_next = 0


def _note_steps_done(last_exclusive: int) -> None:
    global _fallback_next
    _fallback_next = max(_fallback_next, last_exclusive)


_classes: dict[Any, type] = {}


def _callback_class(base: Any, *, emit_markers: bool) -> type:
    cls = _classes.get(base)
    if cls is None:

        # Keras's class is Any to a type checker (Keras ships no types).
        class KerasCallback(_MarkerMixin, base):  # type: ignore[misc, unused-ignore]
            """Marks each training step of `Model.fit` for tfobs and XProf."""

            _emit_markers = emit_markers

            def __init__(self) -> None:
                base.__init__(self)
                self._tfobs_init()

            def on_train_end(self, logs: Any = None) -> None:
                if self._base is not None:
                    _note_steps_done(self._base + self._count)
                _MarkerMixin.on_train_end(self, logs)

        KerasCallback.__module__ = __name__
        KerasCallback.__qualname__ = f"KerasCallback[{base.__module__.split('.')[0]}]"
        cls = _classes[base] = KerasCallback
    return cls


def keras_framework() -> str | None:
    """Whose profiler sees a Keras 3 fit: its backend's ('jax' or 'tensorflow'); None for
    the backends no profiler of tfobs's reads (torch, numpy)."""
    try:
        import keras

        backend = keras.config.backend()
    except Exception:  # an old Keras 3 without keras.config: TensorFlow's
        _log.debug("tfobs: Keras backend unreadable", exc_info=True)
        return "tensorflow"
    return backend if backend in ("jax", "tensorflow") else None


def keras3_callback_class() -> type:
    import keras

    return _callback_class(keras.callbacks.Callback, emit_markers=True)


def tf_keras_callback_class() -> type:
    import tf_keras

    return _callback_class(tf_keras.callbacks.Callback, emit_markers=False)


if TYPE_CHECKING:
    from keras.callbacks import Callback as _KerasCallbackBase

    class KerasCallbackType(_KerasCallbackBase):  # type: ignore[misc, unused-ignore]
        """`tfobs.KerasCallback` as a type checker sees it: a Keras 3 callback that marks each
        training step of `Model.fit` for tfobs and XProf. `enable()` adds one to every fit;
        pass one in `callbacks=[...]` to place it yourself."""

        def __init__(self) -> None: ...


def __getattr__(name: str) -> Any:
    if name == "KerasCallback":  # Keras 3, TF's default Keras
        return keras3_callback_class()
    raise AttributeError(name)


# -- injecting the callback into every fit ------------------------------------------------

# (Model class, method name, whether the class had that attribute itself, the attribute)
# for each patch.
_patched: list[tuple[Any, str, bool, Any]] = []
# Re-entrant: listing the Model classes imports Keras, and that import may run an import
# hook of tfobs's that installs the fit hooks (the outer call then patches them).
_patch_lock = threading.RLock()
_patching = False


def _wrap_fit(original: Any, make_callback: Any, callback_cls: type) -> Any:
    try:
        position = list(inspect.signature(original).parameters).index("callbacks") - 1
    except (ValueError, TypeError):
        position = 5  # fit(self, x, y, batch_size, epochs, verbose, callbacks, ...)

    @functools.wraps(original)
    def fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _hooks is not None:
            try:
                args, kwargs = _with_callback(args, kwargs, position, make_callback, callback_cls)
            except Exception:  # odd callbacks argument: train without tfobs markers
                _log.debug("tfobs could not add its callback to fit", exc_info=True)
        try:
            return original(self, *args, **kwargs)
        except BaseException:  # Keras calls no batch end, no train end: close its step
            _abandon_fit_step()
            raise

    fit.__tfobs_original__ = original  # type: ignore[attr-defined]
    return fit


# The next `train_on_batch` step number; None until the first call reads the optimizer's.
_batch_next: int | None = None


def _batch_step(model: Any) -> int:
    """A `train_on_batch` call's step number. The first call starts at the optimizer's
    iteration count (as fit does: workers agree, a resumed job continues); later calls
    count on from there without reading it again (reading a variable is a device sync).
    One count for the process: a GAN's two models then number their calls in turn."""
    global _batch_next
    if _batch_next is None:
        _batch_next = max(_initial_step(model), _last_step + 1)
    num, _batch_next = _batch_next, _batch_next + 1
    _note_steps_done(_batch_next)
    return num


def _wrap_train_on_batch(original: Any) -> Any:
    @functools.wraps(original)
    def train_on_batch(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _hooks is None or _step_depth():  # tfobs off, or inside a step already marked
            return original(self, *args, **kwargs)
        try:
            marker = step(_batch_step(self))
        except Exception:  # never let tfobs stop the call
            _log.debug("tfobs could not number a train_on_batch step", exc_info=True)
            return original(self, *args, **kwargs)
        with marker:
            return original(self, *args, **kwargs)

    train_on_batch.__tfobs_original__ = original  # type: ignore[attr-defined]
    return train_on_batch


def _with_callback(args: tuple[Any, ...], kwargs: dict[str, Any], position: int, make: Any,
                   cls: type) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if len(args) > position:
        callbacks = args[position]
    else:
        callbacks = kwargs.get("callbacks")
    if callbacks is None:
        callbacks = []
    elif isinstance(callbacks, (list, tuple)):
        if any(isinstance(c, _MarkerMixin) for c in callbacks):
            return args, kwargs  # the user added a tfobs callback (of either Keras) already
        callbacks = list(callbacks)
    else:
        return args, kwargs  # a CallbackList: leave the user's container alone
    callbacks.append(make())
    if len(args) > position:
        args = (*args[:position], callbacks, *args[position + 1:])
    else:
        kwargs = {**kwargs, "callbacks": callbacks}
    return args, kwargs


def _model_classes(framework: str | None = None) -> list[tuple[Any, type]]:
    """(Model class, callback class) for each Keras this process can use; with
    `framework`, only those whose steps that framework's profiler sees (Keras 3 on its
    backend; tf_keras is TensorFlow's)."""
    found: list[tuple[Any, type]] = []
    try:
        import keras

        if framework is None or keras_framework() == framework:
            found.append((keras.Model, keras3_callback_class()))
    except Exception:
        _log.debug("Keras 3 not importable", exc_info=True)
    if framework == "jax":
        return found
    if "tf_keras" in sys.modules or _legacy_keras_requested():
        try:
            import tf_keras

            found.append((tf_keras.Model, tf_keras_callback_class()))
        except Exception:
            _log.debug("tf_keras not importable", exc_info=True)
    return found


def _legacy_keras_requested() -> bool:
    import os

    return os.environ.get("TF_USE_LEGACY_KERAS", "").strip().lower() in ("1", "true", "yes")


def install_fit_hooks(framework: str | None = None) -> int:
    """Wrap `fit` and `train_on_batch` on every available Keras Model class (idempotent;
    with `framework`, those `_model_classes` keeps); returns how many methods are wrapped."""
    global _patching
    with _patch_lock:
        if _patching:  # re-entered from an import inside the call below: that call does it
            return len(_patched)
        _patching = True
        try:
            return _patch_fit_methods(framework)
        finally:
            _patching = False


def _patch_fit_methods(framework: str | None) -> int:
    """install_fit_hooks's work, under its lock."""
    global _batch_next
    done = {(entry[0], entry[1]) for entry in _patched}
    for model_cls, cb_cls in _model_classes(framework):
        for name in ("fit", "train_on_batch"):
            if (model_cls, name) in done or not hasattr(model_cls, name):
                continue
            own = name in model_cls.__dict__
            previous = model_cls.__dict__.get(name)
            current = getattr(model_cls, name)
            wrapped = (_wrap_fit(current, cb_cls, cb_cls) if name == "fit"
                       else _wrap_train_on_batch(current))
            setattr(model_cls, name, wrapped)
            _patched.append((model_cls, name, own, previous))
    _batch_next = None  # a new runtime reads the optimizer's count afresh
    return len(_patched)


def uninstall_fit_hooks() -> None:
    with _patch_lock:
        while _patched:
            model_cls, name, own, previous = _patched.pop()
            if own:
                setattr(model_cls, name, previous)
            else:
                try:
                    delattr(model_cls, name)
                except AttributeError:
                    pass
