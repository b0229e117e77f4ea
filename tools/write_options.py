"""Rewrite what is generated from `tfobs.config.Config`'s fields, after an option changes.

    python tools/write_options.py            # rewrite both files
    python tools/write_options.py --check    # exit 1, naming the file, when one is stale

Writes the options table of docs/options.md (between its `<!-- section: options` markers)
and tfobs/runtime/enable_options.py (the keywords of `tfobs.enable()`), both from
`tfobs.commands.options`; tests/runtime/test_enable_api.py fails while either is stale.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's tfobs, not an installed one

from tfobs.commands.options import enable_keywords_module, markdown_table  # noqa: E402

OPTIONS_PAGE = ROOT / "docs" / "options.md"
KEYWORDS_MODULE = ROOT / "tfobs" / "runtime" / "enable_options.py"
# The table is the section's last block: the prose above it is written by hand.
TABLE = re.compile(r"(<!-- section: options[^>]*-->\n(?:.*\n)*?)(\| Option \|(?:.*\n)*?)"
                   r"(<!-- /section: options -->)")


def page_with_table(page: str, table: str) -> str:
    """`page` with its options table replaced by `table`; ValueError without the section."""
    new, count = TABLE.subn(lambda m: m.group(1) + table + m.group(3), page)
    if count != 1:
        raise ValueError("docs/options.md needs one '<!-- section: options' section whose "
                         "last block is the table")
    return new


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale files")
    args = parser.parse_args(argv)
    wanted = {
        OPTIONS_PAGE: page_with_table(OPTIONS_PAGE.read_text(), markdown_table()),
        KEYWORDS_MODULE: enable_keywords_module(),
    }
    stale = [p for p, text in wanted.items() if not p.exists() or p.read_text() != text]
    for path in stale:
        if args.check:
            print(f"{path.relative_to(ROOT)} is stale: run python tools/write_options.py")
        else:
            path.write_text(wanted[path])
            print(f"wrote {path.relative_to(ROOT)}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
