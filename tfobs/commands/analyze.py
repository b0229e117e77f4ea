"""`tfobs analyze PATH`: XProf's overview page for one capture, in the terminal or as JSON.

PATH is an `.xplane.pb` file (or one gzip-compressed) or a TensorBoard log folder (the
newest run under `plugins/profile/`, or `--run NAME`; a run of several hosts, one capture
each, gives one summary per host); several may be given. `--html FILE` writes the overview
page, `--serve PORT` replays the figures as the live exporter would. Bad input exits 2 with one
line on stderr. Never imports TensorFlow. Names come from the capture (any bytes a program
put there): every control character (C0, DEL, C1) and bidirectional override is shown escaped
(`\\x1b`), so a crafted capture cannot retitle, clear or reorder the terminal.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import stat
import sys
from typing import Any

from tfobs.errors import CaptureError
from tfobs.summary import CATEGORIES, WindowSummary, no_nan

BAR_WIDTH = 30
# Control characters but the newline, and the bidirectional overrides: shown as escapes.
_UNPRINTABLE = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x20), *range(0x7f, 0xa0))
                if c != 0x0a}
_UNPRINTABLE.update({c: f"\\u{c:04x}" for c in (*range(0x202a, 0x202f),
                                                 *range(0x2066, 0x206a))})


def printable(text: str) -> str:
    """`text` with every control character escaped but the newline (for a terminal)."""
    return text.translate(_UNPRINTABLE)


def register(sub: Any) -> None:
    p = sub.add_parser("analyze", help="summarise a profiler capture (no TensorFlow needed)",
                       description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="an .xplane.pb file (gzip-compressed too) or a TensorBoard log "
                   "folder (one or more)")
    p.add_argument("--run", default=None,
                   help="run folder under plugins/profile/ (default: newest)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--top", type=int, default=5, help="rows in each top-N table (default 5)")
    p.add_argument("--html", default=None, metavar="FILE",
                   help="also write the overview page (self-contained HTML) to FILE; several "
                   "captures: a before/after page of all of them")
    p.add_argument("--serve", type=int, default=None, metavar="PORT",
                   help="also serve the summary as Prometheus metrics on PORT")
    p.add_argument("--bind", default="127.0.0.1", help="address for --serve (default 127.0.0.1)")
    p.add_argument("--seconds", type=float, default=None,
                   help="with --serve: stop after this many seconds (default: until Ctrl-C)")


def _write_page(target: str, page: bytes) -> str:
    """Write `page` to `target`; '' or why not. A file is written beside it, then moved over
    it (a failed write leaves the old file); through a link, over the file it names. What is
    no file (/dev/stdout, /dev/null, a FIFO) is written as it is: a file moved over it
    replaced the device itself (as root, /dev/null became a file of the page)."""
    try:
        info = os.stat(target)
    except FileNotFoundError:
        info = None  # a new file, or a link to none
    except OSError as exc:
        return exc.strerror or str(exc)
    if info is not None and not stat.S_ISREG(info.st_mode):
        try:
            with open(target, "wb") as f:
                f.write(page)
        except OSError as exc:
            return exc.strerror or str(exc)
        return ""
    path = os.path.realpath(target) if info is not None else target
    part = f"{path}.{os.getpid()}.part"
    try:
        with open(part, "wb") as f:
            f.write(page)
        os.replace(part, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(part)
        return exc.strerror or str(exc)
    return ""


def _fail(message: str) -> int:
    print(printable(f"tfobs analyze: {message}".replace("\n", " ")), file=sys.stderr)
    return 2


_CHUNK = 1 << 16


def run(args: argparse.Namespace) -> int:
    if "numpy" not in sys.modules:
        # The reduction does no linear algebra: OpenBLAS starting a thread per core when
        # numpy loads is about a third of this command's start-up on a small capture.
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from tfobs.analysis.pipeline import analyze
    from tfobs.reduce.heap import keep_freed_memory

    if args.top < 0 or args.top > 1000:
        return _fail(f"--top must be between 0 and 1000, got {args.top}")
    if args.serve is not None and not 0 <= args.serve <= 65535:
        return _fail(f"--serve must be a port between 0 and 65535, got {args.serve}")
    if args.seconds is not None and not 0 <= args.seconds <= 86400 * 366:
        # nan served nothing and said nothing; inf and 1e300 overflowed threading's wait
        # (a traceback after the port was bound)
        return _fail(f"--seconds must be a number of seconds from 0 to 31622400 (omit it to "
                     f"serve until Ctrl-C), got {args.seconds}")
    summaries = []
    labels: list[str] = []
    # This process is the command's own: the cycle collector waits while the captures are
    # reduced (their per-step objects made it run over and over: a fifth of a long
    # window's reduction) and resumes before anything long-running (--serve).
    collecting = gc.isenabled()
    gc.disable()
    keep_freed_memory()  # as the reduce helper does: no page fault per array made
    failed = False  # a capture that could not be read: said on its line, exit 2 at the end
    try:
        for path in args.paths:
            try:
                sources = _sources(path, args.run)
            except CaptureError as exc:
                _fail(_named(" ".join(str(exc).split()), path))
                failed = True
                continue
            # Each capture on its own: a bad one among several is said, by name, and the
            # others are still summarised (the exit status says one failed).
            for source in sources:
                try:
                    summaries.append(analyze(source, run=args.run, top_n=args.top))
                    labels.append(str(source))
                except CaptureError as exc:
                    _fail(_named(" ".join(str(exc).split()), source))
                    failed = True
                except Exception as exc:  # never a traceback on bad input
                    _fail(f"cannot analyze {source}: {type(exc).__name__}: {exc}")
                    failed = True
    finally:
        if collecting:
            gc.enable()
    if not summaries:
        return 2
    if args.format == "json":
        docs = [no_nan(s.to_dict()) for s in summaries]
        # Rendered once (json.dump to a stream writes every token separately), written in
        # 64 KiB pieces: one huge write to a pipe whose reader left can end without EPIPE,
        # and `| head` must still end with 141 (cli.main).
        text = json.dumps(docs[0] if len(docs) == 1 else docs, indent=1, sort_keys=True) + "\n"
        for i in range(0, len(text), _CHUNK):
            sys.stdout.write(text[i:i + _CHUNK])
    else:
        # A file name that is not UTF-8 shows its odd bytes escaped (`\xff`): written as
        # they are, a UTF-8 terminal or file refuses them.
        pages = (render(s, os.fsencode(p).decode("utf-8", "backslashreplace"))
                 for s, p in zip(summaries, labels, strict=True))
        sys.stdout.write(printable("\n".join(pages)))
    if args.html:
        from tfobs.export.page import render_page

        # Several captures: a before/after page (history, first against last). A file name
        # that is not UTF-8 shows its odd bytes as U+FFFD.
        names = [os.fsencode(os.path.basename(os.path.normpath(p))).decode("utf-8", "replace")
                 for p in labels]
        page = render_page(summaries[-1], history=list(
            zip(names, summaries, strict=True)) if len(summaries) > 1 else (),
            source=names[-1]).encode("utf-8", "replace")
        problem = _write_page(args.html, page)
        if problem:
            return _fail(f"cannot write --html {args.html}: {problem}")
        # stderr: stdout holds the table or the JSON, which scripts read
        print(f"tfobs analyze: wrote {args.html}", file=sys.stderr, flush=True)
    if args.serve is not None:
        from tfobs.export.replay import serve

        served = int(serve(summaries, port=args.serve, bind=args.bind,
                           seconds=args.seconds) or 0)
        return served or (2 if failed else 0)
    return 2 if failed else 0


def _named(message: str, path: str) -> str:
    """`message` naming the capture it is about, where it does not yet; a TensorBoard trace
    (`*.trace.json.gz`) is told apart, as analyze reads XSpace captures only."""
    text = message if path in message else f"{path}: {message}"
    if path.endswith((".trace.json.gz", ".trace.json")):
        text += ("; analyze reads *.xplane.pb captures (the run folder's, beside this "
                 "trace): give it that file or the folder")
    return text


def _sources(path: str, run: str | None) -> list[str]:
    """A folder's run as its hosts' capture files (each summarised on its own: one host's
    figures are not another's); a file, or a path that is not there, as given."""
    from pathlib import Path

    from tfobs.analysis.load import run_captures

    folder = Path(path)
    if not folder.is_dir():
        return [path]
    return [str(p) for p in run_captures(folder, run)]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:9.2f} ms"


