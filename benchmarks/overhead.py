"""Training throughput with and without tfobs (default settings), interleaved A/B pairs.

One process, one model per workload: Keras `fit` (tfobs's own Keras callback) and a custom
`tf.function` loop with `tfobs.step`. Each workload trains without stopping while the script
switches tfobs in (B) and out (A) of the training path in blocks of about `--trial-s`
seconds, in ABBA order. A B block that ends while a window is open, exporting or reducing
runs on until tfobs is idle, so every window's whole cost lands in B. tfobs's duty-cycle
clock is paused during A blocks and B steps are numbered on their own, so the B blocks
together behave like one continuous tfobs run at its default budget.

Two answers, from the same run:

* A/B: per pair, B/A throughput; the median ratio and the pooled ratio (all B steps over all
  B time against the same for A: windows are rare, so a median of pairs would hide the few
  blocks that hold one), each with a bootstrap 90 % interval. On a shared VM single blocks
  swing by 10-20 %, so this interval is wide (it is the noise floor, printed as such).
* Cost by part, which the noise does not drown: every step pays tfobs's marker and
  histogram (timed in place around every step, B's mean minus A's: microseconds, several
  times what a tight loop shows, as training leaves the caches cold); every window costs
  the steps inside its span (from the step that opened it to the end of its reduction)
  beyond the mean step around it (the mean, as throughput is: against the median, a skewed
  step distribution read as a window cost of its own); tfobs's threads use some CPU outside
  windows (measured per thread); a Prometheus scrape every `--scrape-s` costs one
  rendering of the metrics. Their sum, with a bootstrap interval over windows, is the
  overhead; the script checks that it lies inside the A/B interval.

Also printed: tfobs's own estimate of each window's cost next to the measured one; the
worst single step while a window traced, and while it was exported or reduced, against the
median step; the steps in the seconds after each window against those before it (what a
window leaves behind: caches, freed memory), beside the same figure at points with no
window (the machine's own drift); and a ticker thread's worst gap (1 ms sleeps:
how long something held the GIL) in A blocks, quiet B blocks and B blocks with a window;
and the share of A and B time spent in Python's garbage collector.
tfobs's background CPU includes its reduce helper process (`--reduce-in process`, the
default; `thread` reduces in the training process, as before issue 17).
The last line is `overhead_pct=<x>`, the larger workload's cost by part.

    .venv/bin/python benchmarks/overhead.py                       # 150 pairs of 1 s blocks
    .venv/bin/python benchmarks/overhead.py --pairs 20 --trial-s 1  # a quick run
    .venv/bin/python benchmarks/overhead.py --pairs 20 --reduce-in thread  # the old way
    .venv/bin/python benchmarks/overhead.py --pairs 7 --block-steps 20  # does it run (tests)
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

BATCH = 64
NEIGHBOURHOOD_S = 2.0  # baseline steps for a window's excess: within this of its span
A, B = "A", "B"


@dataclass
class Block:
    arm: str
    target: int  # steps planned; a B block may run longer (a window in flight)
    wall: list[float] = field(default_factory=list)  # time.time() at each step's start
    dur: list[float] = field(default_factory=list)  # seconds, start to next start
    num: list[int] = field(default_factory=list)  # tfobs step number (B), -1 in A
    # Time spent around the step itself: tfobs's per-step work in B, the same timing calls
    # with nothing between them in A.
    own_s: float = 0.0
    tfobs_cpu_s: float = 0.0  # CPU of tfobs's threads and helper while this block ran
    worst_gap_s: float = 0.0  # the ticker's longest gap while this block ran
    gc_s: float = 0.0  # Python's cyclic GC pauses while this block ran (any thread)

    @property
    def seconds(self) -> float:
        return sum(self.dur)

    @property
    def rate(self) -> float:
        return len(self.dur) / self.seconds if self.dur else 0.0


def tfobs_threads_cpu_s() -> float:
    """CPU seconds used so far by the live threads tfobs started (named tfobs-*)."""
    total = 0.0
    for t in threading.enumerate():
        if t.name.startswith("tfobs") and t.ident is not None:
            try:
                total += time.clock_gettime(time.pthread_getcpuclockid(t.ident))
            except (OSError, ProcessLookupError):
                pass  # the thread ended between enumerate() and the clock read
    from tfobs.runtime import current

    runtime = current()
    worker = runtime._reduce.worker if runtime is not None else None
    if worker is not None:
        total += worker.cpu_s()  # the reduce helper process
    return total


class Ticker:
    """A thread that sleeps 1 ms at a time; `take()` is the longest wake-to-wake gap since
    the last call: how long the training process's GIL (or the CPU) kept it waiting."""

    def __init__(self) -> None:
        self._worst = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-ticker", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        last = time.perf_counter()
        while not self._stop.is_set():
            time.sleep(0.001)
            now = time.perf_counter()
            if now - last > self._worst:
                self._worst = now - last
            last = now

    def take(self) -> float:
        worst, self._worst = self._worst, 0.0
        return worst

    def stop(self) -> None:
        self._stop.set()


