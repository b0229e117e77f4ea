"""Run a function right after the job imports a module (or now, if it has).

`tfobs.enable()` is the first line of a training script: the framework is not imported
yet, and where TensorFlow and JAX are both installed tfobs must not import either to find
out which the job uses. Keras's `fit` must be wrapped before the job's first fit, and JAX's
`StepTraceAnnotation` before its first step, so both are wrapped the moment their module
has been executed, on the importing thread.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

_log = logging.getLogger(__name__)
_lock = threading.Lock()
_waiting: dict[str, list[Callable[[], None]]] = {}


def imported(name: str) -> bool:
    """`name` is in sys.modules and done executing."""
    mod = sys.modules.get(name)
    spec = getattr(mod, "__spec__", None)
    return mod is not None and not getattr(spec, "_initializing", False)


def when_imported(name: str, fn: Callable[[], None]) -> None:
    """Call `fn()` once `name` has been imported: now if it has, else right after."""
    with _lock:
        if not imported(name):
            _waiting.setdefault(name, []).append(fn)
            if _finder not in sys.meta_path:
                sys.meta_path.insert(0, _finder)
            return
    _call(fn)


def forget() -> None:
    """Drop every pending call (tfobs stopped)."""
    with _lock:
        _waiting.clear()
        if _finder in sys.meta_path:
            sys.meta_path.remove(_finder)


def _call(fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception:  # never into the job's import
        _log.debug("tfobs: a post-import hook failed", exc_info=True)


def _ran(name: str) -> None:
    with _lock:
        calls = _waiting.pop(name, [])
        if not _waiting and _finder in sys.meta_path:
            sys.meta_path.remove(_finder)
    for fn in calls:
        _call(fn)


class _Loader(importlib.abc.Loader):
    def __init__(self, loader: Any, name: str) -> None:
        self._loader, self._name = loader, name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self._loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        # Done executing: importlib clears the flag only after this returns, and the hooks
        # below import the module themselves.
        module.__spec__._initializing = False  # type: ignore[union-attr]
        if self._name in sys.modules:
            _ran(self._name)

    def __getattr__(self, attr: str) -> Any:  # resources, get_code, ...: the real loader's
        return getattr(self._loader, attr)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _waiting:
            return None
        for finder in sys.meta_path:  # the spec the rest of the import system would find
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            spec: importlib.machinery.ModuleSpec | None = (
                find(fullname, path, target) if find is not None else None)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, fullname)
                return spec
        return None


_finder = _Finder()
