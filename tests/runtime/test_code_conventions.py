"""Conventions of tfobs's own code that neither ruff nor mypy checks, read from its syntax
trees: module loggers named after their module, and every error stage a known one."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tfobs.summary import ERROR_STAGES

PACKAGE = Path(__file__).resolve().parents[2] / "tfobs"

# The documented logger of the job-log lines (docs/usage.md), named for what it carries.
NAMED_LOGGERS = {"tfobs/runtime/progress.py": "tfobs.progress"}
# Modules still on the older `getLogger("tfobs")`, being restructured elsewhere.
LOGGERS_TO_RENAME = {"tfobs/config.py"}


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
            if not named and rel not in LOGGERS_TO_RENAME:
                wrong.append(f"{rel}:{call.lineno}")
    assert wrong == [], f"use logging.getLogger(__name__): {wrong}"


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