TICKER: Ticker | None = None


class GcClock:
    """Wall time in Python's cyclic garbage collector (gc.callbacks), in any thread. A
    collection holds the GIL, so it pauses the training thread only when that needs the GIL;
    run by a thread that loses its core meanwhile, one collection can read seconds while
    training runs on in TensorFlow (28 % of the no-tfobs arm's time in one run). A lead to
    look at, not a cost by itself."""

    def __init__(self) -> None:
        import gc

        self.total_s = 0.0
        self._t0 = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        elif self._t0:
            self.total_s += time.perf_counter() - self._t0
            self._t0 = 0.0


GC: GcClock | None = None


def leave_out_of_budget(budget: Any, seconds: float) -> None:
    """tfobs's duty-cycle budget skips a stretch without tfobs (an A block): its clock
    start and its next allowed window move on by `seconds`."""
    budget.t0 += seconds
    budget.not_before += seconds


class Plan:
    """Decides before every step which arm it runs in, and times it."""

    def __init__(self, runtime: Any, steps_per_block: int, pairs: int,
                 first_step: int = 0) -> None:
        from tfobs.capture import markers

        self.markers = markers
        self.runtime = runtime
        self.order = [arm for p in range(pairs) for arm in ((A, B) if p % 2 == 0 else (B, A))]
        self.steps_per_block = steps_per_block
        self.blocks: list[Block] = []
        # B steps are numbered on their own (continuing the previous plan's numbers): windows
        # fall due as in one continuous tfobs run.
        self.b_step = first_step
        self._last_perf = 0.0
        self._cpu0 = 0.0
        self._gc0 = 0.0
        self._a_since = 0.0
        self.markers.set_hooks(None)  # start detached; the first block switches

    @property
    def current(self) -> Block | None:
        return self.blocks[-1] if self.blocks else None

    def before_step(self) -> str | None:
        """The arm of the step about to run; None when the plan is done."""
        now = time.perf_counter()
        block = self.current
        if block is not None and block.wall:
            block.dur.append(now - self._last_perf)
        if block is None or (len(block.wall) >= block.target
                             and (block.arm == A or self.runtime.idle)):
            if not self._next_block():
                return None
            block = self.current
            now = time.perf_counter()
        block.wall.append(time.time())
        self._last_perf = now
        return block.arm

    def numbered(self) -> int:
        """Number the B step about to run (call once per B step)."""
        n = self.b_step
        self.b_step += 1
        self.current.num.append(n)
        return n

    def after_a_step(self) -> None:
        self.current.num.append(-1)

    def _next_block(self) -> bool:
        cpu = tfobs_threads_cpu_s()
        done = self.current
        gap = TICKER.take() if TICKER is not None else 0.0
        gc_now = GC.total_s if GC is not None else 0.0
        if done is not None:
            done.tfobs_cpu_s = cpu - self._cpu0
            done.worst_gap_s = gap
            done.gc_s = gc_now - self._gc0
        self._gc0 = gc_now
        if len(self.blocks) == len(self.order):
            self.markers.set_hooks(None)
            return False
        arm = self.order[len(self.blocks)]
        if arm == B:
            if self._a_since:  # tfobs's clock skips the A stretch
                leave_out_of_budget(self.runtime.budget, time.monotonic() - self._a_since)
                self._a_since = 0.0
            self.markers.set_hooks(self.runtime)
        else:
            self.markers.set_hooks(None)
            if not self._a_since:  # the second A of an ABBA pair continues the stretch
                self._a_since = time.monotonic()
        self.blocks.append(Block(arm, self.steps_per_block))
        self._cpu0 = cpu
        return True


