"""Command line: `tfobs demo`, `tfobs analyze`, `tfobs doctor`, `tfobs options`.

Each command lives in `tfobs/commands/<name>.py` with `register(subparsers)` and
`run(args) -> int`; this module only dispatches, so `tfobs analyze` never imports TensorFlow.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

COMMANDS = ("demo", "analyze", "doctor", "options")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tfobs", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"tfobs.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from tfobs import __version__

        print(__version__)
        return 0
    if not args.command:
        parser.print_help()
        return 2
    module = importlib.import_module(f"tfobs.commands.{args.command}")
    try:
        code = int(module.run(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `tfobs analyze --format json | head`: the reader left; stop quietly. Point stdout at
        # /dev/null so the interpreter's final flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell pipeline expects
    except ValueError as exc:  # ConfigError, CaptureError: bad input, one line, no traceback
        print(f"tfobs {args.command}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
