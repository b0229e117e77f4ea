"""The public entry point: `tfobs.enable()` takes every option as a typed keyword, and the
options table (docs/options.md) repeats `OPTIONS` (name, variable, default, meaning) exactly."""

from __future__ import annotations

import dataclasses
import inspect
import json
import pathlib
import re
import typing

import tfobs
from tfobs.config import OPTIONS, Config
from tfobs.runtime import api

OPTIONS_PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "options.md"


def test_enable_takes_every_option_as_a_typed_keyword() -> None:
    params = inspect.signature(tfobs.enable).parameters
    assert list(params) == [o.name for o in OPTIONS]
    hints = typing.get_type_hints(api.enable)
    fields = {f.name: typing.get_type_hints(Config)[f.name] for f in dataclasses.fields(Config)}
    for name, p in params.items():
        assert p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is None, name
        given = [a for a in typing.get_args(hints[name]) if a is not type(None)]
        if typing.get_origin(given[0]) is typing.Literal:  # otlp_protocol's allowed values
            assert fields[name] is str
            continue
        assert given == [fields[name]], name
    assert typing.get_type_hints(api.enable)["return"] == tfobs.Runtime | None


def test_enable_false_starts_nothing() -> None:
    assert tfobs.enable(enabled=False) is None


def _cell_default(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def test_options_page_table_is_options() -> None:
    text = OPTIONS_PAGE.read_text()
    section = re.search(r"<!-- section: options.*?-->(.*?)<!-- /section: options -->", text,
                        re.S)
    assert section is not None
    rows = [r for r in section.group(1).splitlines() if r.startswith("| `")]
    assert len(rows) == len(OPTIONS)
    for row, opt in zip(rows, OPTIONS, strict=True):
        name, env, default, meaning = (c.strip() for c in row.strip("|").split(" | "))
        assert name == f"`{opt.name}`" and env == f"`{opt.env}`"
        assert re.match(r"`([^`]*)`", default).group(1) == _cell_default(opt.default), opt.name
        assert meaning == opt.help, opt.name