def collect_leftovers() -> None:
    """A full collection between the measured parts. Each `fit` (the warm-up, the
    calibration, the keras_fit workload) leaves its tf.data iterator in a reference cycle,
    whose destructor waits for the iterator's threads with the GIL released: collected later,
    inside a block of the next workload, it held the training thread 18.7 s once (py-spy,
    RESULTS.md "What held that scrape") and doubled the run. Collected here, between blocks,
    it costs no block anything."""
    import gc

    gc.collect()


def make_workloads(tf: Any) -> dict[str, Any]:
    from tfobs.commands.demo import build_dataset, build_model, build_train_step

    keras = tf.keras
    ds = build_dataset(tf, BATCH, input_bound=False, sleep_ms=0)
    model = build_model(keras)
    model.fit(ds, steps_per_epoch=20, epochs=1, verbose=0)  # build, trace, warm up

    train_step = build_train_step(tf, build_model(keras))
    iterator = iter(ds)
    for _ in range(20):
        train_step(iterator)
    return {"keras_fit": (model, ds), "custom_loop": (train_step, iterator)}


def run_loop(tfobs: Any, work: Any, plan: Plan) -> None:
    """`with tfobs.step(n): train_step()` in B, `train_step()` in A; both timed around the
    step (the `with` statement spelled out so its enter and exit are timed in place)."""
    train_step, iterator = work
    perf = time.perf_counter
    while (arm := plan.before_step()) is not None:
        if arm == B:
            marker = tfobs.step(plan.numbered())
            t0 = perf()
            marker.__enter__()
            t1 = perf()
            train_step(iterator)
            t2 = perf()
            marker.__exit__(None, None, None)
            t3 = perf()
        else:
            t0 = perf()
            t1 = perf()
            train_step(iterator)
            t2 = perf()
            t3 = perf()
            plan.after_a_step()
        plan.current.own_s += (t1 - t0) + (t3 - t2)


def run_keras(tf: Any, work: Any, plan: Plan) -> None:
    """One long `fit`; a first callback switches arms and hands B steps to tfobs's callback."""
    from tfobs.capture import markers

    model, ds = work
    tfobs_cb = markers.keras3_callback_class()()
    perf = time.perf_counter

    class Switch(tf.keras.callbacks.Callback):
        def on_train_begin(self, logs: Any = None) -> None:
            tfobs_cb.set_model(self.model)
            tfobs_cb.on_train_begin(logs)
            tfobs_cb._base = plan.b_step  # B steps numbered on their own, as in run_loop
            self.in_b = False

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            arm = plan.before_step()
            if arm is None:
                self.model.stop_training = True
                self.in_b = False
                return
            self.in_b = arm == B
            if self.in_b:
                plan.numbered()
                t0 = perf()
                tfobs_cb.on_train_batch_begin(batch, logs)
            else:
                plan.after_a_step()
                t0 = perf()
            plan.current.own_s += perf() - t0

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            block = plan.current
            t0 = perf()
            if self.in_b:
                tfobs_cb.on_train_batch_end(batch, logs)
            if block is not None:
                block.own_s += perf() - t0

        def on_train_end(self, logs: Any = None) -> None:
            tfobs_cb.on_train_end(logs)

    model.fit(ds, steps_per_epoch=10**8, epochs=1, verbose=0, callbacks=[Switch()])


def train(tf: Any, tfobs: Any, name: str, work: Any, plan: Plan) -> None:
    """Train workload `name` until `plan` is done."""
    if name == "keras_fit":
        run_keras(tf, work, plan)
    else:
        run_loop(tfobs, work, plan)