def _short(name: str, width: int = 90) -> str:
    """A name cut to `width` in the middle: library kernel names tell most at their start,
    op names and tf.data stages at their end (`.../while_grad/body/_149/.../MatMul_1`,
    `...::SnapshotReader::ParallelInterleaveV4[0]::SnapshotDatasetReader/_0`)."""
    if len(name) <= width:
        return name
    head = (width - 3) * 2 // 5
    return name[:head] + "..." + name[len(name) - (width - 3 - head):]


def _allocation(name: str, allocator: str) -> str:
    """An allocation row's name; XProf's row for the heap bytes no allocation in the window
    accounts for says what they are on a host allocator (no device memory is preallocated
    there: the job's arrays, constants and variables made before the window)."""
    from tfobs.analysis.memory import UNUSED_PREALLOCATED, device_allocator

    if name == UNUSED_PREALLOCATED and not device_allocator(allocator):
        return "held since before the window (XProf: preallocated)"
    return name or "-"


def _bar(ratio: float) -> str:
    n = max(0, min(BAR_WIDTH, round(ratio * BAR_WIDTH)))
    return "#" * n + "." * (BAR_WIDTH - n)


def render(s: WindowSummary, label: str = "") -> str:
    """The overview page as plain text."""
    out: list[str] = []

    def add(line: str) -> None:  # one line each: a name from the capture may hold "\n"
        out.append(line.replace("\n", "\\n"))

    env = s.environment
    add(f"tfobs analyze {label}".rstrip())
    add(f"  hosts: {', '.join(dict.fromkeys(env.hosts)) or '-'}   devices: {env.device_count} x "
        f"{env.device_type}   window: {s.duration_s:.2f} s")
    st = s.steps
    add("")
    add(f"Steps: {st.count} ({st.method})" + (f"  - {st.note}" if st.note else ""))
    if st.count:
        durations = [x.duration_s for x in st.items]
        add(f"  step time: mean {_ms(st.mean_s)}  min {_ms(min(durations))}  "
            f"max {_ms(max(durations))}")
        if st.interval_s > 0:
            add(f"  steps start every {_ms(st.interval_s)}; "
                f"{100 * st.outside_ratio:.1f} % of that is in no step"
                + (f", {100 * st.input_between_s / st.interval_s:.1f} % waiting for input"
                   if st.input_between_s > 0 else ""))
            in_steps = st.interval_s * (1 - st.outside_ratio)  # of each interval
            if ((st.interval_s < 0.95 * st.mean_s or in_steps > 1.05 * st.mean_s)
                    and st.count > 1 and "overlap in time" not in st.note):  # one thread's
                # Start to start leaves the last step out: a long last one makes the
                # interval read well below the mean step, as if steps overlapped; a short
                # one well above it, with no time out of the steps to account for that.
                last = max(st.items, key=lambda x: x.start_ns).duration_s
                n = st.count - 1
                add(f"    (the mean of the {n} interval{'s' * (n != 1)} between the steps' starts: "
                    f"the last step, {_ms(last).strip()}, is in none)")
        if st.python_traced_s > 0:
            add(f"  Python functions inside the step (Python tracer): "
                f"{_ms(st.python_traced_s)} per step, "
                f"{100 * st.python_traced_s / st.mean_s:.1f} %; most in "
                f"{_short(', '.join(st.python_traced_top), 60)}")
        add("")
        add("Step-time breakdown (mean per step)")
        ratios = s.breakdown_ratio
        for cat in CATEGORIES:
            v = s.breakdown_s.get(cat, 0.0)
            add(f"  {cat:<19} {_ms(v)}  {_bar(ratios.get(cat, 0.0))} "
                f"{100 * ratios.get(cat, 0.0):5.1f} %")
    # With steps, the calls of other tasks' functions only (a parameter-server coordinator's
    # dispatched step functions: the workers' work, not in this host's breakdown); the
    # step's own function is the steps themselves.
    calls = st.calls if not st.count else tuple(c for c in st.calls if c.source != "python")
    if calls:
        add("  function calls (no training step):" if not st.count else
            "  function calls to or from other tasks (their work is in those tasks' captures):")
        for c in calls[:5]:
            add(f"    x{c.count:<6} {c.per_s:9.1f} per s  {_ms(c.mean_s)} per call  "
                f"{c.source:<10}  {_short(c.name, 66)}")
    add("")
    add(f"Input-bound: {s.input_bound.verdict} ({100 * s.input_bound.ratio:.1f} % of step time)")
    add(f"  {s.input_bound.advice}")
    beyond = s.input_beyond_xprof()
    if beyond is not None:
        add(f"  tfobs [{beyond[0]}]: {beyond[1]}, which XProf's verdict misses (advice "
            "input_bound below)")
    ip = s.input_pipeline
    if ip.slowest_stage is not None:
        add(f"  slowest tf.data stage: {ip.slowest_stage.name} "
            f"({ip.slowest_stage.self_s * 1e3:.2f} ms self time)")
        if ip.slowest_stage.merged_note:
            add(f"    {ip.slowest_stage.merged_note}")
    if ip.xprof_only_input_s > 0:
        add(f"  not input, though XProf counts it as input by its op type: "
            f"{_ms(ip.xprof_only_input_s).strip()} in {', '.join(ip.xprof_only_input_ops[:3])}")
    if ip.top_input_ops:
        add("  host input ops (self time in the window):")
        for op in ip.top_input_ops:
            add(f"    {_ms(op.self_s)}  x{op.count:<6} {_short(op.name)}")
    if s.ops.top:
        add("")
        add(f"Top ops by self time (host {100 * s.ops.host_ratio:.1f} % of op time)")
        for op in s.ops.top:
            where = "device" if op.on_device else "host"
            add(f"  {_ms(op.self_s)}  x{op.count:<6} {where:<6} {_short(op.name)}")
    if s.ops.xla_programs_s > 0:
        add(f"  XLA's compiled programs (jit_compile): {_ms(s.ops.xla_programs_s).strip()} "
            "in the window, in no row above (their ops are XLA's, not TensorFlow's)")
    st = s.steps
    if st.in_graph_loop_s > 0 and st.mean_s > 0:
        where = f" ({', '.join(st.in_graph_loop_scopes)})" if st.in_graph_loop_scopes else ""
        add(f"  in-graph loop iterations{where}: {_ms(st.in_graph_loop_s).strip()} per step "
            f"({100 * st.in_graph_loop_s / st.mean_s:.0f} % of the step), "
            f"{100 * st.in_graph_loop_op_s / st.in_graph_loop_s:.0f} % of it in op events: "
            "the rest, the executor running the body's small ops, is in no row above")
    k = s.kernels
    if k.total_s > 0 or k.items:
        add("")
        add(f"Kernels: total {_ms(k.total_s)}, Tensor Cores {_ms(k.tensor_core_s)}, "
            f"eligible ops {_ms(k.eligible_op_s)}")
        add(f"  16-bit kernel time {100 * s.device_compute_16bit_ratio:.1f} % (XProf's "
            f"name rule: {100 * s.device_compute_16bit_ratio_xprof:.1f} %)"
            + (f"; Tensor Core use unknown for {_ms(k.tensor_core_unknown_s).strip()}"
               if k.tensor_core_unknown_s > 0 else ""))
        for item in k.items[:5]:
            add(f"  {_ms(item.total_s)}  x{item.count:<6} {_short(item.name)}")
    for d in s.devices:
        if not d.span_s:
            continue
        add("")
        idle = ", ".join(f"{cause} {100 * v / d.span_s:.1f} %" for cause, v in d.idle_s.items())
        add(f"{d.device}: busy {100 * d.busy_s / d.span_s:.1f} %  idle: {idle or '-'}")
        add(f"  kernels {d.kernel_count}, mean {_ms(d.mean_kernel_s)}, launch delay mean "
            f"{_ms(d.launch_delay_mean_s)} p95 {_ms(d.launch_delay_p95_s)}")
    if s.memory:
        add("")
        add("Memory (peak in the window, per allocator)")
        for m in s.memory:
            frag = (f"{100 * m.fragmentation_ratio:5.1f} %" if m.fragmentation_known
                    else "unknown")
            add(f"  {m.allocator:<28} peak {m.peak_bytes / 2**20:10.1f} MiB of "
                f"{m.capacity_bytes / 2**20:10.1f} MiB  fragmentation "
                f"{frag}  allocs {m.allocations}")
            for a in m.top_allocations:
                add(f"    {a.bytes / 2**20:10.2f} MiB  {a.data_type or '-':<9} "
                    f"{a.shape or '-':<16} {_short(_allocation(a.op_name, m.allocator), 70)}")
    out.extend(render_advice(s))
    return "\n".join(out) + "\n"


def render_advice(s: WindowSummary) -> list[str]:
    """One block per fired rule: id and sentence, the evidence it read, the fix, the guide."""
    if not s.advice:
        return []
    out = ["", "Advice (rule: finding / evidence / fix / guide section)"]
    for a in s.advice:
        out.append(f"  [{a.severity}] {a.code}: {a.message}")
        if a.evidence:
            ev = ", ".join(f"{k}={_num(v)}" for k, v in a.evidence.items())
            out.append(f"      evidence: {ev}" + (f"  (threshold: {a.threshold})"
                                                  if a.threshold else ""))
        if a.fix:
            out.append(f"      fix: {a.fix}")
        if a.guide:
            out.append(f"      guide: {a.guide}")
    return [line.replace("\n", "\\n") for line in out]  # names in messages: one line


def _num(v: float) -> str:
    return f"{v:.4g}"
