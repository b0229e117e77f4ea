"""The reduction pipeline: one XSpace capture -> one `WindowSummary`.

`reduce_xspace` runs every analysis over one parse of the capture: each line of each plane
is visited once into flat lists (`timeline.py`); steps, breakdown, ops, tf.data and memory
read those lists and decode stats only for the events they need.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np

from tfobs.analysis import breakdown as bd
from tfobs.analysis import eventtypes as et
from tfobs.analysis import input_pipeline, ops, tfdata
from tfobs.analysis.advice import with_advice
from tfobs.analysis.advice.rule import remember_step_fields, remember_step_sums
from tfobs.analysis.calls import (
    KERAS_JAX_TRAIN_STEP,
    call_marker,
    calls_note,
    function_calls,
    jitted_calls_in_spans,
)
from tfobs.analysis.device_events import is_gpu_plane
from tfobs.analysis.eager import (
    JAX_COMPILES,
    JAX_LOWERING,
    CheckpointSteps,
    backward_calls,
    checkpoint_steps,
    checkpoint_writes,
    eager_note,
    eager_ops,
    first_run_setup,
    graph_building,
    summary_writes,
    tensor_conversions,
)
from tfobs.analysis.environment import accelerator_planes, reduce_environment, window_span
from tfobs.analysis.gpu_idle import GpuEvents, device_step_spans, merge, merged_spans
from tfobs.analysis.input_stages import loader_wait
from tfobs.analysis.jax_compile import (
    StepCompile,
    compile_words,
    step_compile,
    steps_compiling,
)
from tfobs.analysis.load import read_source
from tfobs.analysis.loops import functional_loops, in_graph_loops
from tfobs.analysis.memory import reduce_memory
from tfobs.analysis.pauses import gaps_idle, longest_pause
from tfobs.analysis.python_time import (
    annotated_tfdata_next,
    is_python_event,
    python_beside_steps,
    python_checkpoint_saves,
    python_in_regions,
    python_in_steps,
)
from tfobs.analysis.step_notes import concurrent_note, several_batches_note
from tfobs.analysis.steps import (
    FoundSteps,
    StepGroup,
    find_steps,
    member_events,
    members_of,
    step_markers,
    step_nums,
)
from tfobs.analysis.timeline import (
    IdTable,
    LineData,
    Spans,
    Timeline,
    lookup,
    span_bounds,
    time_base_ps,
)
from tfobs.analysis.xla_cpu_work import (
    StepProgramOps,
    calls_work_note,
    host_to_device_s,
    step_program_ops,
    with_dispatch,
)
from tfobs.errors import CaptureError
from tfobs.summary import (
    CATEGORIES,
    MAX_TOP_EVENTS,
    InputBound,
    InputPipeline,
    Kernels,
    Step,
    Steps,
    TimedEvent,
    WindowSummary,
    build_all,
    column_dicts,
)
from tfobs.xspace.reader import PlaneView, SpaceView, parse
from tfobs.xspace.schema import HOST_PLANE

__all__ = ["analyze", "reduce_xspace"]


def analyze(source: Any, *, run: str | None = None, top_n: int = 5,
            max_top_events: int = MAX_TOP_EVENTS) -> WindowSummary:
    """Reduce a capture file, a TensorBoard log folder (newest run or `run`) or bytes."""
    data, _ = read_source(source, run)
    return reduce_xspace(data, top_n=top_n, max_top_events=max_top_events)


def reduce_xspace(
    data: bytes | SpaceView, *, top_n: int = 5, short_gap_s: float = 30e-6,
    max_top_events: int = MAX_TOP_EVENTS,
) -> WindowSummary:
    """The figures of XProf's Profile tab for one capture; raises only CaptureError.

    `top_n`: the longest events kept per step (and rows of the op tables);
    `max_top_events`: the steps' top events kept in all (the window's longest).
    """
    space = data if isinstance(data, SpaceView) else parse(data)
    try:
        return _reduce(space, _count(top_n), short_gap_s, _count(max_top_events))
    except CaptureError:
        raise
    except RecursionError:
        raise CaptureError("capture is nested too deeply to reduce") from None
    except Exception as exc:  # corrupt values must surface as one clear error, never a crash
        raise CaptureError(
            f"capture could not be reduced ({type(exc).__name__}: {str(exc)[:160]})"
        ) from None


def _count(n: int) -> int:
    """A count of rows to keep, within what numpy indexes with (a C long): no capture holds
    2**31 events, so the clamp keeps as many as an unbounded count would."""
    return min(max(0, int(n)), 2**31 - 1)


def _reduce(space: SpaceView, top_n: int, short_gap_s: float,
            max_top_events: int) -> WindowSummary:
    from tfobs.analysis.gpu_idle import reduce_devices

    host_view = space.plane(HOST_PLANE)
    kind, accel = accelerator_planes(space)
    # One time base for the planes compared with one another; outputs add it back.
    base_ps = time_base_ps(([host_view] if host_view is not None else []) + accel)
    host = Timeline(host_view, base_ps) if host_view is not None else None
    devices = [Timeline(p, base_ps) for p in accel]
    has_device = kind == "GPU"

    found = find_steps(host, has_device=has_device)
    if has_device and found.groups:
        left_out = _add_device_events(found.groups, devices)
        if left_out:
            found = dataclasses.replace(found, note=(found.note + "; " if found.note else "")
                                        + lines_left_out_note(left_out))
    typed = None if has_device else found.typed  # device events join the groups on GPUs
    kept = bd.step_breakdowns(found.groups, has_device, typed=typed, spans=found.spans)
    if not kept.groups and found.groups and not has_device and found.method == "markers":
        # Marked steps that run no op here: a coordinator's (ParameterServerStrategy), whose
        # step functions run on the workers. XProf finds no step; tfobs times the markers.
        kept = bd.step_breakdowns(found.groups, has_device, require_compute=False,
                                  typed=typed, spans=found.spans)
        if kept.groups:
            found = dataclasses.replace(found, method=REMOTE_STEPS,
                                        note=remote_steps_note(found.remote_call_roots))
    names = host.names if host is not None else {}
    environment = reduce_environment(space)
    # A host-only JAX job's compiled programs run as XLA's CPU ops (thunks, `program_id`),
    # on the runtime's threads: the steps' top events hold them, by time.
    programs = (step_program_ops(host, kept.begin_ps, kept.end_ps)
                if not accel and environment.framework == "jax" else None)
    start_ns, duration_s = window_span(space)
    if duration_s <= 0:  # no profile start/stop in the capture (TensorFlow 2.16 writes none)
        duration_s = _events_extent_s(([host] if host is not None else []) + devices)
    base_ns = _wall_clock_base(host, devices, start_ns) + base_ps // 1000
    steps, sums, total_step_s, step_columns = _steps(found, kept, (top_n, max_top_events),
                                                     devices, names, base_ns, host, programs)
    n = steps.count
    mean_breakdown = {c: (sums[c] / n if n else 0.0) for c in CATEGORIES}
    types_total = kept.totals
    gpu_events = GpuEvents(space, base_ps)
    if has_device and found.method == "markers" and found.step_of is not None and steps.items:
        steps = _with_device_spans(gpu_events, found, steps)
    elif not has_device:
        steps = with_dispatch(steps, host, kept.begin_ps, kept.end_ps,
                              lambda: _unknown_spans(found, kept), programs)

    input_s = sums["input"]
    other_s = types_total.get(et.UNKNOWN_TIME, 0) / 1e12
    input_pct = 100.0 * input_s / total_step_s if total_step_s > 0 else 0.0
    other_pct = 100.0 * other_s / total_step_s if total_step_s > 0 else 0.0
    # A coordinator's steps hold no local work to judge: XProf's "no step" verdict stays.
    verdict = bd.verdict(input_pct, other_pct, total_step_s > 0 and found.method != REMOTE_STEPS)
    statement = bd.input_statement(verdict, input_pct, other_pct)

    dc16 = types_total.get(et.DEVICE_COMPUTE_16, 0)
    dc32 = types_total.get(et.DEVICE_COMPUTE_32, 0)
    ratio16 = dc16 / (dc16 + dc32) if dc16 + dc32 > 0 else 0.0

    host_ops = ops.host_op_metrics(host)
    hlo: dict[tuple[int, str], str] = {}
    hlo_bits: dict[tuple[int, str], int] = {}
    if has_device:  # the GPU modules (kernel names, HLO protos) load only for GPU captures
        from tfobs.analysis.kernels import hlo_programs

        hlo, hlo_bits = hlo_programs(space)
    device_ops = ops.device_op_metrics(devices, hlo, gpu_events.table)
    stages = tfdata.stages(host_ops)
    # Batches taken inside in-graph loops: Keras's steps_per_execution loop reads each with
    # get_next_as_optional (`while/body/.../OptionalGetValue`), in one call, one step here.
    batches = sum(a.count for name, a in host_ops.items()
                  if name.endswith("OptionalGetValue") and "while/" in name)
    # The stride is read only where batches outnumber the steps (a sort of every step).
    several = several_batches_note(batches, len(found.groups), _usual_stride(steps),
                                   steps.mean_s) if steps.count and batches else ""
    if several:
        steps = dataclasses.replace(steps, note="; ".join(n for n in (steps.note, several) if n))
    h2d_s = (types_total.get(et.HOST_TO_DEVICE, 0) + types_total.get(et.DEVICE_WAIT_HOST, 0)
             ) / 1e12 / steps.count if steps.count else 0.0
    h2d_ratio = h2d_s / steps.mean_s if steps.mean_s > 0 else 0.0
    totals = input_pipeline.host_input_totals(host_ops, h2d_ratio)
    xprof_input = input_pipeline.xprof_only_input(host_ops)
    functions_s, functions_top = input_pipeline.function_ops(host) if stages else (0.0, ())
    per_step = {k: (v / steps.count if steps.count else v) for k, v in totals.items()}

    python_tfdata_s = input_pipeline.python_op_seconds(host_ops, host)
    spans = _StepSpans(kept.begin_ps, kept.end_ps)
    fetches = (input_pipeline.prefetch_fetches(host, spans) if stages
               else input_pipeline.Fetches())
    during = (input_pipeline.work_during(host, fetches.longest_span)
              if fetches.longest_ready else ("", "", 0.0))
    # Several slow fetches of ready batches: the stage functions' op time during them.
    slow_op_s = (sum(input_pipeline.work_during(host, span)[2]
                     for span in fetches.slow_ready_spans)
                 if fetches.slow_ready >= 2 else 0.0)
    in_graph = input_pipeline.in_graph_loop_input(host, spans)
    step_iterators = input_pipeline.iterators_in_steps(host, spans)
    loops = in_graph_loops(host, found.loop_runs, spans)
    if not loops.seconds:  # While ops run as such: no run past iteration 0
        loops = functional_loops(host, spans)
    # The Python in the steps, and the same thread's between them: a loop's own loader
    # (next(batches)).
    traced = (not has_device and host is not None
              and bool(host.mids_where_once(is_python_event)))
    gaps = _gaps(kept.begin_ps if traced else kept.begin_ps[:0], kept.end_ps)
    no_python = (0.0, (), 0.0, 0.0, 0.0, 0.0)
    (traced_s, traced_top, callback_s, tfdata_next_s, loader_wait_s, read_s), (
        between_s, between_top, *_) = (
        python_in_regions(host, spans, [spans, gaps]) if gaps.begin.size
        else (no_python if has_device else python_in_steps(host, spans), no_python))
    pause = longest_pause(host, found.root_lines, spans.columns.begin, spans.columns.end)
    # Another Python thread running Python through the steps: the GIL the steps wait for.
    other_s, other_name, other_top = (
        python_beside_steps(host, spans) if traced else (0.0, "", ()))
    # tfobs's own events around next() (live JAX windows, no Python tracer), GPU or not.
    tfdata_next_s = annotated_tfdata_next(
        host, spans, (lambda: _device_busy(gpu_events, accel)) if has_device else None
    ) or tfdata_next_s
    if any(totals.values()):  # tf.data's own events are there: its wait is input to XProf
        tfdata_next_s = 0.0
    steps = _with_calls(dataclasses.replace(
        steps, input_between_s=input_pipeline.input_between_steps(host, spans),
        unrooted_markers=found.unrooted_markers,
        python_op_s=_per_step(input_pipeline.step_python_op_seconds(host, spans)
                              if host is not None else 0.0, steps.count),
        python_traced_s=_per_step(traced_s, steps.count), python_traced_top=traced_top,
        python_callback_s=_per_step(callback_s, steps.count),
        python_tfdata_next_s=_per_step(tfdata_next_s, steps.count),
        python_loader_wait_s=_per_step(loader_wait_s, steps.count),
        python_device_read_s=_per_step(read_s, steps.count),
        python_between_s=between_s / gaps.begin.size if gaps.begin.size else 0.0,
        python_between_top=between_top,
        python_other_thread_s=_per_step(other_s, steps.count), python_other_thread=other_name,
        python_other_thread_top=other_top,
        pause_top=pause[0], pause_top_s=pause[1],
        gap_idle_ratio=gaps_idle(host, spans.columns.begin, spans.columns.end),
        in_graph_loop_s=_per_step(loops.seconds, steps.count),
        in_graph_loop_op_s=_per_step(loops.op_seconds, steps.count),
        in_graph_loop_iterations=loops.iterations,
        in_graph_loop_iterations_max=loops.iterations_max,
        in_graph_loop_scopes=loops.scopes, in_graph_loop_recurrent=loops.recurrent,
        tensor_conversion_s=_per_step(tensor_conversions(
            host, spans, found.root_lines if found.groups else None), steps.count),
        host_to_device_s=0.0 if has_device else _per_step(
            host_to_device_s(host, kept.begin_ps, kept.end_ps), steps.count),
        jitted_calls_in_steps=_per_step(jitted_calls_in_spans(
            host, found.root_lines, spans.columns.begin, spans.columns.end), steps.count)),
        host,
        len(found.groups) if not batches else 0)
    memory = reduce_memory(host, top_n, found.step_of)
    kernels = Kernels()
    if any(is_gpu_plane(p) for p in space.planes):
        from tfobs.analysis.kernels import reduce_kernels

        kernels = reduce_kernels(space, hlo, gpu_events.table, hlo_bits)
    group_spans = _group_spans(found)
    eager_s, eager_top, between_s, before_s = eager_ops(
        host, top_n, group_spans,
        int(kept.begin_ps.min()) if kept.begin_ps.size else None)
    if not steps.count and not steps.calls and eager_s > 0:  # say what the window held
        steps = dataclasses.replace(steps, note="; ".join(
            n for n in (steps.note, eager_note(eager_s, eager_top, duration_s)) if n))
    building_s, builds, xla_builds = graph_building(host, spans)
    setup_s, setups = first_run_setup(host, spans) if builds else (0.0, 0)
    # The functions compiled again: one look from the first step kept to the last (a
    # look per step would walk the host once per step).
    compiled_functions = step_compile(
        host, (int(kept.begin_ps.min()), int(kept.end_ps.max())),
        found.root_lines).functions if builds and kept.begin_ps.size else ()
    checkpoint_s, writes, write_starts = checkpoint_writes(
        host, found.root_lines if found.groups else None)
    if not writes and traced:  # a JAX job's checkpoint library, in Python
        checkpoint_s, writes, write_starts = python_checkpoint_saves(
            host, found.root_lines if found.groups else None)
    saving = checkpoint_steps(host, write_starts, (kept.begin_ps, kept.end_ps, _column(
        kept, "other")), group_spans) if writes and kept.groups else CheckpointSteps()
    summaries_s = summary_writes(host, host_ops)
    remember_step_sums(steps, total_step_s, sums, kept.seconds_array)
    remember_step_fields(steps, *step_columns)
    pool = input_pipeline.pool_threads(host, duration_s) if stages else (0, 0.0, 0.0)
    ignored = tfdata.ignore_errors_drops(stages)
    sharded = tfdata.shard_after_read(stages)
    loader = loader_wait(host, spans.columns.begin, spans.columns.end, found.root_lines)
    return with_advice(WindowSummary(
        start_ns=start_ns,
        duration_s=duration_s,
        steps=steps,
        breakdown_s=mean_breakdown,
        device_compute_16bit_ratio=(kernels.compute_16bit_s / kernels.total_s
                                    if kernels.total_s > 0 else ratio16),
        device_compute_16bit_ratio_xprof=ratio16,
        input_bound=InputBound(
            ratio=min(1.0, input_pct / 100.0), verdict=verdict, advice=statement
        ),
        input_pipeline=InputPipeline(
            host_input_s=per_step,
            slowest_stage=tfdata.slowest_stage(stages),
            stages=stages[: max(top_n, 10)],
            top_input_ops=input_pipeline.top_input_ops(host_ops, top_n),
            host_input_total_s=totals,
            python_op_s=python_tfdata_s,
            per_replica_input=input_pipeline.per_replica_input(host_ops),
            device_copy_input=input_pipeline.device_copy_input(host_ops),
            xprof_only_input_s=xprof_input[0],
            xprof_only_input_ops=xprof_input[1],
            function_ops_s=functions_s,
            function_ops_top=functions_top,
            prefetch_fetches=fetches.fetches,
            prefetch_ready=fetches.ready,
            prefetch_s=fetches.seconds,
            prefetch_empty_s=fetches.empty_s,
            prefetch_longest_s=fetches.longest_s,
            prefetch_longest_step=(steps.items[fetches.longest_step].step_num
                                   if 0 <= fetches.longest_step < len(steps.items) else -1),
            prefetch_longest_ready=fetches.longest_ready,
            prefetch_longest_stage=during[0],
            prefetch_longest_op=during[1],
            prefetch_longest_op_s=during[2],
            prefetch_median_s=fetches.median_s,
            prefetch_slow_ready=fetches.slow_ready,
            prefetch_slow_ready_s=fetches.slow_ready_s,
            prefetch_slow_ready_steps=tuple(
                steps.items[k].step_num for k in fetches.slow_ready_steps
                if 0 <= k < len(steps.items)),
            prefetch_slow_ready_op_s=slow_op_s,
            in_graph_loop_input_s=in_graph[0],
            in_graph_loop_iterators_s=in_graph[1],
            step_iterators=step_iterators[0],
            step_iterators_s=step_iterators[1],
            pool_threads=pool[0],
            pool_busy=pool[1],
            pool_busy_s=pool[2],
            loader_input_s=_per_step(loader[0], steps.count),
            loader_stages=loader[1],
            ignore_errors_stage=ignored[0],
            ignore_errors_passed=ignored[1],
            ignore_errors_input=ignored[2],
            ignore_errors_input_kind=ignored[3],
            shard_after_read_stage=sharded[0],
            shard_after_read_readers=sharded[1],
            shard_after_read_s=sharded[2],
        ),
        ops=dataclasses.replace(ops.reduce_ops(host_ops, device_ops, top_n),
                                eager_s=eager_s, eager_top=eager_top,
                                eager_between_steps_s=between_s,
                                eager_before_steps_s=before_s,
                                eager_backward_calls=backward_calls(host, group_spans),
                                graph_building_s=building_s, graph_builds=builds,
                                graph_instantiation_s=setup_s, graph_instantiations=setups,
                                xla_compiles=xla_builds,
                                compiled_functions=compiled_functions,
                                host_collectives_s=ops.host_collective_seconds(host, spans),
                                checkpoint_s=checkpoint_s, checkpoint_writes=writes,
                                checkpoint_steps=saving.steps,
                                checkpoint_steps_excess_s=saving.excess_s,
                                checkpoint_steps_other_s=saving.other_s,
                                checkpoint_steps_eager_s=saving.eager_s,
                                summary_writes_s=summaries_s,
                                xla_programs_s=ops.xla_program_seconds(host)),
        kernels=kernels,
        devices=reduce_devices(space, steps, short_gap_s=short_gap_s,
                               steps_in_window=len(found.groups) if steps.count else 0,
                               events=gpu_events,
                               input_spans=(_input_spans(found.groups)
                                            if has_device else None)),
        memory=memory,
        environment=environment,
    ))  # advice reads the finished figures


def _steps(
    found: FoundSteps,
    kept: bd.StepTimes,
    tops_kept: tuple[int, int],
    devices: list[Timeline],
    names: dict[int, str],
    base_ns: int,
    host: Timeline | None = None,
    programs: StepProgramOps | None = None,
) -> tuple[Steps, dict[str, float], float, tuple[np.ndarray | None, np.ndarray]]:
    """The steps' figures, their seconds per category summed over the steps, and the steps'
    total time; `tops_kept`: (top events per step, top events in all); `host`: where the
    dropped steps' compiles are read; `programs`: the compiled programs' ops in the kept
    steps (a host-only JAX job's XLA CPU ops), among their top events."""
    groups = kept.groups
    top_n, max_top = tops_kept
    nums = step_nums(groups)
    in_time = _time_ranks(kept, nums)
    if any(ld.name.startswith("Stream") for tl in devices for ld in tl.lines):
        host_cands = _host_candidates(groups, top_n, names, found, kept.index)
        kernels = _kernel_candidates(_stream_hits(groups, devices), len(groups), top_n)
        tops, left_out = _window_tops([_top_events(c, top_n, k, base_ns)
                                       for c, k in zip(host_cands, kernels, strict=True)],
                                      in_time, max_top)
    else:  # host events only: every step's top events ranked at once
        tops, left_out = _host_top_events(groups, top_n, names, found, base_ns,
                                          (in_time, max_top), kept.index, programs)
    duration = (kept.end_ps - kept.begin_ps) / 1e12
    durations = duration.tolist()
    start_ns: np.ndarray | None = None
    if abs(base_ns) < 2**62:  # as int64 (begin_ps is within SPAN_PS): one pass, not a loop
        start_ns = kept.begin_ps // 1000 + base_ns
        starts = start_ns.tolist()
    else:
        starts = [base_ns + ns for ns in (kept.begin_ps // 1000).tolist()]
    marks = step_markers(groups)
    items = build_all(Step, nums, starts, durations,
                      # each row holds one figure per category (summed below)
                      column_dicts(CATEGORIES, kept.seconds_array),
                      tops,
                      [0.0] * len(groups),
                      marks)
    n = len(items)
    total_s = sum(durations)
    mean_s = total_s / n if n else 0.0
    sums = kept.category_sums()
    note = found.note
    if kept.dropped:
        note = (note + "; " if note else "") + "first and last step dropped as XProf does"
        note += _long_dropped(kept.dropped_s, mean_s, _dropped_compiles(host, found, kept),
                              _dropped_traces(host, found, kept))
    if found.groups and not items:
        note = (note + "; " if note else "") + "no well-formed step (no compute in any step)"
    mixed = _mixed_markers(marks, durations)
    if mixed:
        note = (note + "; " if note else "") + mixed
    method = found.method if items else "none"
    lines = concurrent_lines(found, kept)
    if lines is not None:
        note = (note + "; " if note else "") + concurrent_note(np.unique(lines).size)
    interval_s, outside = _between_steps(nums, starts, duration, lines)
    steps = Steps(
        count=n,
        method=method,
        mean_s=mean_s,
        items=tuple(items),
        note=note,
        interval_s=interval_s,
        outside_ratio=outside,
        top_events_left_out=left_out,
    )
    return steps, sums, 0.0 + total_s, (start_ns, duration)


def _time_ranks(kept: bd.StepTimes, nums: list[int]) -> np.ndarray:
    """Each step's place in time order (start, then step number `nums`), as a trace
    orders them: ties among equally long top events go to the earlier step."""
    start = kept.begin_ps // 1000  # the steps' start_ns less the window's base: same order
    num = np.array(nums, np.int64)
    rank = np.empty(num.size, np.int64)
    rank[np.lexsort((num, start))] = np.arange(num.size)
    return rank


def _window_longest(in_time: np.ndarray, step: np.ndarray, dur_s: np.ndarray,
                    limit: int) -> np.ndarray:
    """Which of the steps' top events (rows by step, each step's longest first) are among
    the window's `limit` longest; ties go to the earlier step, then the step's own order,
    as a trace's span cap takes them (`export/otel.py` plan_window)."""
    keep = np.ones(step.size, bool)
    if step.size > limit:
        # Every row longer than the limit-th longest, then as many of the rows tied with
        # it as there is room for, in order (one partition, a sort of the ties alone).
        cut = np.partition(dur_s, step.size - limit)[step.size - limit] if limit else np.inf
        keep = dur_s > cut
        tied = np.flatnonzero(dur_s == cut)
        room = limit - int(keep.sum())
        if room > 0:
            keep[tied[np.lexsort((tied, in_time[step[tied]]))[:room]]] = True
    return keep


def _window_tops(tops: list[tuple[TimedEvent, ...]], in_time: np.ndarray, limit: int
                 ) -> tuple[list[tuple[TimedEvent, ...]], int]:
    """Each step's top events less those beyond the window's `limit` longest, and how
    many were left out."""
    count = [len(t) for t in tops]
    if sum(count) <= limit:
        return tops, 0
    step = np.repeat(np.arange(len(tops)), count)
    dur_s = np.array([e.duration_s for t in tops for e in t], np.float64)
    keep = _window_longest(in_time, step, dur_s, limit).tolist()
    at = 0
    out = []
    for t in tops:
        out.append(tuple(e for e, k in zip(t, keep[at:at + len(t)], strict=True) if k))
        at += len(t)
    return out, len(keep) - limit


class _StepSpans(Sequence[tuple[int, int]]):
    """The kept steps' (begin, end) ps, sorted, as the analyses of the steps' time read
    them: the list is made on first use. Most of those analyses find none of the events
    they look for and never read a span, and a long window has thousands."""

    def __init__(self, begin: np.ndarray, end: np.ndarray) -> None:
        if begin.size > 1 and not (begin[1:] > begin[:-1]).all():  # usually in order
            order = np.lexsort((end, begin))
            begin, end = begin[order], end[order]
        self._begin = begin
        self.columns = Spans(begin, end)  # what span_bounds reads: no list made
        self._spans: list[tuple[int, int]] | None = None

    def _list(self) -> list[tuple[int, int]]:
        if self._spans is None:
            self._spans = list(zip(self.columns.begin.tolist(), self.columns.end.tolist(),
                                   strict=True))
        return self._spans

    def __len__(self) -> int:
        return int(self._begin.size)

    @overload
    def __getitem__(self, k: int) -> tuple[int, int]: ...

    @overload
    def __getitem__(self, k: slice) -> list[tuple[int, int]]: ...

    def __getitem__(self, k: int | slice) -> tuple[int, int] | list[tuple[int, int]]:
        return self._list()[k]

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(self._list())


def _unknown_spans(found: FoundSteps, kept: bd.StepTimes) -> np.ndarray:
    """The kept steps' unknown time ('All Others') as (begin, end) rows, absolute ps."""
    rank = np.full(len(found.groups), -1, np.int64)
    rank[kept.index] = np.arange(kept.index.size)
    if kept.swept is not None:  # the breakdown's own sweep, its kept steps' rows
        time, group, current = kept.swept
        sel = rank[group] >= 0
        return bd.unknown_spans_swept((time[sel], rank[group[sel]], current[sel]),
                                      kept.begin_ps, kept.end_ps)
    columns = found.typed if found.typed is not None else bd.event_columns(found.groups)
    if columns is None:  # an event ends before it begins: the breakdown swept no columns
        return np.zeros((0, 2), np.int64)
    etype, begin, end, group = columns
    sel = rank[group] >= 0
    return bd.unknown_spans((etype[sel].astype(np.int64), begin[sel].astype(np.int64),
                             end[sel].astype(np.int64), rank[group[sel]]),
                            kept.begin_ps, kept.end_ps)


def _gaps(begin: np.ndarray, end: np.ndarray) -> Spans:
    """The time between consecutive kept steps (absolute ps), where there is some."""
    if begin.size < 2:
        none = np.zeros(0, np.int64)
        return Spans(none, none)
    order = np.argsort(begin, kind="stable")
    b, e = begin[order], end[order]
    gap = b[1:] > e[:-1]
    return Spans(e[:-1][gap], b[1:][gap])


def _column(kept: bd.StepTimes, category: str) -> np.ndarray:
    """One category's seconds per kept step."""
    column: np.ndarray = kept.seconds_array[:, CATEGORIES.index(category)]
    return column


def _per_step(seconds: float, count: int) -> float:
    return max(0.0, seconds) / count if count else 0.0


def _with_calls(steps: Steps, host: Timeline | None, steps_found: int = 0) -> Steps:
    """The window's function calls; where no step was found, the note says what it held;
    where Keras's JAX `train_step` runs several times per marked step (`steps_found`: the
    steps found, dropped ones included), the note says how many batches a step holds."""
    found = function_calls(host)
    # Keras's JAX trainer: a marked step of `steps_per_execution=k` holds k train_step
    # calls (no in-graph loop to count batches by).
    if steps.count and steps_found and found and found[0].name == KERAS_JAX_TRAIN_STEP:
        several = several_batches_note(found[0].count, steps_found, _usual_stride(steps),
                                       steps.mean_s, how="calls of Keras's jitted train_step")
        if several:
            steps = dataclasses.replace(
                steps, note="; ".join(n for n in (steps.note, several) if n))
    if steps.count or not found:
        return dataclasses.replace(steps, calls=found)
    if not steps.unrooted_markers:  # markers with step_num but no _r: their own advice
        found = (call_marker(host, found[0]),) + found[1:]
    note = "; ".join(n for n in (calls_note(found), calls_work_note(found, host)) if n)
    if steps.unrooted_markers:
        note = steps.note + "; " + note
    return dataclasses.replace(steps, calls=found, note=note)


def _device_busy(events: GpuEvents, planes: Sequence[PlaneView]) -> np.ndarray:
    """Every GPU's kernels, copies and memsets as (begin, end) rows on the time base."""
    acts = [events.activities(p) for p in planes]
    if not acts:
        return np.zeros((0, 2), np.int64)
    return np.stack([np.concatenate([a.start for a in acts]),
                     np.concatenate([a.end for a in acts])], 1).astype(np.int64)


def _group_spans(found: FoundSteps) -> Spans:
    """Every found step's (begin, end) ps, merged: from the walk's columns where it made
    them (a long window's thousands of steps make no StepGroup here)."""
    if found.spans is not None:
        return merged_spans(found.spans[0], found.spans[1])
    merged = merge(sorted((g.begin_ps, g.end_ps) for g in found.groups))
    return Spans(*span_bounds(merged))


def _input_spans(groups: Sequence[StepGroup]) -> list[tuple[int, int]]:
    """The host's input waits in the steps (ps on the time base, merged): what the GPU idles on
    when a job is input-bound, told apart from slow kernel launches."""
    spans: list[tuple[int, int]] = []
    for g in groups:
        for types, begins, ends in g.events:
            mask = np.isin(types, _HOST_INPUT_TYPES)
            spans.extend(zip(begins[mask].tolist(), ends[mask].tolist(),
                             strict=True))
    return merge(spans)


_HOST_INPUT_TYPES = np.array([et.HOST_WAIT_INPUT, et.HOST_TO_DEVICE], np.int64)

REMOTE_STEPS = "markers_remote"
REMOTE_STEPS_NOTE = (
    "the marked steps run no op on this host: a parameter-server coordinator, whose step "
    "functions run on the workers (their captures hold the step_fn time); timed by the "
    "markers, no input verdict; XProf reports no step")


def remote_steps_note(remote_call_roots: int) -> str:
    """The coordinator's note; where its own function runs are roots (Keras 2 `fit` runs
    some on the coordinator), XProf's steps are those runs, not the markers."""
    if not remote_call_roots:
        return REMOTE_STEPS_NOTE
    return REMOTE_STEPS_NOTE.replace(
        "XProf reports no step",
        "XProf 2.24.2 reports the coordinator's own function runs as its steps instead "
        f"({remote_call_roots} KernelAndDeviceFunc::RunAsync events, which TensorFlow marks "
        "_r=1) and judges the input from them")

GPU_STEP_NOTE = ("XProf 2.24.2 times GPU steps by device activity alone "
                 "(steps[].device_span_s) and counts their host time as 'All Others'; "
                 "tfobs times the step marker and classifies its host time")


def _with_device_spans(events: GpuEvents, found: FoundSteps, steps: Steps) -> Steps:
    assert found.step_of is not None
    keys = list(zip(step_markers(found.groups), step_nums(found.groups), strict=True))
    spans = device_step_spans(events, found.step_of, keys)
    if not spans:
        return steps
    items = tuple(dataclasses.replace(
        s, device_span_s=spans.get((s.marker, s.step_num), 0) / 1e12) for s in steps.items)
    note = (steps.note + "; " if steps.note else "") + GPU_STEP_NOTE
    return dataclasses.replace(steps, items=items, note=note)


def concurrent_lines(found: FoundSteps, kept: bd.StepTimes) -> np.ndarray | None:
    """Each kept step's thread (root line) where steps of several threads overlap in time
    (two models trained side by side, an actor and a learner); None otherwise. On one
    thread step markers nest or follow one another, never overlap."""
    if found.group_lines is None or len(kept.index) < 2:
        return None
    lines = found.group_lines[kept.index]
    if np.unique(lines).size < 2:
        return None
    order = np.argsort(kept.begin_ps, kind="stable")
    ends_so_far = np.maximum.accumulate(kept.end_ps[order])
    return lines if bool((kept.begin_ps[order][1:] < ends_so_far[:-1]).any()) else None


def _mixed_markers(marks: list[str], durations: list[float]) -> str:
    """The note's words where the steps come from markers of several names (a "train" and
    an "eval" annotation of one loop): XProf times them as one kind of step; per name, how
    many and their mean, so an evaluation's long steps are not read as the training's."""
    if len(set(marks)) < 2:
        return ""
    sums: dict[str, list[float]] = {}
    for name, d in zip(marks, durations, strict=True):
        row = sums.setdefault(name or "(unnamed)", [0, 0.0])
        row[0] += 1
        row[1] += d
    each = ", ".join(f"{name} {int(n)} of {1e3 * t / n:.2f} ms"
                     for name, (n, t) in sorted(sums.items(), key=lambda kv: -kv[1][0]))
    return (f"steps of {len(sums)} marker names, timed together as XProf does ({each} on "
            "average)")


# A dropped step this many times the kept steps' mean is named: its time is in no figure.
LONG_DROPPED = 10.0


def _long_dropped(dropped_s: tuple[float, float], mean_s: float,
                  compiled: tuple[StepCompile, StepCompile] = (StepCompile(), StepCompile()),
                  traced: tuple[tuple[float, float], tuple[float, float]] = ((0.0, 0.0),
                                                                            (0.0, 0.0))
                  ) -> str:
    """The note's words for a dropped first or last step much longer than the steps kept
    (a shuffle buffer filling, a first trace or compile, a checkpoint), else ''; and,
    however long, for one that holds JAX's compile path (`compiled`: the first's, the
    last's): a first call's tracing, lowering and compile or cache load, in no figure.
    `traced`: the first's and the last's (tf.function tracing, new functions' first-call
    set-up) seconds: a long one that traced says so instead of the guess."""
    if mean_s <= 0:
        return ""
    took = [f"the {which} took {1e3 * d:.1f} ms, "
            + (f"{d / mean_s:.0f}x" if d >= LONG_DROPPED * mean_s else f"{d / mean_s:.1f}x")
            + " the mean step" for which, d in zip(("first", "last"), dropped_s, strict=True)]
    built = [f"{t}, in none of the figures: {compile_words(c)}"
             for t, c in zip(took, compiled, strict=True) if c.found]
    long = []
    for t, d, c, (trace_s, setup_s) in zip(took, dropped_s, compiled, traced, strict=True):
        if d < LONG_DROPPED * mean_s or c.found:
            continue
        if trace_s > 0:
            built.append(f"{t}, in none of the figures: tf.function traced a graph in it, "
                         f"{1e3 * trace_s:.1f} ms" + (
                             f", and {1e3 * setup_s:.1f} ms instantiating the new function "
                             "in its first call" if setup_s > 0 else "")
                         + " (a function's first call or a new input shape)")
        else:
            long.append(t)
    if long:
        built.append(f"{' and '.join(long)}: what it did, such as a shuffle buffer filling "
                     "or a first trace, is in none of the figures")
    return f" ({'; '.join(built)})" if built else ""


def _dropped_traces(host: Timeline | None, found: FoundSteps, kept: bd.StepTimes
                    ) -> tuple[tuple[float, float], tuple[float, float]]:
    """(tf.function tracing s, new functions' first-call set-up s) in the dropped first and
    last steps (none: zeros). A JAX window's compiles are `_dropped_compiles`'s: none."""
    none = (0.0, 0.0), (0.0, 0.0)
    if (host is None or not kept.dropped or kept.dropped_at[0] < 0
            or host.mids_named(*JAX_COMPILES, JAX_LOWERING)):
        return none
    if found.spans is not None:
        begin, end = found.spans[0], found.spans[1]
        at = [(int(begin[k]), int(end[k])) for k in kept.dropped_at]
    else:
        at = [(found.groups[k].begin_ps, found.groups[k].end_ps) for k in kept.dropped_at]
    out = []
    for span in at[:2]:
        trace_s, builds, _ = graph_building(host, [span])
        out.append((trace_s, first_run_setup(host, [span])[0] if builds else 0.0))
    return out[0], out[1]


def _dropped_compiles(host: Timeline | None, found: FoundSteps, kept: bd.StepTimes
                      ) -> tuple[StepCompile, StepCompile]:
    """JAX's compile path in the dropped first and last steps (none: empty), where the
    kept steps do not all compile too (a function compiled again in every step: its
    dropped steps are like the rest, and `tf_function_retracing` names it)."""
    none = StepCompile(), StepCompile()
    if host is None or not kept.dropped or kept.dropped_at[0] < 0:
        return none
    # The dropped steps' spans from the walk's columns where it has them: a window of
    # thousands of steps makes no step object for them.
    if found.spans is not None:
        begin, end = found.spans[0], found.spans[1]
        at = [(int(begin[k]), int(end[k])) for k in kept.dropped_at]
    else:
        at = [(found.groups[k].begin_ps, found.groups[k].end_ps) for k in kept.dropped_at]
    both = (step_compile(host, at[0], found.root_lines),
            step_compile(host, at[1], found.root_lines))
    if not (both[0].found or both[1].found) or not kept.begin_ps.size:
        return none
    spans = _StepSpans(kept.begin_ps, kept.end_ps).columns
    every = steps_compiling(host, spans.begin, spans.end, found.root_lines) == spans.begin.size
    return none if every else both


def _usual_stride(steps: Steps) -> int:
    """The most common difference of consecutive step numbers (1 where fewer than 2 steps)."""
    nums = sorted(st.step_num for st in steps.items)
    strides = [b - a for a, b in zip(nums, nums[1:], strict=False) if b > a]
    return max(set(strides), key=strides.count) if strides else 1


def _between_steps(nums: list[int], starts: list[int], duration: np.ndarray,
                   lines: np.ndarray | None = None) -> tuple[float, float]:
    """(mean start-to-start interval of consecutive steps, share of it in no step), from
    the steps' numbers, starts (ns) and durations (s).

    Over pairs of steps that follow one another (step numbers one apart or, under
    `steps_per_execution`, the usual stride, or going back: a count started again), so a
    dropped step does not count as a gap. `lines`: each step's thread where several
    threads' steps overlap: pairs are then taken within each thread. Every pair at once;
    the float sums left to right, as a loop over the pairs adds them.
    """
    if len(nums) < 2:
        return 0.0, 0.0
    num = np.array(nums, np.int64)
    start = np.array(starts, np.int64)
    follows = start[1:] > start[:-1]
    if lines is not None:  # each thread's steps in turn, in time order
        order = np.lexsort((start, lines))
        num, start, duration, lines = num[order], start[order], duration[order], lines[order]
        follows = (start[1:] > start[:-1]) & (lines[1:] == lines[:-1])
    pairs = np.flatnonzero(follows)
    if not pairs.size:
        return 0.0, 0.0
    stride = num[pairs + 1] - num[pairs]
    usual = np.sort(stride)[stride.size // 2]
    if (stride == usual).any():
        # A number going back is a count started again (a new optimizer after compile, a
        # new model's fit), not a dropped step: the next step in time follows it.
        pairs = pairs[(stride == usual) | ((stride < 0) & (usual > 0))]
    apart = start[pairs + 1] - start[pairs]
    interval = int(apart.sum()) / pairs.size / 1e9
    busy = sum(np.minimum(duration[pairs], apart / 1e9).tolist()) / pairs.size
    return interval, (max(0.0, min(1.0, 1.0 - busy / interval)) if interval > 0 else 0.0)


# Line timestamps below this (about 1973) are relative to the profile's start, as
# TensorFlow and JAX write them; tfobs places them on the wall clock with the start time.
_RELATIVE_BEFORE_NS = 10**17


def _events_extent_s(timelines: list[Timeline]) -> float:
    """From the first event's start to the last one's end, over every line."""
    spans = [(ld.start_ps + int(ld.start_arr.min()), ld.start_ps + int(ld.end_arr.max()))
             for t in timelines for ld in t.lines if len(ld)]
    return (max(e for _, e in spans) - min(b for b, _ in spans)) / 1e12 if spans else 0.0


def _wall_clock_base(host: Timeline | None, devices: list[Timeline], start_ns: int) -> int:
    lines = (host.lines if host is not None else []) + [ld for t in devices for ld in t.lines]
    if lines and all(ld.ts_ns < _RELATIVE_BEFORE_NS for ld in lines):
        return start_ns
    return 0


def _event_kind(name: str) -> str:
    return "tfdata" if name.startswith("Iterator::") else "op"


Candidate = tuple[int, str, str, int, str]  # (ps, name, kind, start ns, device)


def _candidate_columns(groups: Sequence[StepGroup], top_n: int, names: dict[int, str],
                       found: FoundSteps | None, index: np.ndarray | None = None,
                       programs: StepProgramOps | None = None
                       ) -> tuple[np.ndarray, ...] | None:
    """(step, absolute start ps, duration ps, metadata id) of each step's ops and tf.data
    stages that can make its top n: those at least as long as its n-th longest (ties
    kept), in member order (lines, then time), then the compiled programs' ops in the
    steps (`programs`: XLA's CPU ops, named as the trace viewer names them). All steps at
    once: a few numpy passes over every member, not a dozen per step and line."""
    if top_n <= 0:
        return None
    lds, step, line, flat = (members_of(found, groups, index) if found
                             else member_events(groups))
    if not lds and programs is None:
        return None
    op_table = {m: 1 for m, n in names.items() if et.parse_tf_op(n).category}
    if lds:
        cols = lds[0].columns  # the member lines are all the host plane's
        mids = cols.mid[flat]
        ops = np.flatnonzero(lookup(mids, op_table, 0))
        step, line, flat, mids = step[ops], line[ops], flat[ops], mids[ops]
        start, dur = cols.offset[flat], cols.duration[flat]
    else:
        step = line = start = dur = mids = np.zeros(0, np.int64)
    line_start = np.array([ld.start_ps for ld in lds], np.int64)
    if programs is not None:  # on a line of their own, absolute (line start 0); those
        # named as ops are among the members' already
        prog = [programs.step, programs.start_ps, programs.duration_ps, programs.mid]
        if op_table:
            other = np.flatnonzero(lookup(programs.mid, op_table, 0) == 0)
            prog = [c[other] for c in prog]
        line_start = np.append(line_start, np.int64(0))
        added = np.full(prog[0].size, len(lds), np.int64)
        if step.size:
            step, line, start, dur, mids = (np.concatenate(pair) for pair in zip(
                (step, line, start, dur, mids), (prog[0], added, *prog[1:]), strict=True))
        else:  # a JAX step's members hold no op: its programs' alone
            step, line, start, dur, mids = prog[0], added, *prog[1:]
    # Each step's n-th longest: its ops by step, longest first.
    count = np.bincount(step, minlength=len(groups))
    if not count.size or int(count.max()) <= top_n:  # every step's ops make its top n
        return (step, line_start[line] + start, dur, mids)
    first = np.cumsum(count) - count
    ranked = _longest_first(step, dur)
    full = np.flatnonzero(count > top_n)
    floor = np.full(len(groups), np.iinfo(np.int64).min, np.int64)
    floor[full] = ranked[first[full] + top_n - 1]
    keep = np.flatnonzero(dur >= floor[step])
    return (step[keep], line_start[line[keep]] + start[keep], dur[keep], mids[keep])


def _host_candidates(groups: Sequence[StepGroup], top_n: int, names: dict[int, str],
                     found: FoundSteps | None = None, index: np.ndarray | None = None,
                     programs: StepProgramOps | None = None) -> list[list[Candidate]]:
    """`_candidate_columns` as Python tuples per step."""
    out: list[list[Candidate]] = [[] for _ in range(len(groups))]  # no StepGroup made
    found_cols = _candidate_columns(groups, top_n, names, found, index, programs)
    if found_cols is None:
        return out
    step, start, dur, mids = found_cols
    kinds: dict[int, tuple[str, str]] = {}
    for k, s, d, mid in zip(step.tolist(), start.tolist(), dur.tolist(), mids.tolist(),
                            strict=True):
        named = kinds.get(mid)
        if named is None:
            named = kinds[mid] = (names[mid], _event_kind(names[mid]))
        out[k].append((d, named[0], named[1], s // 1000, ""))
    return out


def _host_top_events(groups: Sequence[StepGroup], top_n: int, names: dict[int, str],
                     found: FoundSteps, base_ns: int, window: tuple[np.ndarray, int],
                     index: np.ndarray | None = None, programs: StepProgramOps | None = None
                     ) -> tuple[list[tuple[TimedEvent, ...]], int]:
    """Each step's top n host events where the capture has no device events: the
    candidates of all steps ranked at once (step, longest first, then name, then member
    order, as `_top_events` sorts each step's); of those, the window's longest
    (`window`: the steps' time ranks and how many to keep), and how many were left out.
    `index`: each group's place in `found.groups`; `programs`: the compiled programs' ops
    in the steps, candidates too."""
    found_cols = _candidate_columns(groups, top_n, names, found, index, programs)
    if found_cols is None or not found_cols[0].size:
        return [()] * len(groups), 0  # iterating `groups` would make every StepGroup
    step, start, dur, mids = found_cols
    if 0 <= int(mids.min()) and int(mids.max()) < 1 << 20:  # the usual small ids: a table
        seen = np.bincount(mids)
        distinct = np.flatnonzero(seen)
        seen[distinct] = np.arange(distinct.size)
        at = seen[mids]  # each row's name, as an index into `label`
    else:
        distinct = np.unique(mids)
        at = np.searchsorted(distinct, mids)
    label = [names[m] for m in distinct.tolist()]
    name_rank = np.empty(distinct.size, np.int64)
    name_rank[sorted(range(distinct.size), key=label.__getitem__)] = np.arange(distinct.size)
    order = _by_step_longest_then_name(step, dur, name_rank[at])
    step, start, dur, at = step[order], start[order], dur[order], at[order]
    first = np.searchsorted(step, step)  # each row's step's first row
    top = np.flatnonzero(np.arange(step.size) - first < top_n)
    step, start, dur, at = step[top], start[top], dur[top], at[top]
    dur_s = dur / 1e12
    keep = _window_longest(window[0], step, dur_s, window[1])
    left_out = int(keep.size - keep.sum())
    if left_out:
        step, start, dur_s, at = step[keep], start[keep], dur_s[keep], at[keep]
    # One TimedEvent per row, its fields as whole columns (tens of thousands of rows in a
    # long window of small steps), then cut into the steps' tuples.
    kind = [_event_kind(n) for n in label]
    rows = at.tolist()
    events = build_all(TimedEvent, [label[j] for j in rows], [kind[j] for j in rows],
                       [base_ns + ns for ns in (start // 1000).tolist()],
                       dur_s.tolist(), [""] * len(rows))
    # Most steps of a long window keep no top event (the window keeps its longest): only
    # the steps that keep some are visited (rows are in step order).
    counts = np.bincount(step, minlength=len(groups))
    kept_in = np.flatnonzero(counts)
    ends = np.cumsum(counts[kept_in])
    out: list[tuple[TimedEvent, ...]] = [()] * len(groups)
    for g, a, b in zip(kept_in.tolist(), (ends - counts[kept_in]).tolist(), ends.tolist(),
                       strict=True):
        out[g] = tuple(events[a:b])
    return out, left_out


def _by_step_longest_then_name(step: np.ndarray, dur: np.ndarray, name: np.ndarray
                               ) -> np.ndarray:
    """`np.lexsort((name, -dur, step))`: one stable sort of the three packed into an int64
    where they fit (a window's steps, durations and names mostly do)."""
    if not step.size:
        return np.zeros(0, np.int64)
    low, high = int(dur.min()), int(dur.max())
    d_bits, n_bits = max(1, (high - low).bit_length()), max(1, int(name.max()).bit_length())
    if (int(step.min()) < 0 or int(name.min()) < 0
            or int(step.max()).bit_length() + d_bits + n_bits > 62):
        return np.lexsort((name, -dur, step))
    key = np.left_shift(step.astype(np.int64), d_bits + n_bits)
    key |= np.left_shift(high - dur.astype(np.int64), n_bits)  # longest first
    key |= name.astype(np.int64)
    order: np.ndarray = np.argsort(key, kind="stable")
    return order


def _longest_first(step: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """`dur[np.lexsort((-dur, step))]`: durations by step, longest first. Only the values
    are needed, so where step and duration fit one int64 they are sorted as one key
    (a plain sort of distinct-enough keys, several times faster than the lexsort)."""
    if not dur.size:
        return dur
    low = int(dur.min())
    span = int(dur.max()) - low
    bits = max(1, span.bit_length())
    if int(step.min()) < 0 or int(step.max()).bit_length() + bits > 62:
        return dur[np.lexsort((-dur, step))]
    key = np.left_shift(step, bits)
    key |= (low + span) - dur  # longest first: 0 for the longest
    key.sort()
    key &= (1 << bits) - 1
    longest: np.ndarray = (low + span) - key
    return longest


def _top_events(
    host_cands: list[Candidate], top_n: int, kernels: list[Candidate], base_ns: int,
) -> tuple[TimedEvent, ...]:
    """The step's longest ops, tf.data stages and device kernels, on the wall clock.

    `host_cands`: its ops that can make the top n (`_host_candidates`); `kernels`: those of
    the device events overlapping it that can (`_kernel_candidates`), after the ops in ties.
    """
    if top_n <= 0:
        return ()
    cands = [*host_cands, *kernels]
    cands.sort(key=lambda c: (-c[0], c[1]))
    return tuple(TimedEvent(name, kind, base_ns + start, dur / 1e12, device)
                 for dur, name, kind, start, device in cands[:top_n])


def _kernel_candidates(hits: StreamHits, steps: int, top_n: int) -> list[list[Candidate]]:
    """Each step's device events that can make its top n, longest first (then by name, then
    as found): ranked for all steps at once, as `_top_events` would rank them one by one."""
    out: list[list[Candidate]] = [[] for _ in range(steps)]
    n = hits.step.size
    if not n or top_n <= 0:
        return out
    planes = {id(tl): tl for tl, _ in hits.lines}  # each plane's names read once
    names = sorted({""} | {name for tl in planes.values() for name in tl.names.values()})
    rank_of = {name: r for r, name in enumerate(names)}
    ranks: dict[int, IdTable] = {}
    dur, rank = np.empty(n, np.int64), np.empty(n, np.int64)
    for k, (tl, ld) in enumerate(hits.lines):
        if id(tl) not in ranks:
            ranks[id(tl)] = IdTable({mid: rank_of[name] for mid, name in tl.names.items()})
        lo, hi = int(hits.bounds[k]), int(hits.bounds[k + 1])
        at = hits.pos[lo:hi]
        dur[lo:hi] = (ld.end_arr[at] - ld.start_arr[at]).astype(np.int64)
        rank[lo:hi] = ranks[id(tl)].get(ld.mid_arr[at], rank_of[""])
    order = np.lexsort((rank, -dur, hits.step))  # stable: ties keep the order found
    step = hits.step[order]
    first = np.searchsorted(step, step, side="left")
    order = order[np.arange(n) - first < top_n]
    line = np.searchsorted(hits.bounds, order, side="right") - 1
    for gi, at, k in zip(hits.step[order].tolist(), hits.pos[order].tolist(), line.tolist(),
                         strict=True):
        tl, ld = hits.lines[k]
        out[gi].append((
            ld.ends[at] - ld.starts[at], tl.names.get(ld.mids[at], ""), "kernel",
            (ld.start_ps + ld.starts[at]) // 1000, tl.plane.name))
    return out


# Step-event pairs kept at most, beyond the first 2**18: a few kernels that each span
# thousands of steps on thousands of streams are pairs that grow as their product (1,000 x
# 1,000 from 100 KB: 27 s, 910 MB); the GPU test captures have one pair per device event.
PAIRS_PER_EVENT = 4
MIN_PAIRS = 1 << 18
# Candidate pairs searched at once on one line: bounds the search's own arrays.
_SEARCH_CHUNK = 1 << 20


def lines_left_out_note(lines: int) -> str:
    """The steps' note where stream lines were left out (`StreamHits.lines_left_out`)."""
    return (f"the device events of {lines} stream line{'s' if lines > 1 else ''} left out of "
            "the steps: their events overlap so many steps that the step-event pairs would "
            f"pass {PAIRS_PER_EVENT} per device event (kernels spanning many steps on many "
            "streams, or many steps overlapping one another)")


@dataclasses.dataclass(frozen=True, slots=True)
class StreamHits:
    """Each device event on a stream line that overlaps a step, as one pair (step, event):
    `lines` the stream lines with pairs, `bounds[k]:bounds[k + 1]` the pairs of line k;
    in each line, the pairs by step, then by the event's sorted position `pos`.
    `lines_left_out`: the lines whose pairs would pass the bound (`PAIRS_PER_EVENT`)."""

    lines: list[tuple[Timeline, LineData]]
    bounds: np.ndarray
    step: np.ndarray
    pos: np.ndarray
    lines_left_out: int = 0

    def overlaps(self) -> dict[tuple[int, int], list[int]]:
        """{(step, id of the line's LineData): the positions of its events} (for checks)."""
        out: dict[tuple[int, int], list[int]] = {}
        for k, (_, ld) in enumerate(self.lines):
            lo, hi = int(self.bounds[k]), int(self.bounds[k + 1])
            for gi, at in zip(self.step[lo:hi].tolist(), self.pos[lo:hi].tolist(),
                              strict=True):
                out.setdefault((gi, id(ld)), []).append(at)
        return out


def _add_device_events(groups: Sequence[StepGroup], devices: list[Timeline]) -> int:
    """Device events inside each step's span, classified as XProf's ClassifyGpuEvent, as one
    chunk per step; returns the stream lines left out (`StreamHits.lines_left_out`).

    XProf ties kernels to steps through correlation ids; tfobs uses time containment,
    which gives the same steps when the host waits for the device at each step's end.
    """
    hits = _stream_hits(groups, devices)
    n = hits.step.size
    if not n:
        return hits.lines_left_out
    types: dict[int, IdTable] = {}  # per plane: its names classified once
    kinds, begin, end = (np.empty(n, np.int64) for _ in range(3))
    for k, (tl, ld) in enumerate(hits.lines):
        if id(tl) not in types:
            types[id(tl)] = IdTable({mid: et.classify_gpu(name)
                                     for mid, name in tl.names.items()})
        lo, hi = int(hits.bounds[k]), int(hits.bounds[k + 1])
        at = hits.pos[lo:hi]
        kinds[lo:hi] = types[id(tl)].get(ld.mid_arr[at], et.DEVICE_COMPUTE_32)
        begin[lo:hi] = ld.start_arr[at].astype(np.int64) + ld.start_ps
        end[lo:hi] = ld.end_arr[at].astype(np.int64) + ld.start_ps
    # Each step's pairs together, in line order as found: the chunks one per line were.
    order = np.argsort(hits.step, kind="stable")
    step = hits.step[order]
    cut = np.flatnonzero(step[1:] != step[:-1]) + 1
    for run in np.split(order, cut):
        groups[int(hits.step[run[0]])].events.append((kinds[run], begin[run], end[run]))
    return hits.lines_left_out


def _stream_hits(groups: Sequence[StepGroup], devices: list[Timeline]) -> StreamHits:
    """For each device stream line, the steps its events overlap, each with the sorted
    positions of those events (starting before the step's end and ending after its
    begin), found for all steps at once: a step a stream's events do not reach costs
    nothing (a crafted capture of thousands of steps and thousands of one-kernel streams
    made steps x streams lookups, and kept as many empty arrays: 190 KB, 140 s, 2.2 GB)."""
    lines: list[tuple[Timeline, LineData]] = []
    steps: list[np.ndarray] = []
    positions: list[np.ndarray] = []
    none = np.zeros(0, np.int64)
    if not groups:
        return StreamHits(lines, np.zeros(1, np.int64), none, none)
    begins = np.array([g.begin_ps for g in groups], np.int64)
    ends = np.array([g.end_ps for g in groups], np.int64)
    # The steps by begin, and the latest end of each one's and those before it: the steps
    # that may overlap a line's events are a run of these (the line's events searched
    # against every step cost steps x lines: 40,000 of each, 17 s from 4 MB). A step that
    # holds the begins of many later ones (one spanning the window beside the others) would
    # keep that latest end past every event after it: such steps are searched apart.
    by_begin = np.argsort(begins, kind="stable")
    covers = (np.searchsorted(begins[by_begin], ends[by_begin], side="left")
              - np.arange(by_begin.size) - 1)
    wide = covers > WIDE_STEP_BEGINS
    orders = [by_begin[~wide], by_begin[wide]] if wide.any() else [by_begin]
    runs = [(order, begins[order], np.maximum.accumulate(ends[order]))
            for order in orders if order.size]
    stream = [(tl, ld) for tl in devices for ld in tl.lines
              if ld.name.startswith("Stream") and ld.start_arr.size]
    room = max(MIN_PAIRS, PAIRS_PER_EVENT * sum(ld.start_arr.size for _, ld in stream))
    left_out = 0
    for tl, ld in stream:
        line_reach = np.maximum.accumulate(ld.end_arr)
        part = _line_pairs(ld, line_reach, runs[0], begins, ends, room) if runs else _NO_PAIRS
        if len(runs) > 1 and part is not None:
            wide_part = _line_pairs(ld, line_reach, runs[1], begins, ends, room)
            if wide_part is not None and wide_part[0].size:
                step, pos = (np.concatenate(c) for c in zip(part, wide_part, strict=True))
                order = np.lexsort((pos, step))  # by step, then by position
                part = step[order], pos[order]
            elif wide_part is None:
                part = None
        if part is None:
            left_out += 1
            continue
        step, pos = part
        if not step.size:
            continue
        room -= step.size
        lines.append((tl, ld))
        steps.append(step)
        positions.append(pos)
    if not lines:
        return StreamHits(lines, np.zeros(1, np.int64), none, none, left_out)
    bounds = np.concatenate(([0], np.cumsum([s.size for s in steps]))).astype(np.int64)
    return StreamHits(lines, bounds, np.concatenate(steps), np.concatenate(positions),
                      left_out)


# A step holding the begins of more later steps than this is searched apart (`_stream_hits`).
WIDE_STEP_BEGINS = 4
_NO_PAIRS = (np.zeros(0, np.int64), np.zeros(0, np.int64))


def _line_pairs(ld: LineData, line_reach: np.ndarray,
                run: tuple[np.ndarray, np.ndarray, np.ndarray], begins: np.ndarray,
                ends: np.ndarray, room: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(step, position) of each of the line's events overlapping each step of `run` (the
    steps by begin, their begins, the latest end so far), from whichever side has fewer
    candidates; None where both pass `room`."""
    by_begin, sorted_begins, reach = run
    base = ld.start_ps
    # A step before `first` ends (with every step before it) by the line's first start; a
    # step from `last` on begins at or after the line's last end.
    first = int(np.searchsorted(reach, int(ld.start_arr[0]) + base, side="right"))
    last = int(np.searchsorted(sorted_begins, int(line_reach[-1]) + base, side="left"))
    if first >= last:
        return _NO_PAIRS
    # From the events' side first: the steps each event may overlap, searched for the
    # line's events alone (thousands of two-kernel streams beside thousands of steps
    # searched every step in reach per line: 40,000 of each, 3.2 MB, 16 s).
    s_lo = np.searchsorted(reach, ld.start_arr.astype(np.int64) + base, side="right")
    s_hi = np.searchsorted(sorted_begins, ld.end_arr.astype(np.int64) + base, side="left")
    per_event = int(np.maximum(s_hi - s_lo, 0).sum())
    if per_event <= min(room, last - first):
        return _overlapping_by_event(ld, s_lo, s_hi, by_begin, ends)
    # From the steps' side, where that is less work than the events' candidates: one
    # event spanning the window reaches every step.
    near = by_begin[first:last]
    # Events before `lo` end (the latest end so far) by the step's begin; events from `hi`
    # on start at or after its end: every overlapping event lies between.
    hi = np.searchsorted(ld.start_arr, ends[near] - base, side="left")
    lo = np.searchsorted(line_reach, begins[near] - base, side="right")
    some = np.flatnonzero(hi > lo)
    total = int((hi[some] - lo[some]).sum())
    if min(total, per_event) > room:  # the candidates, at least as many as the pairs
        return None
    if per_event <= total:
        return _overlapping_by_event(ld, s_lo, s_hi, by_begin, ends)
    some = some[np.argsort(near[some], kind="stable")]  # in step order
    return _overlapping(ld, near[some], lo[some], hi[some], begins, total)


def _overlapping_by_event(ld: LineData, lo: np.ndarray, hi: np.ndarray, by_begin: np.ndarray,
                          ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`_overlapping` from the events' side: (step, position) of each event and each step in
    `by_begin[lo:hi]` of that event (its candidates) that ends after the event's start, by
    step, then by position; searched a chunk of events at a time."""
    base = ld.start_ps
    steps: list[np.ndarray] = [np.zeros(0, np.int64)]
    positions: list[np.ndarray] = [np.zeros(0, np.int64)]
    for pos, ranked in _candidate_chunks(lo, np.maximum(hi - lo, 0)):
        step = by_begin[ranked]
        keep = ends[step] > ld.start_arr[pos].astype(np.int64) + base
        steps.append(step[keep])
        positions.append(pos[keep])
    step, pos = np.concatenate(steps), np.concatenate(positions)
    order = np.lexsort((pos, step))
    return step[order], pos[order]


def _overlapping(ld: LineData, near: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                 begins: np.ndarray, total: int) -> tuple[np.ndarray, np.ndarray]:
    """(step, position) of each event in [lo, hi) of each step in `near` (ascending) that
    ends after the step's begin (`begins`); `total`: the candidates, searched a chunk of
    steps at a time."""
    base = ld.start_ps
    if total == near.size:  # one candidate a step (most lines): no runs to lay out
        keep = ld.end_arr[lo] > begins[near] - base
        return near[keep], lo[keep]
    steps: list[np.ndarray] = []
    positions: list[np.ndarray] = []
    for row, at in _candidate_chunks(lo, hi - lo):
        step = near[row]
        keep = ld.end_arr[at] > begins[step] - base
        steps.append(step[keep])
        positions.append(at[keep])
    return np.concatenate(steps), np.concatenate(positions)


def _candidate_chunks(lo: np.ndarray, count: np.ndarray
                      ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The ranges [lo[i], lo[i] + count[i]) laid out flat, as (each value's row i, the
    value), a run of rows at a time: at most `_SEARCH_CHUNK` values a chunk, at least one
    row (bounds the search's own arrays)."""
    ahead = np.cumsum(count)
    k = 0
    while k < count.size:
        stop = max(k + 1, int(np.searchsorted(ahead, (ahead[k] - count[k]) + _SEARCH_CHUNK,
                                              side="right")))
        c = count[k:stop]
        row = np.repeat(np.arange(k, stop, dtype=np.int64), c)
        first = np.repeat(lo[k:stop] - (np.cumsum(c) - c), c)  # each row's lo, less its offset
        yield row, np.arange(row.size, dtype=np.int64) + first
        k = stop