def calibrate(tf: Any, tfobs: Any, name: str, work: Any, runtime: Any, trial_s: float) -> int:
    """Steps per block: one short all-A plan measures the step rate."""
    probe = Plan(runtime, 200, 1)
    probe.order = [A]
    train(tf, tfobs, name, work, probe)
    return max(50, int(probe.blocks[0].rate * trial_s))


def bootstrap(values: list[Any], stat: Any, n: int = 2000, seed: int = 0) -> tuple[float, float]:
    """90 % interval of `stat(values)`, by resampling `values`."""
    if not values:
        return 0.0, 0.0
    rng = random.Random(seed)
    got = sorted(stat(rng.choices(values, k=len(values))) for _ in range(n))
    return got[int(0.05 * n)], got[int(0.95 * n) - 1]


def pooled_ratio(pairs: list[tuple[Block, Block]]) -> float:
    a_steps = sum(len(a.dur) for a, _ in pairs)
    a_time = sum(a.seconds for a, _ in pairs)
    b_steps = sum(len(b.dur) for _, b in pairs)
    b_time = sum(b.seconds for _, b in pairs)
    return (b_steps / b_time) / (a_steps / a_time)


@dataclass
class WindowCost:
    index: int
    outcome: str
    span_s: float
    steps: int
    excess_s: float  # measured: steps in the span beyond the mean step around it
    estimate_s: float  # tfobs's own ledger estimate of the same window
    worst_export_step_s: float  # while it was exported or reduced
    worst_trace_step_s: float  # while the profiler recorded
    after_excess_s: float  # steps in the NEIGHBOURHOOD_S after it, beyond those before it
    traced: int = 0  # steps the profiler recorded (tfobs's window length)
    worst_span_step_s: float = 0.0  # the slowest step anywhere in the span


def plan_steps(plan: Plan) -> list[tuple[float, float, int, str]]:
    """Every step of the plan: (wall start, duration, B step number or -1, arm)."""
    return [(w, d, n, blk.arm) for blk in plan.blocks for w, d, n in
            zip(blk.wall, blk.dur, blk.num, strict=False)]


def window_spans(plan: Plan, records: list[tuple[Any, float]]
                 ) -> list[tuple[Any, float, float]]:
    """(record, first step's start, end of reduction) of each window opened in a B block."""
    starts = {n: w for blk in plan.blocks if blk.arm == B
              for w, n in zip(blk.wall, blk.num, strict=False)}
    return [(rec, starts[rec.first_step], done_at) for rec, done_at in records
            if rec.first_step in starts]


def window_costs(plan: Plan, records: list[tuple[Any, float]], policy: Any) -> list[WindowCost]:
    """Measured cost of each window that opened during this plan's B blocks."""
    from tfobs.capture.schedule import window_cost_s

    steps = plan_steps(plan)
    spans = window_spans(plan, records)
    out = []
    for rec, s0, s1 in spans:
        inside = [d for w, d, _, _ in steps if s0 <= w < s1]
        around = [d for w, d, _, _ in steps
                  if s0 - NEIGHBOURHOOD_S <= w < s1 + NEIGHBOURHOOD_S and not (s0 <= w < s1)
                  and not any(o0 <= w < o1 for _, o0, o1 in spans)]
        if not inside or len(around) < 20:
            continue
        base = statistics.fmean(around)
        export0 = rec.end_ns / 1e9
        during_export = [d for w, d, _, _ in steps if w < s1 and w + d > export0]
        during_trace = [d for w, d, _, _ in steps if s0 <= w < export0]
        after_excess = shift_excess(steps, s0, s1, [(o0, o1) for _, o0, o1 in spans])
        active_s = (rec.end_ns - rec.start_ns) / 1e9
        out.append(WindowCost(
            index=rec.index, outcome=rec.outcome, span_s=s1 - s0, steps=len(inside),
            excess_s=sum(inside) - len(inside) * base,
            estimate_s=window_cost_s(active_s, rec.background_cpu_s, policy),
            worst_export_step_s=max(during_export, default=0.0),
            worst_trace_step_s=max(during_trace, default=0.0),
            after_excess_s=after_excess, traced=rec.last_step - rec.first_step + 1,
            worst_span_step_s=max(inside)))
    return out


