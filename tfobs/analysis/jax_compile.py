"""JAX's compile path inside one step: the first call of a jitted function, traced, lowered,
then compiled by XLA or loaded from JAX's persistent compilation cache.

XProf drops a window's first and last steps, and so do tfobs's figures; a first step that
holds a jitted function's first call (a capture begun before the warm-up, a restarted job
loading its executables from `jax_compilation_cache_dir`) is then in no figure. Its parts,
from the host's events:

- lowering to StableHLO: JAX's `lower_sharding_computation` (a TraceMe: written with the
  Python tracer off too);
- the XLA compile: `backend_compile_and_load` / `backend_compile` (TraceMes);
- tracing the function to a jaxpr: the Python tracer's `pjit.py _infer_params` frames (no
  TraceMe of its own: with the tracer off it is in the jitted call's time, `PjitFunction(f)`,
  beside the first run);
- a persistent cache read: `compiler.py _cache_read`, a hit where `compiler.py
  log_persistent_cache_hit` runs (the tracer's frames). With the tracer off, a lowering that
  no compile follows is a load from that cache: JAX compiles every module it lowers unless
  the cache holds it.

Each part's time is its outermost events' (a nested function's tracing is its caller's),
clipped to the step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

from tfobs.analysis.calls import JAX_CALL
from tfobs.analysis.eager import JAX_COMPILES, JAX_LOWERING
from tfobs.analysis.python_time import PYTHON_EVENT_PREFIX, is_python_event
from tfobs.analysis.timeline import Timeline, id_array, lookup, member, outermost_of, span_of

_PY = PYTHON_EVENT_PREFIX  # the Python tracer's events: `$<file>:<line> <function>`
# The tracer's frames of the compile path, {file: functions}, by part (the lowering and the
# compile are TraceMes too, written with the tracer off).
_LOWERING = {"pxla.py": (JAX_LOWERING,)}
_COMPILING = {"compiler.py": JAX_COMPILES}
_TRACING = {"pjit.py": ("_infer_params",)}
_CACHE_READ = {"compiler.py": ("_cache_read",)}
_CACHE_HIT = {"compiler.py": ("log_persistent_cache_hit",)}


def _frame_in(name: str, functions: Mapping[str, tuple[str, ...]]) -> bool:
    where, _, function = name[len(_PY):].partition(" ")
    return name.startswith(_PY) and function in functions.get(where.partition(":")[0], ())


def _is_lowering(name: str) -> bool:
    return name == JAX_LOWERING or _frame_in(name, _LOWERING)


def _is_compiling(name: str) -> bool:
    return name in JAX_COMPILES or _frame_in(name, _COMPILING)


def _is_tracing(name: str) -> bool:
    return _frame_in(name, _TRACING)


def _is_cache_read(name: str) -> bool:
    return _frame_in(name, _CACHE_READ)


def _is_cache_hit(name: str) -> bool:
    return _frame_in(name, _CACHE_HIT)


def _is_jax_call(name: str) -> bool:
    return name.startswith(JAX_CALL)


class _CompileIds(NamedTuple):
    """The metadata ids of the compile path's events, by part (`_compile_ids`)."""

    lowering: np.ndarray
    compiling: np.ndarray
    tracing: np.ndarray
    cache_read: np.ndarray
    cache_hit: np.ndarray
    calls: np.ndarray


_KINDS = (_is_lowering, _is_compiling, _is_tracing, _is_cache_read, _is_cache_hit, _is_jax_call)
_FRAME_FILES = tuple({*_LOWERING, *_COMPILING, *_TRACING, *_CACHE_READ, *_CACHE_HIT})
_PLAIN = frozenset({JAX_LOWERING, *JAX_COMPILES})


def _compiled_in(host: Timeline) -> bool:
    """Whether the window holds a lowering or an XLA compile at all: JAX writes both as
    TraceMes, the Python tracer on or off, found by name at once (most windows compile
    nothing, and the tracer's thousands of names need no pass then)."""
    return bool(host.mids_named(*_PLAIN))


