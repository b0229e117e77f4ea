"""`tfobs analyze`: table and JSON output, one-line errors with exit 2, no TensorFlow."""

from __future__ import annotations

import gzip
import html
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from tests.conftest import CAPTURES
from tfobs.analysis import load
from tfobs.cli import main
from tfobs.errors import CaptureError

TFKERAS = CAPTURES / "generated__tf2.20cpu__tfkeras_fit.xplane.pb"


def test_table_shows_the_overview(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(TFKERAS)]) == 0
    out = capsys.readouterr().out
    assert "Steps: 18 (markers)" in out
    assert "Input-bound: highly" in out
    assert "Your program is HIGHLY input-bound because 99.2%" in out
    assert "host_compute" in out and "#" in out
    assert "slowest tf.data stage" in out


def test_json_and_tensorboard_log_folder(tmp_path: pathlib.Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    for run, src in (("2024_01_01_00_00_00", "generated__tf2.20cpu__keras3_fit"),
                     ("2024_02_01_00_00_00", "generated__tf2.20cpu__tfkeras_fit")):
        folder = tmp_path / "plugins" / "profile" / run
        folder.mkdir(parents=True)
        shutil.copyfile(CAPTURES / f"{src}.xplane.pb", folder / "host.xplane.pb")
    assert main(["analyze", str(tmp_path), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["steps"]["method"] == "markers"  # newest
    assert main(["analyze", str(tmp_path), "--run", "2024_01_01_00_00_00",
                 "--format", "json", "--top", "2"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["steps"]["method"] == "inferred" and len(d["ops"]["top"]) == 2


def test_a_run_of_several_hosts_gives_one_summary_per_host(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A multi-worker job profiled by TensorBoard: one <host>.xplane.pb per worker in the run.
    run = tmp_path / "plugins" / "profile" / "2024_03_01_00_00_00"
    run.mkdir(parents=True)
    shutil.copyfile(CAPTURES / "generated__tf2.20cpu__keras3_fit.xplane.pb",
                    run / "worker-0.xplane.pb")
    shutil.copyfile(TFKERAS, run / "worker-1.xplane.pb")
    assert main(["analyze", str(tmp_path), "--format", "json"]) == 0
    docs = json.loads(capsys.readouterr().out)
    assert [d["steps"]["method"] for d in docs] == ["inferred", "markers"]  # by host name
    assert main(["analyze", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("tfobs analyze ") == 2
    assert str(run / "worker-0.xplane.pb") in out and str(run / "worker-1.xplane.pb") in out


def test_a_gzip_compressed_capture_reads_as_the_file_it_holds(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Archives keep captures gzip-compressed (`gzip host.xplane.pb`); in one gzip member or
    # several (`cat a.gz b.gz`), they give the plain file's summary.
    raw = TFKERAS.read_bytes()
    one = tmp_path / "one.xplane.pb.gz"
    one.write_bytes(gzip.compress(raw))
    two = tmp_path / "two.xplane.pb.gz"
    two.write_bytes(gzip.compress(raw[:1000]) + gzip.compress(raw[1000:]))
    outs = []
    for path in (TFKERAS, one, two):
        assert main(["analyze", str(path), "--format", "json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        outs.append({k: v for k, v in doc.items() if k != "source"})
    assert outs[0]["steps"]["count"] == 18
    assert outs[1] == outs[0] and outs[2] == outs[0]


@pytest.mark.parametrize("case", ["missing", "empty", "truncated", "not_xspace",
                                  "empty_folder", "unknown_run", "truncated_gzip",
                                  "gzip_of_garbage", "gzip_past_the_limit",
                                  "seconds_inf", "seconds_nan", "seconds_negative"])
def test_bad_input_exits_2_with_one_line(case: str, tmp_path: pathlib.Path,
                                         capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "x.xplane.pb"
    args = []
    if case == "empty":
        path.write_bytes(b"")
    elif case == "truncated":
        path.write_bytes(TFKERAS.read_bytes()[:5000])
    elif case == "not_xspace":
        path.write_bytes(b'{"traceEvents": []}\n' * 50)
    elif case == "empty_folder":
        path = tmp_path
    elif case == "unknown_run":
        (tmp_path / "plugins" / "profile" / "r1").mkdir(parents=True)
        shutil.copyfile(TFKERAS, tmp_path / "plugins" / "profile" / "r1" / "h.xplane.pb")
        path, args = tmp_path, ["--run", "nope"]
    elif case == "truncated_gzip":
        path.write_bytes(gzip.compress(TFKERAS.read_bytes())[:4000])
    elif case == "gzip_of_garbage":
        path.write_bytes(gzip.compress(TFKERAS.read_bytes())[:20] + b"\xff" * 400)
    elif case == "gzip_past_the_limit":  # a small file that expands past the limit
        packed = gzip.compress(b"\0" * 200_000)
        monkeypatch.setattr(load, "MAX_FILE_BYTES", 100_000)
        path.write_bytes(packed)
    elif case.startswith("seconds_"):  # checked before any port is bound
        path = TFKERAS
        value = {"seconds_inf": "inf", "seconds_nan": "nan", "seconds_negative": "-1"}[case]
        args = ["--serve", "0", "--seconds", value]
    assert main(["analyze", str(path), *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfobs analyze: ")
    assert "Traceback" not in captured.err


def test_a_gzip_bomb_is_refused_without_holding_its_expansion(monkeypatch) -> None:
    # A small file that expands far past the limit: refused while counting, piece by
    # piece, never held whole (4.2 GB of memory for a 3 MB file that expands to 3 GiB).
    import tracemalloc

    monkeypatch.setattr(load, "MAX_FILE_BYTES", 8 << 20)
    monkeypatch.setattr(load, "_PIECE", 256 << 10)
    packed = gzip.compress(b"\0" * (64 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(CaptureError, match="over the 2 GiB protobuf limit"):
            load._plain(packed, "bomb.xplane.pb.gz")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 << 20, peak  # pieces, not the 8 MiB limit (nor the 64 MiB expansion)
    # a gzip capture within the limit still reads whole, every member
    members = gzip.compress(b"a" * 300_000) + gzip.compress(b"b" * 300_000)
    assert load._plain(members, "two") == b"a" * 300_000 + b"b" * 300_000
    # bytes after the last member that start none (zeros a copy padded it with) are
    # ignored, as `gzip -t` ignores them
    assert load._plain(members + b"\0" * 512, "padded") == b"a" * 300_000 + b"b" * 300_000


def test_command_does_not_import_tensorflow() -> None:
    code = (
        "import sys, io, contextlib\n"
        "from tfobs.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    rc = main(['analyze', {str(TFKERAS)!r}])\n"
        "assert rc == 0, rc\n"
        "print('tensorflow' in sys.modules, 'prometheus_client' in sys.modules)\n"
    )
    root = pathlib.Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=root, timeout=120, check=True).stdout.split()
    assert out == ["False", "False"]


def test_several_captures_and_html_page(tmp_path: pathlib.Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    gemm = CAPTURES / "tracelens__mi300_jax08_gemm__tw003.xplane.pb"
    page = tmp_path / "overview.html"
    assert main(["analyze", str(TFKERAS), str(gemm), "--html", str(page)]) == 0
    out = capsys.readouterr().out
    # Both overviews, the GPU one with its idle breakdown; kernel names cut to a readable width.
    assert out.count("tfobs analyze ") == 2
    assert "/device:GPU:0: busy" in out and "kernel_launch" in out
    kernel_lines = [line for line in out.splitlines() if "Cijk_" in line]
    assert kernel_lines and max(len(line) for line in kernel_lines) < 130
    html = page.read_text(encoding="utf-8")
    assert html.lstrip().lower().startswith("<!doctype html") and "GPU" in html
    assert main(["analyze", str(TFKERAS), str(gemm), "--format", "json"]) == 0
    docs = json.loads(capsys.readouterr().out)
    assert [d["steps"]["count"] for d in docs][0] == 18 and len(docs) == 2


def test_html_to_unwritable_path_is_one_line(tmp_path: pathlib.Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "missing-folder" / "page.html"
    assert main(["analyze", str(TFKERAS), "--html", str(target)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--html" in err


def test_a_bad_capture_among_several_is_named_and_the_others_still_read(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "plugins" / "profile" / "r1"
    run.mkdir(parents=True)
    shutil.copyfile(TFKERAS, run / "hostA.xplane.pb")
    (run / "hostB.xplane.pb").write_bytes(TFKERAS.read_bytes()[:5000])  # truncated
    trace = tmp_path / "vm.trace.json.gz"
    trace.write_bytes(gzip.compress(b'{"traceEvents": []}'))
    assert main(["analyze", str(tmp_path), str(trace)]) == 2
    captured = capsys.readouterr()
    # hostA's table is printed; each bad file gets one line naming it (and what analyze
    # reads, for a TensorBoard trace); before, the first bad one stopped everything.
    assert captured.out.count("tfobs analyze ") == 1 and "hostA.xplane.pb" in captured.out
    errs = captured.err.strip().splitlines()
    assert len(errs) == 2 and all(e.startswith("tfobs analyze: ") for e in errs)
    assert "hostB.xplane.pb" in errs[0] and str(trace) in errs[1]
    assert "*.xplane.pb" in errs[1] and "Traceback" not in captured.err


def test_html_of_a_capture_with_a_non_utf8_name_replaces_the_page_whole(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    odd = pathlib.Path(os.fsdecode(bytes(tmp_path) + b"/bad\xff.xplane.pb"))
    shutil.copyfile(TFKERAS, odd)
    page = tmp_path / "report.html"
    page.write_text("the old page\n")
    # The name's odd byte made the write fail half way: the old page was left empty.
    assert main(["analyze", str(odd), "--html", str(page)]) == 0
    html = page.read_text(encoding="utf-8")
    assert html.lstrip().lower().startswith("<!doctype html") and "bad\ufffd" in html
    assert not list(tmp_path.glob("*.part"))


def test_names_from_the_capture_cannot_add_lines_to_the_table(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tfobs.xspace import schema

    space = schema.XSpace()
    space.ParseFromString(TFKERAS.read_bytes())
    for plane in space.planes:
        for md in plane.event_metadata.values():
            if md.name.startswith("Iterator::"):
                md.name += "\nFAKE LINE"
    space.hostnames[:] = ["h1\nFAKE HOST"]
    path = tmp_path / "crafted.xplane.pb"
    path.write_bytes(space.SerializeToString())
    assert main(["analyze", str(path)]) == 0
    out = capsys.readouterr().out
    assert "\\nFAKE LINE" in out  # shown, escaped
    assert not [line for line in out.splitlines() if line.startswith("FAKE")]


@pytest.mark.parametrize("how", ["full_disk", "closed"])
def test_an_output_that_cannot_be_written_is_one_line(how: str) -> None:
    root = pathlib.Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-m", "tfobs.cli", "analyze", str(TFKERAS)]
    if how == "full_disk":
        with open("/dev/full", "w") as full:
            proc = subprocess.run(cmd, stdout=full, stderr=subprocess.PIPE, text=True,
                                  cwd=root, timeout=120)
    else:  # started with its standard output closed (`>&-`)
        proc = subprocess.run(cmd, stderr=subprocess.PIPE, text=True, cwd=root, timeout=120,
                              preexec_fn=lambda: os.close(1))
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert ("No space left on device" in lines[0] if how == "full_disk"
            else "standard output is closed" in lines[0])


def test_long_names_are_cut_in_the_middle_so_their_tails_stay_apart() -> None:
    """Three gradient ops of one scope path (a GRU's while body) differ only at their end;
    a kernel name's start stays readable too."""
    from tfobs.commands.analyze import _short

    scope = ("gradient_tape/sequential_1/gru_1/while/sequential_1/gru_1/while_grad/body/_149/"
             "gradient_tape/sequential_1/gru_1/while/gru_cell_1/")
    names = [scope + t for t in ("strided_slice_grad/StridedSliceGrad",
                                 "MatMul_1_grad/MatMul_1", "MatMul_1_grad/MatMul")]
    cut = [_short(n) for n in names]
    assert len(set(cut)) == 3 and all(len(c) == 90 and "..." in c for c in cut)
    assert cut[2].endswith("MatMul_1_grad/MatMul") and cut[0].startswith("gradient_tape/")
    assert _short("sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64") == (
        "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64")


def test_a_host_allocators_memory_from_before_the_window_is_named_so() -> None:
    """XProf's "unused preallocated device memory" row is, on a host allocator, what the job
    held before the window began (its arrays, constants, variables): the text says that,
    the JSON keeps XProf's name."""
    import tfobs
    from tfobs.commands.analyze import render

    s = tfobs.analyze(CAPTURES / "advice__healthy.xplane.pb")
    (m,) = [m for m in s.memory if m.allocator == "mklcpu"]
    assert any(a.op_name == "unused preallocated device memory" for a in m.top_allocations)
    text = render(s)
    assert "held since before the window (XProf: preallocated)" in text
    assert "unused preallocated device memory" not in text


def test_xla_programs_outside_the_op_table_are_said() -> None:
    """Under jit_compile=True on a CPU host XLA runs the step's compiled program: its ops
    are XLA's, in no op row (XProf's table has none either); the text says how long."""
    import tfobs
    from tfobs.commands.analyze import render

    s = tfobs.analyze(CAPTURES / "generated__tf2.21cpu__xla_fit.xplane.pb")
    assert s.ops.xla_programs_s > 0.25 * s.steps.mean_s * s.steps.count
    assert s.ops.xla_programs_s > max(o.self_s for o in s.ops.top)  # more than any row
    assert all("CpuExecutable" not in o.name for o in s.ops.top)
    assert "XLA's compiled programs (jit_compile)" in render(s)
    plain = tfobs.analyze(CAPTURES / "advice__healthy.xplane.pb")
    assert plain.ops.xla_programs_s == 0 and "XLA's compiled programs" not in render(plain)


def test_an_in_graph_loop_outside_the_op_table_is_said() -> None:
    """A per-row tf.map_fn writes no op event: the text says its iterations' time under
    the op table, which holds none of it."""
    import tfobs
    from tfobs.commands.analyze import render

    s = tfobs.analyze(CAPTURES / "generated__tf2.21cpu__map_fn_per_example_loop.xplane.pb")
    assert "in-graph loop iterations (map): 0.98 ms per step (40 % of the step), 0 % of it in "\
        "op events" in render(s)
    plain = tfobs.analyze(CAPTURES / "advice__healthy.xplane.pb")
    assert plain.steps.in_graph_loop_s == 0 and "in-graph loop" not in render(plain)


@pytest.mark.parametrize(("stem", "verdict"), [
    ("generated__jax0.10cpu__keras_jax_tfdata_slow_fit", "potentially"),
    ("generated__tf2.21cpu__epoch_loop_in_function", "not")])
def test_an_input_wait_xprofs_verdict_misses_is_said_beside_it(stem: str, verdict: str
                                                                ) -> None:
    """A wait XProf counts as host compute (a JAX job's tf.data next(), a dataset loop in a
    tf.function): XProf's verdict stays the headline, tfobs's reading follows it there,
    in the text and on the page, not only among the advice below."""
    import tfobs
    from tfobs.commands.analyze import render
    from tfobs.export.page import render_page

    s = tfobs.analyze(CAPTURES / f"{stem}.xplane.pb")
    assert s.input_bound.verdict == verdict
    severity, finding = s.input_beyond_xprof() or ("", "")
    assert severity == "critical" and "% of step time waits for" in finding
    lines = render(s).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Input-bound: "))
    assert lines[at + 2] == (f"  tfobs [critical]: {finding}, which XProf's verdict misses "
                             "(advice input_bound below)")
    assert html.escape(f"tfobs [critical]: {finding}") in render_page(s)
    # where the advice is XProf's own statement, nothing is added
    plain = tfobs.analyze(TFKERAS)
    assert plain.input_beyond_xprof() is None and "tfobs [" not in render(plain)


def test_a_step_interval_below_the_mean_step_says_why() -> None:
    """Start to start over the kept steps leaves the last step out: where it is long the
    interval reads below the mean step (2.94 against 3.26 ms), which looks like overlap;
    the text says the last step is in no interval. One-thread steps only."""
    import tfobs
    from tfobs.commands.analyze import render

    s = tfobs.analyze(CAPTURES / "generated__tf2.21cpu__pydataset_slow_fit.xplane.pb")
    assert s.steps.interval_s < 0.95 * s.steps.mean_s
    last = max(s.steps.items, key=lambda x: x.start_ns).duration_s
    assert (f"(the mean of the {s.steps.count - 1} intervals between the steps' starts: the last "
            f"step, {1e3 * last:.2f} ms, is in none)") in render(s)
    # 0.05 ms below the mean of 287 ms steps: nothing to explain
    usual = tfobs.analyze(TFKERAS)
    assert usual.steps.interval_s > 0.99 * usual.steps.mean_s
    assert "is in none" not in render(usual)


def test_a_step_interval_above_the_mean_step_with_no_gaps_says_why() -> None:
    """Epochs in one jitted while_loop stopping early: 64 iterations a step, then 4, 4, 4,
    4 and 1 (75-84 ms steps, then 6-8 ms). The kept steps' starts are 53.6 ms apart on
    average against a mean step of 49.1 ms, yet 0.1 % of the interval is in no step: the
    short last step (8.3 ms) is in no interval. Said so, as for a long last step."""
    import tfobs
    from tfobs.commands.analyze import render

    s = tfobs.analyze(
        CAPTURES / "generated__jax0.10cpu__while_loop_epoch_early_stop.xplane.pb")
    st = s.steps
    assert st.interval_s > 1.05 * st.mean_s and st.outside_ratio < 0.01
    last = max(st.items, key=lambda x: x.start_ns).duration_s
    assert (f"(the mean of the {st.count - 1} intervals between the steps' starts: the last "
            f"step, {1e3 * last:.2f} ms, is in none)") in render(s)
