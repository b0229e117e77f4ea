"""Command line: `tfobs demo`, `tfobs analyze`, `tfobs doctor`, `tfobs options`.

Each command lives in `tfobs/commands/<name>.py` with `register(subparsers)` and
`run(args) -> int`; this module only dispatches, so `tfobs analyze` never imports TensorFlow.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import NoReturn

COMMANDS = ("demo", "analyze", "doctor", "options")
# Commands that leave nothing to the interpreter's teardown once they return (no thread,
# exporter or atexit work of their own): the console script ends them with os._exit after
# flushing. Tearing down numpy's and protobuf's modules is about 50-60 ms of a `tfobs
# analyze` on a small capture, a fifth of the whole answer (benchmarks/RESULTS.md).
QUICK_EXIT = frozenset({"analyze", "options"})


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
    except OSError as exc:  # stdout on a full disk, a device gone: one line, no traceback
        where = f" ({exc.filename})" if exc.filename else " (writing the output)"
        print(f"tfobs {args.command}: {exc.strerror or exc}{where}", file=sys.stderr)
        return 1


def console() -> NoReturn:
    """The `tfobs` console script and `python -m tfobs.cli`: `main()`, then the exit."""
    argv = sys.argv[1:]
    if sys.stdout is None:  # started with stdout closed (`>&-`): nowhere to write
        sys.stdout = open(os.devnull, "w")  # the process's own, to its end
        print("tfobs: standard output is closed; give it a file or a pipe", file=sys.stderr)
        _exit_now(1)
    try:
        code = main(argv)
    except KeyboardInterrupt:  # Ctrl-C while the command's modules load
        code = 130
    if argv and argv[0] in QUICK_EXIT:
        _exit_now(code)
    sys.exit(code)


def _exit_now(code: int) -> NoReturn:
    """Flush what the command wrote, then end the process without the teardown."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that left, a stream closed: nothing to keep
            pass
    os._exit(code)


if __name__ == "__main__":
    console()