def _compile_ids(host: Timeline) -> _CompileIds:
    """Each part's metadata ids in one pass over the names, testing only the names that can
    be one (the Python tracer writes thousands of names: a scan per part cost
    milliseconds). Ask through `host.once`."""
    found: list[set[int]] = [set() for _ in _KINDS]
    for mid, name in host.names.items():
        if name.startswith(_PY):
            if not name.startswith(_FRAME_FILES, 1):
                continue
        elif name not in _PLAIN and not name.startswith(JAX_CALL):
            continue
        for ids, test in zip(found, _KINDS, strict=True):
            if test(name):
                ids.add(mid)
    return _CompileIds(*(id_array(frozenset(ids)) for ids in found))


class StepCompile(NamedTuple):
    """JAX's compile path in one step (seconds, clipped to it); all 0 where none ran."""

    lowering_s: float = 0.0
    lowerings: int = 0
    compile_s: float = 0.0
    compiles: int = 0
    tracing_s: float = 0.0  # the Python tracer's alone
    cache_read_s: float = 0.0  # the Python tracer's alone
    cache_hits: int = 0  # the Python tracer's alone
    traced: bool = False  # the step holds the Python tracer's events
    call_s: float = 0.0  # the jitted calls that hold it (`PjitFunction(f)`), outermost
    functions: tuple[str, ...] = ()  # those calls' functions, longest first

    @property
    def found(self) -> bool:
        """A lowering or an XLA compile ran in the step (tracing alone, or an eager op's
        cached dispatch, is no compile)."""
        return self.lowerings > 0 or self.compiles > 0

    @property
    def loaded(self) -> int:
        """Executables loaded from the persistent compilation cache: the tracer's hits, or
        lowerings that no compile followed."""
        return self.cache_hits or max(self.lowerings - self.compiles, 0)


def step_compile(host: Timeline | None, span: tuple[int, int],
                 lines: Sequence[int] = ()) -> StepCompile:
    """JAX's compile path in the step `span` (absolute begin, end ps) on the host `lines`
    (the threads that run the steps; none: every line)."""
    if host is None or span[1] <= span[0] or not _compiled_in(host):
        return StepCompile()
    ids = host.once(_compile_ids)
    if not ids.lowering.size and not ids.compiling.size:
        return StepCompile()
    parts = [ids.lowering, ids.compiling, ids.tracing, ids.cache_read]
    built = np.concatenate(parts[:2])
    kinds = host.once(_kinds)
    seconds, counts = [0, 0, 0, 0], [0, 0, 0, 0]
    hit = call = 0
    traced = False
    called: dict[str, int] = {}
    begin, end = span
    for li in lines or range(len(host.lines)):
        ld = host.lines[li]
        # The events that start in the step (a line's events are in start order).
        lo, hi = np.searchsorted(ld.start_arr, (begin - ld.start_ps, end - ld.start_ps))
        if hi <= lo:
            continue
        kind = lookup(ld.mid_arr[lo:hi], kinds, 0, ld.dense_top)
        traced = traced or bool((kind & _PYTHON).any())
        top = outermost_of(ld, np.flatnonzero(kind & _PART) + lo)
        if not top.size:
            continue
        took = np.minimum(ld.end_arr[top], end - ld.start_ps) - ld.start_arr[top]
        for k, part in enumerate(parts):
            of = member(ld.mid_arr[top], part)
            seconds[k] += int(took[of].sum())
            counts[k] += int(of.sum())
        hit += int(np.count_nonzero(kind & _HIT))
        # The jitted calls that hold a lowering or a compile: a function's first call.
        made = top[member(ld.mid_arr[top], built)]
        for at in outermost_of(ld, np.flatnonzero(kind & _CALL) + lo).tolist():
            if ((ld.start_arr[made] >= ld.start_arr[at])
                    & (ld.end_arr[made] <= ld.end_arr[at])).any():
                d = int(min(ld.end_arr[at], end - ld.start_ps) - ld.start_arr[at])
                call += d
                name = host.names[int(ld.mid_arr[at])][len(JAX_CALL):].removesuffix(")")
                called[name] = called.get(name, 0) + d
    return StepCompile(
        lowering_s=seconds[0] / 1e12, lowerings=counts[0], compile_s=seconds[1] / 1e12,
        compiles=counts[1], tracing_s=seconds[2] / 1e12, cache_read_s=seconds[3] / 1e12,
        cache_hits=hit, traced=traced, call_s=call / 1e12,
        functions=tuple(sorted(called, key=lambda n: -called[n])))


