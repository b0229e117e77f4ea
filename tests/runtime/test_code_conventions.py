"""Conventions of tfobs's own code that neither ruff nor mypy checks, read from its syntax
trees: no `except Exception` that swallows silently, module loggers named after their
module, and every error stage a known one."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tfobs.summary import ERROR_STAGES

PACKAGE = Path(__file__).resolve().parents[2] / "tfobs"

# The documented logger of the job-log lines (docs/usage.md), named for what it carries.
NAMED_LOGGERS = {"tfobs/runtime/progress.py": "tfobs.progress"}
# Modules that reach other libraries' loggers (to filter their lines), by the tuple of
# names they loop over; tfobs's own loggers there are still named after the module.
FOREIGN_LOGGERS = {"tfobs/export/otel.py": "_EXPORTER_LOGGERS"}


# `except Exception` handlers that may drop an error unsaid, by (file, enclosing function).
SILENT_ALLOWED = {
    # A job-log line that failed: logging that failure would go through the same handler.
    ("tfobs/runtime/progress.py", "say"),
}
_LOG_CALLS = {"debug", "info", "warning", "error", "exception", "critical", "warn", "log", "say"}


def _says_or_counts(handler: ast.ExceptHandler) -> bool:
    """Raises, logs, counts, or passes the caught exception on (a result, a reason)."""
    for node in ast.walk(ast.Module(body=handler.body, type_ignores=[])):
        if isinstance(node, ast.Raise):
            return True
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name in _LOG_CALLS or "count" in name or name == "report":
                return True
        if isinstance(node, ast.Name) and handler.name and node.id == handler.name:
            return True
    return False


def _broad(node: ast.expr | None) -> bool:
    if node is None:
        return True
    if isinstance(node, ast.Tuple):
        return any(_broad(e) for e in node.elts)
    return isinstance(node, ast.Name) and node.id in ("Exception", "BaseException")


def _silent_handlers(rel: str, tree: ast.Module) -> Iterator[tuple[str, int]]:
    def visit(node: ast.AST, function: str) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            inner = (child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
                     else function)
            if (isinstance(child, ast.ExceptHandler) and _broad(child.type)
                    and not _says_or_counts(child)):
                yield inner, child.lineno
            yield from visit(child, inner)

    yield from visit(tree, "<module>")


def test_no_broad_except_swallows_an_error_unsaid() -> None:
    # tfobs never raises into the job, so it catches broadly; each such catch must leave a
    # trace: a count (tfobs_errors_total), a log line (debug where swallowing is right,
    # with exc_info), a re-raise, or the error passed on as a result.
    silent, used = [], set()
    for rel, tree in _trees():
        for function, line in _silent_handlers(rel, tree):
            if (rel, function) in SILENT_ALLOWED:
                used.add((rel, function))
            else:
                silent.append(f"{rel}:{line} in {function}()")
    assert silent == [], ("log (debug, exc_info=True) or count these, with a comment why "
                          f"swallowing is right: {silent}")
    assert used == SILENT_ALLOWED, f"no longer needed: {SILENT_ALLOWED - used}"


def test_the_swallow_check_finds_a_silent_handler() -> None:
    code = ("def f():\n    try:\n        g()\n    except Exception:\n        pass\n"
            "def h():\n    try:\n        g()\n    except Exception:\n"
            "        _log.debug('x', exc_info=True)\n")
    assert list(_silent_handlers("x.py", ast.parse(code))) == [("f", 4)]


def _trees() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        yield rel, ast.parse(path.read_text(), filename=rel)


def _calls(tree: ast.AST, name: str) -> Iterator[ast.Call]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if (isinstance(f, ast.Attribute) and f.attr == name) or (
                    isinstance(f, ast.Name) and f.id == name):
                yield node


def test_module_loggers_are_named_after_their_module() -> None:
    wrong = []
    for rel, tree in _trees():
        for call in _calls(tree, "getLogger"):
            arg = call.args[0] if call.args else None
            if isinstance(arg, ast.Name) and arg.id == "__name__":
                continue
            named = isinstance(arg, ast.Constant) and NAMED_LOGGERS.get(rel) == arg.value
            foreign = rel in FOREIGN_LOGGERS and _loops_over(tree, call, FOREIGN_LOGGERS[rel])
            if not named and not foreign:
                wrong.append(f"{rel}:{call.lineno}")
    assert wrong == [], f"use logging.getLogger(__name__): {wrong}"


def _loops_over(tree: ast.AST, call: ast.Call, names: str) -> bool:
    """Whether `call` takes its logger name from a `for` loop over the constant `names`, or
    indexes that constant."""
    arg = call.args[0] if call.args else None
    if isinstance(arg, ast.Subscript):
        return isinstance(arg.value, ast.Name) and arg.value.id == names
    for node in ast.walk(tree):
        if (isinstance(node, ast.For) and isinstance(node.iter, ast.Name)
                and node.iter.id == names and isinstance(node.target, ast.Name)
                and isinstance(arg, ast.Name) and arg.id == node.target.id
                and any(c is call for c in ast.walk(node))):
            return True
    return False


def test_every_error_stage_written_in_the_code_is_a_known_stage() -> None:
    # mypy checks calls typed with ErrorStage; this also covers callbacks typed `str`
    # (the HTTP server's on_error) and catches a misspelled stage before it becomes a label.
    seen, unknown = set(), []
    for rel, tree in _trees():
        for name in ("on_error", "count_error", "report"):
            for call in _calls(tree, name):
                arg = call.args[0] if call.args else None
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    seen.add(arg.value)
                    if arg.value not in ERROR_STAGES:
                        unknown.append(f"{rel}:{call.lineno} {arg.value!r}")
    assert unknown == [], unknown
    assert {"capture", "reduce", "http_auth"} <= seen  # the walk found the call sites
