"""The compiled loops (`tfobs/xspace/_wire.c`) against numpy alone, same bytes, one process.

    python benchmarks/compiled_loops.py                  # the GRU fit capture
    python benchmarks/compiled_loops.py CAPTURE ... --rounds 40

Per round, interleaved: a bare protobuf parse, the whole reduction with the compiled loops,
and the whole reduction with them switched off (`columns._wire = None`, as an install
without a C compiler runs). Thread CPU time, first quartile of the rounds (the least
disturbed on a shared machine). The two reductions' summaries must be equal; the script
stops if they are not. Prints each time and each reduction as a multiple of the parse.

With `--each`: the whole reduction with every compiled loop, against the same with one of
the analyses' loops switched off (its numpy code runs instead), loop by loop, interleaved
per round: what each compiled analysis loop saves on each capture.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tfobs.analysis import breakdown, ops, steps  # noqa: E402
from tfobs.analysis.pipeline import reduce_xspace  # noqa: E402
from tfobs.xspace import columns, schema  # noqa: E402

# The analyses' compiled loops: (module that calls it, name it calls it by).
LOOPS = {"type_sweep": (breakdown, "type_sweep"), "gap_sums": (breakdown, "gap_sums"),
         "link_codes": (steps, "link_codes"), "group_walk": (steps, "group_walk"),
         "op_nesting": (ops, "op_nesting")}

DEFAULT = ROOT / "tests/data/captures/generated__tf2.21cpu__gru_fit.xplane.pb"


def _quartile(times: list[float]) -> float:
    return sorted(times)[len(times) // 4] * 1e3


def measure(path: pathlib.Path, rounds: int) -> str:
    data = path.read_bytes()
    wire = columns._wire
    if wire is None:
        sys.exit("the compiled module is not built: pip install -e . with a C compiler")
    for _ in range(3):  # warm caches and the allocator
        reduce_xspace(data)
    parse, fast, plain = [], [], []
    try:
        for _ in range(rounds):
            t = time.thread_time()
            schema.XSpace().ParseFromString(data)
            parse.append(time.thread_time() - t)
            columns._wire = wire
            t = time.thread_time()
            a = reduce_xspace(data)
            fast.append(time.thread_time() - t)
            columns._wire = None
            t = time.thread_time()
            b = reduce_xspace(data)
            plain.append(time.thread_time() - t)
            if a.to_dict() != b.to_dict():
                sys.exit(f"{path.name}: the compiled and numpy reductions differ")
    finally:
        columns._wire = wire
    p, c, n = _quartile(parse), _quartile(fast), _quartile(plain)
    return (f"{path.name} {path.stat().st_size / 1e6:.2f} MB: parse {p:.2f} ms, compiled "
            f"{c:.2f} ms ({c / p:.2f}x the parse), numpy {n:.2f} ms ({n / p:.2f}x)")


def _off(*_args: object) -> None:
    return None  # as the wrapper answers where `_wire` is missing


def measure_each(path: pathlib.Path, rounds: int) -> str:
    data = path.read_bytes()
    if columns._wire is None:
        sys.exit("the compiled module is not built: pip install -e . with a C compiler")
    for _ in range(3):
        reduce_xspace(data)
    want = reduce_xspace(data).to_dict()
    times: dict[str, list[float]] = {"all": [], **{name: [] for name in LOOPS}}
    for _ in range(rounds):
        for name in times:
            module, attr = LOOPS.get(name, (None, ""))
            kept = getattr(module, attr) if module is not None else None
            if module is not None:
                setattr(module, attr, _off)
            try:
                t = time.thread_time()
                got = reduce_xspace(data)
                times[name].append(time.thread_time() - t)
            finally:
                if module is not None:
                    setattr(module, attr, kept)
            if got.to_dict() != want:
                sys.exit(f"{path.name}: the reduction without compiled {name} differs")
    base = _quartile(times["all"])
    parts = [f"{name} off {_quartile(times[name]):.2f} ms "
             f"({_quartile(times[name]) / base:.2f}x)" for name in LOOPS]
    return f"{path.name}: all compiled {base:.2f} ms; " + "; ".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", type=pathlib.Path, default=[DEFAULT])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--each", action="store_true", help="each analysis loop switched off alone")
    args = ap.parse_args()
    print(f"rounds={args.rounds} (thread CPU, first quartile; interleaved per round)")
    for path in args.paths:
        print(measure_each(path, args.rounds) if args.each else measure(path, args.rounds))


if __name__ == "__main__":
    main()