# What `step_compile` tests each event of a step for, as bits of one lookup per line (four
# tests of the Python tracer's hundreds of thousands of events cost a gather each).
_PYTHON, _PART, _HIT, _CALL = 1, 2, 4, 8


def _kinds(host: Timeline) -> dict[int, int]:
    """{metadata id: its `_PYTHON`/`_PART`/`_HIT`/`_CALL` bits} for `step_compile` (a part:
    a lowering, a compile, tracing or a cache read). Ask through `host.once`."""
    ids = host.once(_compile_ids)
    kinds: dict[int, int] = {}
    for bit, of in ((_PYTHON, id_array(host.mids_where_once(is_python_event))),
                    (_PART, np.concatenate([ids.lowering, ids.compiling, ids.tracing,
                                            ids.cache_read])),
                    (_HIT, ids.cache_hit), (_CALL, ids.calls)):
        for mid in of.tolist():
            kinds[mid] = kinds.get(mid, 0) | bit
    return kinds


def steps_compiling(host: Timeline | None, begin_ps: np.ndarray, end_ps: np.ndarray,
                    lines: Sequence[int] = ()) -> int:
    """How many of the steps (absolute begin, end ps, in order, not overlapping) hold a
    JAX lowering or XLA compile on the host `lines` (none: every line)."""
    if host is None or not begin_ps.size or not _compiled_in(host):
        return 0
    ids = host.once(_compile_ids)
    built = np.concatenate([ids.lowering, ids.compiling])
    if not built.size:
        return 0
    held = np.zeros(begin_ps.size, bool)
    for li in lines or range(len(host.lines)):
        ld = host.lines[li]
        at = np.flatnonzero(member(ld.mid_arr, built, ld.dense_top))
        if at.size:
            k, inside = span_of(ld.start_arr[at] + ld.start_ps, begin_ps, end_ps)
            held[k[inside]] = True
    return int(held.sum())


def _ms(seconds: float) -> str:
    return f"{1e3 * seconds:.1f} ms"


def compile_words(c: StepCompile) -> str:
    """What the step's compile path did, with each part's time; "" where none ran."""
    if not c.found:
        return ""
    what = f"jitted {', '.join(c.functions[:2])}" if c.functions else "a jitted function"
    # The call that compiled: a function's first call, or a later one that compiled it
    # again (a new static argument, shape or input tree), which the capture cannot tell.
    said = f"JAX built {what} in it" + (f" (the call that compiled it, {_ms(c.call_s)})"
                                        if c.call_s > 0 else "")
    parts = []
    if c.tracing_s > 0:
        parts.append(f"tracing {_ms(c.tracing_s)}")
    if c.lowerings:
        parts.append(f"lowering {_ms(c.lowering_s)}")
    if c.compiles:
        parts.append(f"XLA compile {_ms(c.compile_s)}"
                     + (f" ({c.compiles} programs)" if c.compiles > 1 else ""))
    loaded = c.loaded
    if loaded and c.cache_read_s > 0:
        parts.append(f"a load from JAX's persistent compilation cache {_ms(c.cache_read_s)}"
                     + ("" if c.compiles else " instead of an XLA compile"))
    elif loaded:
        parts.append("no XLA compile: its executable came from JAX's persistent "
                     "compilation cache")
    said += ": " + ", ".join(parts)
    if not c.traced and c.call_s > 0:
        said += (" (the rest of the call: tracing" + (", the load" if loaded else "")
                 + " and the first run, which the Python tracer splits)")
    if loaded:
        return (said + "; the persistent cache saves only the XLA compile: each restart "
                "still pays the tracing and lowering")
    return (said + "; JAX's persistent compilation cache (jax_compilation_cache_dir) would "
            "save the XLA compile on a restart, not the tracing and lowering")