def shift_excess(steps: list[tuple[float, float, int, str]], before_end: float,
                 after_start: float, spans: list[tuple[float, float]]) -> float:
    """Seconds the steps in the NEIGHBOURHOOD_S after `after_start` took beyond as many steps
    at the mean of those in the NEIGHBOURHOOD_S before `before_end` (mean against mean: a
    median baseline would read a skewed step distribution as a cost)."""
    def outside(w: float) -> bool:
        return not any(o0 <= w < o1 for o0, o1 in spans)
    before = [d for w, d, _, _ in steps
              if before_end - NEIGHBOURHOOD_S <= w < before_end and outside(w)]
    after = [d for w, d, _, _ in steps
             if after_start <= w < after_start + NEIGHBOURHOOD_S and outside(w)]
    if not before or not after:
        return 0.0
    return len(after) * (statistics.fmean(after) - statistics.fmean(before))


def placebo_shifts(plan: Plan, spans: list[tuple[float, float]]) -> list[float]:
    """`shift_excess` at points with no window within 2 x NEIGHBOURHOOD_S: what the same
    figure reads when nothing happened (the machine's own drift)."""
    steps = plan_steps(plan)
    if not steps:
        return []
    t, end, out = steps[0][0] + NEIGHBOURHOOD_S, steps[-1][0] - NEIGHBOURHOOD_S, []
    margin = 2 * NEIGHBOURHOOD_S
    while t < end:
        if not any(o0 - margin <= t <= o1 + margin for o0, o1 in spans):
            out.append(shift_excess(steps, t, t, spans))
        t += NEIGHBOURHOOD_S * 2.5
    return out


def a_stretch_steps(plan: Plan, span_steps: int) -> int:
    """`span_steps`, cut to one less than the longest A block's steps (0: no A block)."""
    longest = max((len(blk.dur) for blk in plan.blocks if blk.arm == A), default=0)
    return min(span_steps, longest - 1)


def placebo_worst(plan: Plan, span_steps: int, windows: int, n: int = 2000,
                  seed: int = 0) -> list[float]:
    """The worst step of `windows` stretches of `span_steps` steps drawn from the A blocks
    (no tfobs at all), over `n` draws: how slow the worst of as many window-long stretches
    gets with nothing but the machine's own jitter. A window longer than every A block (a
    slow machine: fewer, longer steps per block) is compared with stretches as long as the
    longest block allows (`a_stretch_steps`), not with nothing."""
    span_steps = a_stretch_steps(plan, span_steps)
    runs = [blk.dur for blk in plan.blocks if blk.arm == A and len(blk.dur) > span_steps]
    if not runs or windows <= 0 or span_steps <= 0:
        return []
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        worst = 0.0
        for _ in range(windows):
            dur = rng.choice(runs)
            i = rng.randrange(len(dur) - span_steps)
            worst = max(worst, max(dur[i:i + span_steps]))
        out.append(worst)
    return out


def scrape_cost_s(runtime: Any, n: int = 20) -> float:
    """CPU seconds of rendering tfobs's /metrics once (median of n, this thread's clock)."""
    from prometheus_client import generate_latest

    from tfobs.export.prometheus import PrometheusExporter

    registry = next(s for s in runtime.sinks if isinstance(s, PrometheusExporter)).registry
    costs = []
    for _ in range(n):
        t0 = time.thread_time()
        generate_latest(registry)
        costs.append(time.thread_time() - t0)
    return statistics.median(costs)


class Scraper:
    """Scrapes the live /metrics every `interval_s`, as Prometheus would, for the whole run."""

    def __init__(self, url: str, interval_s: float) -> None:
        self.url, self.interval_s = url, interval_s
        self.count = self.failed = self.late = 0
        # What went wrong, for the closing line: a failed scrape must say why (a timeout
        # is tfobs's server stalling; a refused connection, the server gone).
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-scraper", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            start = time.perf_counter()
            try:
                # Prometheus's default scrape_timeout. A rendering held by the job's garbage
                # collection (a tf.data iterator's finalizer in the render thread) answers
                # with the previous rendering and an Age header: counted as late.
                with urllib.request.urlopen(self.url, timeout=10) as resp:
                    resp.read()
                    self.late += resp.headers.get("Age") is not None
                self.count += 1
            except OSError as exc:
                self.failed += 1
                if len(self.errors) < 5:
                    self.errors.append(f"{type(exc).__name__}: {exc} after "
                                       f"{time.perf_counter() - start:.2f} s")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def per_step_cost_s(plan: Plan) -> float:
    """tfobs's per-step work timed in place: B's mean minus A's (the timing calls alone)."""
    def mean(arm: str) -> float:
        blocks = [b for b in plan.blocks if b.arm == arm]
        n = sum(len(b.dur) for b in blocks)
        return sum(b.own_s for b in blocks) / n if n else 0.0
    return max(0.0, mean(B) - mean(A))


def report(name: str, plan: Plan, records: list[tuple[Any, float]], runtime: Any,
           own_s: float, scrape_each_s: float, scrape_s: float) -> float:
    blocks = plan.blocks
    pairs = [(blocks[i], blocks[i + 1]) if blocks[i].arm == A else (blocks[i + 1], blocks[i])
             for i in range(0, len(blocks) - 1, 2)]
    ratios = [b.rate / a.rate for a, b in pairs]
    median = statistics.median(ratios)
    med_lo, med_hi = bootstrap(ratios, statistics.median)
    pooled = pooled_ratio(pairs)
    pool_lo, pool_hi = bootstrap(pairs, pooled_ratio)
    b_time = sum(b.seconds for _, b in pairs)
    b_steps = sum(len(b.dur) for _, b in pairs)
    step_s = statistics.median(d for blk in blocks for d in blk.dur)

    costs = window_costs(plan, records, runtime.policy)
    step_cost = per_step_cost_s(plan)
    steps_share = step_cost * b_steps / b_time
    windows_share = sum(c.excess_s for c in costs) / b_time
    win_lo, win_hi = bootstrap(costs, lambda cs: sum(c.excess_s for c in cs) / b_time)
    quiet = [blk for blk in blocks
             if not any(blk.wall and blk.wall[0] - 1 <= rec.start_ns / 1e9 <= blk.wall[-1] + 1
                        for rec, _ in records)]
    quiet_time = sum(blk.seconds for blk in quiet)
    background_share = sum(blk.tfobs_cpu_s for blk in quiet) / quiet_time if quiet_time else 0.0
    scrape_share = scrape_s / scrape_each_s
    rest = steps_share + background_share + scrape_share
    total = windows_share + rest
    lo, hi = win_lo + rest, win_hi + rest

    print(f"{name}: {len(pairs)} A/B pairs, {plan.steps_per_block} steps per block, median step "
          f"{step_s * 1000:.2f} ms", flush=True)
    print(f"{name}: A/B median ratio {median:.4f} (90% interval {med_lo:.4f}-{med_hi:.4f}), "
          f"pooled ratio {pooled:.4f} (90% interval {pool_lo:.4f}-{pool_hi:.4f}) -> A/B "
          f"overhead {100 * (1 - median):.2f}% median, {100 * (1 - pooled):.2f}% pooled",
          flush=True)
    for c in costs:
        print(f"{name}: window {c.index} [{c.outcome}] span {c.span_s * 1000:.0f} ms, "
              f"{c.steps} steps ({c.traced} traced), measured cost "
              f"{c.excess_s * 1000:.1f} ms, tfobs's estimate {c.estimate_s * 1000:.1f} ms",
              flush=True)
    measured = sum(c.excess_s for c in costs)
    estimated = sum(c.estimate_s for c in costs)
    print(f"{name}: windows {len(costs)}, measured {measured * 1000:.0f} ms in all, tfobs "
          f"estimated {estimated * 1000:.0f} ms (measured/estimated "
          f"{measured / estimated if estimated else 0:.2f})", flush=True)
    worst = max((c.worst_export_step_s for c in costs), default=0.0)
    worst_trace = max((c.worst_trace_step_s for c in costs), default=0.0)
    print(f"{name}: worst step during an export or reduction {worst * 1000:.2f} ms, median "
          f"step {step_s * 1000:.2f} ms ({worst / step_s:.2f}x; goal <= 1.5x); worst step "
          f"while tracing {worst_trace * 1000:.2f} ms ({worst_trace / step_s:.2f}x)",
          flush=True)
    jitter = placebo_worst(plan, round(statistics.median(c.steps for c in costs)),
                           len(costs)) if costs else []
    if jitter:
        jitter.sort()
        print(f"{name}: the worst step of {len(costs)} window-long stretches of A blocks (no "
              f"tfobs): median {statistics.median(jitter) / step_s:.2f}x, 90% interval "
              f"{jitter[len(jitter) // 20] / step_s:.2f}-"
              f"{jitter[len(jitter) * 19 // 20] / step_s:.2f}x the median step (the machine's "
              f"own jitter, for the worst-step figure above)", flush=True)
    if costs:  # window by window, against stretches of A blocks as long as each
        mine = statistics.median(c.worst_span_step_s for c in costs) / step_s
        drawn = [x for c in costs for x in placebo_worst(plan, c.steps, 1, n=200)]
        cut = sum(a_stretch_steps(plan, c.steps) < c.steps for c in costs)
        theirs = f"{statistics.median(drawn) / step_s:.2f}x" if drawn else "(no A block)"
        print(f"{name}: slowest step in a window's span: median {mine:.2f}x the median step "
              f"over {len(costs)} windows; in A stretches of as many steps (no tfobs) median "
              f"{theirs}" + (f" ({cut} windows longer than every A block: their stretches "
                             f"are as long as the longest)" if cut else ""), flush=True)
    after = [c.after_excess_s for c in costs]
    placebo = placebo_shifts(plan, [(s0, s1) for _, s0, s1 in window_spans(plan, records)])
    if after and placebo:
        lo_p, hi_p = bootstrap(placebo, statistics.fmean)
        mean_after = statistics.fmean(after)
        where = "inside" if lo_p <= mean_after <= hi_p else "OUTSIDE"
        print(f"{name}: steps in the {NEIGHBOURHOOD_S:.0f} s after a window against the "
              f"{NEIGHBOURHOOD_S:.0f} s before it: {1000 * mean_after:+.1f} ms per window "
              f"({len(after)}); at {len(placebo)} points with no window "
              f"{1000 * statistics.fmean(placebo):+.1f} ms (90% interval {1000 * lo_p:+.1f}.."
              f"{1000 * hi_p:+.1f}): {where} the no-window range", flush=True)
    quiet_ids = {id(blk) for blk in quiet}
    busy = [blk for blk in blocks if blk.arm == B and id(blk) not in quiet_ids]
    for label, group in (("A", [blk for blk in blocks if blk.arm == A]),
                         ("B quiet", [blk for blk in quiet if blk.arm == B]),
                         ("B with a window", busy)):
        gaps = sorted(blk.worst_gap_s for blk in group)
        if gaps:
            print(f"{name}: ticker worst gap, {label} blocks: max {gaps[-1] * 1000:.1f} ms, "
                  f"median {statistics.median(gaps) * 1000:.1f} ms ({len(gaps)} blocks)",
                  flush=True)
    gc_share = {arm: (sum(blk.gc_s for blk in blocks if blk.arm == arm)
                      / max(1e-9, sum(blk.seconds for blk in blocks if blk.arm == arm)))
                for arm in (A, B)}
    print(f"{name}: Python GC wall time (any thread) {100 * gc_share[A]:.3f}% of A time, "
          f"{100 * gc_share[B]:.3f}% of B time (a lead, not a cost: see GcClock)",
          flush=True)
    print(f"{name}: per-step work {step_cost * 1e6:.1f} us timed in place; tfobs's own count "
          f"{own_s / b_steps * 1e6:.1f} us (what its budget charges)", flush=True)
    print(f"{name}: cost by part: steps {step_cost * 1e6:.1f} us each = {100 * steps_share:.3f}%; "
          f"windows {100 * windows_share:.3f}% (90% interval {100 * win_lo:.3f}-"
          f"{100 * win_hi:.3f}%); tfobs threads outside windows {100 * background_share:.3f}%; "
          f"a scrape every {scrape_each_s:.0f} s ({scrape_s * 1000:.1f} ms CPU each) "
          f"{100 * scrape_share:.3f}% -> total {100 * total:.2f}% (90% interval "
          f"{100 * lo:.2f}-{100 * hi:.2f}%)", flush=True)
    inside = (1 - pool_hi) <= total <= (1 - pool_lo)
    print(f"{name}: the A/B pooled interval {100 * (1 - pool_hi):.2f}..{100 * (1 - pool_lo):.2f}% "
          f"{'contains' if inside else 'does NOT contain'} the cost by part", flush=True)
    back = lo <= (1 - pooled) <= hi
    print(f"{name}: the cost-by-part interval {100 * lo:.2f}..{100 * hi:.2f}% "
          f"{'contains' if back else 'does NOT contain'} the A/B pooled figure "
          f"{100 * (1 - pooled):.2f}%", flush=True)
    return total * 100


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=150, help="A/B pairs per workload (>= 7)")
    parser.add_argument("--trial-s", type=float, default=1.0, help="seconds per block")
    parser.add_argument("--block-steps", type=int, default=0,
                        help="steps per block, in place of --trial-s's calibration (its 200 "
                             "steps without tfobs): a check that the script runs, not a "
                             "measurement")
    parser.add_argument("--scrape-s", type=float, default=15.0, help="scrape interval")
    parser.add_argument("--workloads", default="keras_fit,custom_loop")
    parser.add_argument("--reduce-in", choices=("process", "thread"), default="process")
    parser.add_argument("--tf-threads", type=int, default=0,
                        help="TensorFlow intra- and inter-op threads (0: TF's default, every "
                             "core); 1 leaves a core free, as a GPU job's host usually has")
    args = parser.parse_args(argv)
    if args.pairs < 7:
        parser.error("--pairs must be at least 7")

    import tensorflow as tf

    import tfobs
    from tfobs.capture import markers

    if args.tf_threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.tf_threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.tf_threads)
    works = make_workloads(tf)
    global TICKER, GC
    TICKER = Ticker()
    GC = GcClock()
    # defaults otherwise; port 0: no clash with others
    runtime = tfobs.enable(metrics_port=0, reduce_in=args.reduce_in)
    markers.uninstall_fit_hooks()  # run_keras hands steps to tfobs's callback itself
    records: list[tuple[Any, float]] = []
    runtime.add_listener(lambda rec, summ: records.append((rec, time.time())))
    scraper = Scraper(runtime.metrics_url, args.scrape_s)

    print(f"# machine: {platform.node()} {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cpus, python {platform.python_version()}, tensorflow "
          f"{tf.__version__}; pairs={args.pairs} "
          f"{f'block_steps={args.block_steps}' if args.block_steps else f'trial_s={args.trial_s}'} "
          f"reduce_in={args.reduce_in} tf_threads={args.tf_threads or 'default'} "
          f"load_avg_1m={os.getloadavg()[0]:.2f}", flush=True)
    totals = {}
    next_step = 0
    for name in args.workloads.split(","):
        work = works[name]
        steps = args.block_steps or calibrate(tf, tfobs, name, work, runtime, args.trial_s)
        collect_leftovers()
        plan = Plan(runtime, steps, args.pairs, first_step=next_step)
        own0 = markers.own_seconds()
        first = len(records)
        train(tf, tfobs, name, work, plan)
        runtime.wait_idle(60)
        next_step = plan.b_step
        mine = [(rec, at) for rec, at in records[first:] if rec.start_ns]
        totals[name] = report(name, plan, mine, runtime, markers.own_seconds() - own0,
                              args.scrape_s, scrape_cost_s(runtime))
    scraper.stop()
    health = runtime.health
    print(f"tfobs windows: {dict(health.windows)}, errors {dict(health.errors)}, scrapes "
          f"{scraper.count} ({scraper.failed} failed{': ' if scraper.errors else ''}"
          f"{'; '.join(scraper.errors)}; {scraper.late} answered by an earlier rendering), "
          "duty cycle "
          f"{runtime.budget.duty_cycle():.4f}, tfobs's estimated overhead "
          f"{runtime.budget.overhead():.4f}", flush=True)
    tfobs.disable()
    print(f"overhead_pct={max(totals.values()):.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
