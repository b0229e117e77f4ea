"""The overview page: one window summary as a self-contained HTML page.

Served at `/` by the metrics server and written by `tfobs analyze --html`. It reads like
TensorBoard's Profile overview: step time, the step-time breakdown, the input-bound verdict
and advice, top ops, kernels and memory, plus tfobs's own health. No external assets (the
page must work on an air-gapped node), everything escaped (op names come from the capture).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from tfobs.summary import CATEGORIES, WindowSummary

REFRESH_S = 15  # the live page reloads itself this often
_NAN = float("nan")

# One colour per step-time category, in XProf's order.
_COLOURS = {
    "input": "#d9534f", "output": "#f0ad4e", "kernel_launch": "#9b59b6",
    "host_compute": "#5bc0de", "device_compute": "#2e8b57", "device_to_device": "#8fbc8f",
    "device_collectives": "#3b6ea5", "compile": "#c9a227", "other": "#9e9e9e",
}
_VERDICT_TEXT = {
    "highly": "highly input-bound", "moderately": "moderately input-bound",
    "potentially": "potentially input-bound", "not": "not input-bound",
    "unknown": "input-bound verdict unknown",
}
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#222;
background:#f6f7f9}header{background:#263238;color:#fff;padding:12px 24px}
header h1{font-size:20px;margin:0}header .sub{opacity:.8;font-size:13px;margin-top:4px}
main{padding:16px 24px;display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));
gap:16px}section{background:#fff;border:1px solid #dde1e6;border-radius:6px;padding:12px 16px}
section.wide{grid-column:1/-1}
section{min-width:0}.advice{overflow-wrap:break-word}
h2{font-size:15px;margin:0 0 10px;color:#37474f}
.kpis{display:flex;gap:24px;flex-wrap:wrap}.kpi .v{font-size:26px;font-weight:600}
.kpi .l{font-size:12px;color:#607d8b}.bar{display:flex;height:22px;border-radius:3px;
overflow:hidden;margin:6px 0 10px;background:#eceff1}.bar span{display:block;height:100%}
table{border-collapse:collapse;width:100%;font-size:13px}td,th{padding:3px 6px;
border-bottom:1px solid #eceff1;text-align:left;vertical-align:top}th{color:#546e7a;
font-weight:600}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.sw{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:6px}
.verdict{font-size:18px;font-weight:600;padding:6px 10px;border-radius:4px;display:inline-block}
.v-highly{background:#fdecea;color:#b71c1c}.v-moderately{background:#fff4e5;color:#8a4b00}
.v-potentially{background:#fffde7;color:#6d5d00}.v-not{background:#e8f5e9;color:#1b5e20}
.v-unknown{background:#eceff1;color:#455a64}.advice li{margin:4px 0}
.sev-critical{color:#b71c1c}.sev-warning{color:#8a4b00}.muted{color:#78909c}
.name{word-break:break-all}.verdict-cell{padding:1px 6px;border-radius:3px}
.bar.mini{height:12px;margin:2px 0;min-width:160px}
.changed{font-size:11px;font-weight:600;color:#b71c1c;margin-left:6px}
svg.chart{width:100%;height:140px}svg.chart text{font-size:11px;fill:#607d8b}
"""


# (label, summary) of one window in the history, oldest first.
History = Sequence[tuple[str, WindowSummary]]


def render_page(summary: WindowSummary | None, health: dict[str, Any] | None = None,
                history: History = (), source: str = "") -> str:
    """The whole page as one HTML string (UTF-8, no external resources).

    `history`: the recent windows (live) or the captures given to `tfobs analyze --html`,
    oldest first; with two or more the page shows step time and breakdown over them, the
    verdict changes, and the first against the last. `source`: the capture the page
    reports on (`tfobs analyze --html`), named in its title instead of a live window.
    """
    health = health or {}
    title = f"tfobs report: {source}" if source else "tfobs overview"
    parts = [_header(summary, health, title), "<main>"]
    if len(history) >= 2:
        parts += [_history(history), _before_after(history)]
    if summary is None:
        parts.append('<section class="wide"><h2>No profile window yet</h2><p>tfobs opens its '
                     "first window a few steps after training starts; this page shows it as "
                     "soon as it is reduced.</p></section>")
    else:
        heading = f"Capture {source}" if source else "Latest profile window"
        parts += [_overview(summary, heading), _breakdown(summary), _verdict(summary),
                  _input_pipeline(summary), _top_ops(summary), _kernels(summary),
                  _devices(summary), _gpm(summary, health.get("gpm")), _memory(summary)]
    if health:
        parts.append(_health(health))
    parts.append("</main>")
    refresh = f'<meta http-equiv="refresh" content="{REFRESH_S}">' if health.get("url") else ""
    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"{refresh}<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
            + "".join(p for p in parts if p) + "</body></html>")


# Control characters a capture's names may hold (an ANSI escape, a NUL, a C1 control such
# as the 8-bit CSI): shown as their code, never passed to the page raw (a terminal reading a
# saved page, a copy-paste); the bidirectional overrides and isolates too, which would show
# a name reversed. The same set as `tfobs analyze`'s text output.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))
             if chr(c) not in "\t\n"}
_CONTROLS.update({c: f"\\u{c:04x}" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))})


def _e(value: Any) -> str:
    return html.escape(str(value).translate(_CONTROLS), quote=True)


def _name(name: str, limit: int = 72) -> str:
    """A long op or kernel name, shortened in the middle; the full name in its tooltip."""
    short = name if len(name) <= limit else name[: limit - 17] + "…" + name[-16:]
    return f'<span title="{_e(name)}">{_e(short)}</span>'


def _ms(seconds: float) -> str:
    if seconds <= 0:
        return "0"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} µs"


def _pct(ratio: float) -> str:
    return f"{ratio * 100:.1f} %"


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"


def _table(headers: list[str], rows: list[list[str]], numeric: set[int]) -> str:
    head = "".join(f'<th class="n">{_e(h)}</th>' if i in numeric else f"<th>{_e(h)}</th>"
                   for i, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(f'<td class="n">{c}</td>' if i in numeric else f'<td class="name">{c}</td>'
                         for i, c in enumerate(row)) + "</tr>"
        for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _header(summary: WindowSummary | None, health: dict[str, Any],
            title: str = "tfobs overview") -> str:
    ident = health.get("identity") or {}
    info = health.get("info") or {}
    bits = []
    if ident:
        bits.append(f"tf_job={_e(ident.get('tf_job', ''))} tf_task={_e(ident.get('tf_task', ''))}")
    if info.get("version"):
        bits.append(f"tfobs {_e(info['version'])}")
    if summary is not None:
        env = summary.environment
        hosts = ", ".join(env.hosts) or "unknown host"
        devices = (f"{_e(env.device_type)} × {env.device_count}" if env.device_count > 0
                   else _e(env.device_type or "CPU"))  # a CPU job counts no devices
        bits.append(f"{_e(hosts)} · {devices}")
        if env.framework_version:
            bits.append(_e(env.framework_version))
    return (f'<header><h1>{_e(title)}</h1><div class="sub">{" · ".join(bits)}</div>'
            "</header>")


def _overview(s: WindowSummary, heading: str = "Latest profile window") -> str:
    kpis = [
        ("Mean step time", _ms(s.steps.mean_s) if s.steps.count else "–", "step-time"),
        ("Steps in window", str(s.steps.count), "steps"),
        ("Input-bound", _pct(s.input_bound.ratio), "input-ratio"),
        ("Window", _ms(s.duration_s), "window"),
    ]
    if s.steps.interval_s > 0:
        # Step time leaves out what runs between steps (a slow callback): show it beside.
        kpis.insert(1, ("Time outside steps", _pct(s.steps.outside_ratio), "outside-steps"))
        if s.steps.input_between_s > 0:  # input fetched outside the markers: uncounted
            kpis.insert(2, ("Input wait between steps",
                            _pct(s.steps.input_between_s / s.steps.interval_s),
                            "input-between"))
    if s.kernels.total_s > 0:
        kpis.append(("Tensor Core kernel time",
                     _pct(s.kernels.tensor_core_s / s.kernels.total_s), "tensor-cores"))
    if s.device_compute_16bit_ratio:
        kpis.append(("16-bit device compute", _pct(s.device_compute_16bit_ratio), "bf16"))
    html_kpis = "".join(f'<div class="kpi" id="kpi-{k}"><div class="v">{_e(v)}</div>'
                        f'<div class="l">{_e(label)}</div></div>' for label, v, k in kpis)
    note = {"markers": "steps from step markers",
            "inferred": "steps inferred from the repeating training function (no markers)",
            "none": "no steps found in this window"}.get(s.steps.method, s.steps.method)
    if s.steps.note:
        note += f" · {s.steps.note}"
    return (f'<section class="wide" id="overview"><h2>{_e(heading)}</h2>'
            f'<div class="kpis">{html_kpis}</div><p class="muted">{_e(note)}</p></section>')


def _breakdown(s: WindowSummary) -> str:
    ratios = s.breakdown_ratio
    order = [c for c in CATEGORIES if c in s.breakdown_s] + \
        [c for c in s.breakdown_s if c not in CATEGORIES]
    bar = "".join(
        f'<span title="{_e(c)} {_pct(ratios[c])}" data-category="{_e(c)}" '
        f'style="width:{ratios[c] * 100:.3f}%;background:{_COLOURS.get(c, "#607d8b")}"></span>'
        for c in order if ratios.get(c, 0) > 0)
    rows = [[f'<span class="sw" style="background:{_COLOURS.get(c, "#607d8b")}"></span>{_e(c)}',
             _e(_ms(s.breakdown_s[c])), _e(_pct(ratios.get(c, 0.0)))] for c in order]
    table = _table(["Category", "Per step", "Share"], rows, {1, 2})
    return (f'<section id="breakdown"><h2>Step-time breakdown</h2><div class="bar">{bar}</div>'
            f"{table}</section>")


def _verdict(s: WindowSummary) -> str:
    v = s.input_bound.verdict
    text = _VERDICT_TEXT.get(v, v)
    if v == "unknown":
        sentence = "Input-bound verdict unknown: no steps measured in this window"
    else:
        sentence = (f"This window is {text} ({_pct(s.input_bound.ratio)} of step time "
                    "waits for input)")
        beyond = s.input_beyond_xprof()
        if beyond is not None:  # XProf's verdict above; tfobs's reading beside it
            sentence += f" to XProf; tfobs [{beyond[0]}]: {beyond[1]}"
    items = []
    if s.input_bound.advice and not any(a.message == s.input_bound.advice for a in s.advice):
        items.append(f"<li>{_e(s.input_bound.advice)}</li>")
    items += [_advice_item(a) for a in s.advice]
    advice = f'<ul class="advice">{"".join(items)}</ul>' if items else \
        '<p class="muted">No advice for this window.</p>'
    return (f'<section id="verdict"><h2>Verdict and advice</h2>'
            f'<div class="verdict v-{_e(v)}">{_e(sentence)}</div>{advice}'
            "</section>")


def _advice_item(a: Any) -> str:
    """One fired rule: id, severity and finding; the fix; the evidence, threshold and guide."""
    ev = ", ".join(f"{_e(k)}={v:.4g}" for k, v in a.evidence.items())
    return (f'<li class="sev-{_e(a.severity)}" data-rule="{_e(a.code)}"><b>{_e(a.code)}</b> '
            f"[{_e(a.severity)}]: {_e(a.message)}"
            + (f"<br>Fix: {_e(a.fix)}" if a.fix else "")
            + (f'<br><span class="muted">Evidence: {ev}'
               + (f" (threshold: {_e(a.threshold)})" if a.threshold else "")
               + (f". Guide: {_e(a.guide)}" if a.guide else "") + "</span>"
               if ev or a.guide else "")
            + "</li>")


def _input_pipeline(s: WindowSummary) -> str:
    ip = s.input_pipeline
    if not ip.host_input_s and ip.slowest_stage is None:
        return ""
    parts = ['<section id="input-pipeline"><h2>Input pipeline</h2>']
    if ip.slowest_stage is not None:
        st = ip.slowest_stage
        note = f" ({_e(st.merged_note)})" if st.merged_note else ""
        parts.append(f"<p>Slowest tf.data stage: <b class=\"name\">{_e(st.name)}</b> "
                     f"({_e(_ms(st.self_s))} self time in the window){note}</p>")
    if ip.host_input_s:
        # XProf's totals add each stage's time with the waits it overlaps (a prefetch stage
        # waiting on its map counts that wait), so a kind can exceed the step: say so next to
        # the figure a reader compares with the step, the input share.
        rows = [[_e(k), _e(_ms(v))] for k, v in ip.host_input_s.items()]
        parts.append(_table(["Host input time by kind (XProf's totals)", "Per step"], rows, {1}))
        parts.append(
            f'<p class="muted" id="input-note">These totals count each tf.data stage with the '
            f"waits it overlaps, as XProf does, so a kind can exceed the step "
            f"({_e(_ms(s.steps.mean_s))}). The step waited for input "
            f"{_e(_pct(s.input_bound.ratio))} of its time: that is the verdict's figure.</p>")
    parts.append("</section>")
    return "".join(parts)


def _top_ops(s: WindowSummary) -> str:
    if not s.ops.top:
        return ""
    rows = [[_name(o.name), _e(o.op_type), "device" if o.on_device else "host", str(o.count),
             _e(_ms(o.self_s)), _e(_ms(o.total_s))] for o in s.ops.top[:15]]
    return (f'<section class="wide" id="top-ops"><h2>Top ops by self time</h2>'
            f'<p class="muted">{_e(_pct(s.ops.host_ratio))} of op time on the host</p>'
            + _table(["Op", "Type", "Where", "Count", "Self", "Total"], rows, {3, 4, 5})
            + "</section>")


def _kernels(s: WindowSummary) -> str:
    k = s.kernels
    if not k.items and k.total_s <= 0:
        return ""
    unused = max(k.eligible_op_s - k.eligible_op_tensor_core_s, 0.0)
    head = (f"<p>Kernel time {_e(_ms(k.total_s))}; Tensor Cores {_e(_ms(k.tensor_core_s))}; "
            f"Tensor Core eligible ops {_e(_ms(k.eligible_op_s))}, of which "
            f"<b>{_e(_ms(unused))} did not use Tensor Cores</b>.</p>")
    items = sorted(k.items, key=lambda i: i.total_s, reverse=True)[:15]
    rows = [[_name(i.name), _name(i.op_name, 40), str(i.count), _e(_ms(i.total_s)),
             _e(_ms(i.avg_s)),
             "yes" if i.uses_tensor_cores else "no",
             "yes" if i.op_tensor_core_eligible else "no"] for i in items]
    table = _table(["Kernel", "Op", "Count", "Total", "Mean", "Tensor Cores", "Eligible"],
                   rows, {2, 3, 4})
    return f'<section class="wide" id="kernels"><h2>Kernels</h2>{head}{table}</section>'


def _devices(s: WindowSummary) -> str:
    if not s.devices:
        return ""
    rows = []
    for d in s.devices:
        span = d.span_s or 0.0
        def share(x: float, span: float = span) -> str:
            return _pct(x / span) if span > 0 else "–"
        rows.append([_e(d.device), _e(share(d.busy_s)),
                     _e(share(d.idle_s.get("kernel_launch", 0.0))),
                     _e(share(d.idle_s.get("input", 0.0))),
                     _e(share(d.idle_s.get("short_gap", 0.0))),
                     _e(share(d.idle_s.get("other", 0.0))), str(d.kernel_count),
                     _e(_ms(d.launch_delay_mean_s)), _e(_ms(d.launch_delay_p95_s))])
    table = _table(["Device", "Busy", "Idle: launch", "Idle: input", "Idle: short gaps",
                    "Idle: other", "Kernels", "Launch delay mean", "p95"], rows,
                   {1, 2, 3, 4, 5, 6, 7, 8})
    return f'<section class="wide" id="devices"><h2>GPU busy and idle</h2>{table}</section>'


def _gpm(s: WindowSummary, gpm: dict[str, Any] | None) -> str:
    """The GPU's own counters (NVML GPM, latest sampling interval) beside the name-based
    Tensor Core share of the window; or why there are none."""
    if not gpm:
        return ""
    by_name = (_pct(s.kernels.tensor_core_s / s.kernels.total_s)
               if s.kernels.total_s > 0 else "–")

    def pct(x: float) -> str:
        return _pct(x) if x == x else "–"  # NaN: the GPU did not report it

    rows = []
    for device, name, g in gpm.get("gpus") or ():
        pipes = dict(g.tensor_pipe_ratio)
        other = dict(g.math_pipe_ratio)
        rows.append([f"{_e(device)} <span class=\"muted\">{_e(name)}</span>",
                     _e(pct(g.tensor_active_ratio)), _e(pct(pipes.get("hmma", _NAN))),
                     _e(pct(pipes.get("imma", _NAN))), _e(by_name),
                     _e(pct(g.sm_active_ratio)), _e(pct(g.sm_occupancy_ratio)),
                     _e(pct(g.dram_bandwidth_ratio)), _e(pct(other.get("fp32", _NAN))),
                     _e(pct(other.get("fp16", _NAN)))])
    if not rows:
        reason = gpm.get("reason") or "no GPM figures yet"
        return (f'<section id="gpm"><h2>Hardware activity (NVML GPM)</h2>'
                f'<p class="muted">Not read: {_e(reason)}</p></section>')
    table = _table(["GPU", "Tensor active", "HMMA", "IMMA", "Tensor Core kernels (names)",
                    "SM active", "SM occupancy", "DRAM bandwidth", "FP32 pipe", "FP16 pipe"],
                   rows, set(range(1, 10)))
    return ('<section class="wide" id="gpm"><h2>Hardware activity (NVML GPM)</h2>' + table
            + '<p class="muted">Counted by the GPU over the last sampling interval, for every '
            "process on it; the names column is this window's share of kernel time in "
            "kernels whose names say they use Tensor Cores.</p></section>")


def _memory(s: WindowSummary) -> str:
    if not s.memory:
        return ""
    rows = [[_e(m.allocator), _e(_bytes(m.peak_bytes)), _e(_bytes(m.capacity_bytes)),
             _e(_pct(m.peak_bytes / m.capacity_bytes) if m.capacity_bytes else "–"),
             _e(_pct(m.fragmentation_ratio)), str(m.allocations)] for m in s.memory]
    table = _table(["Allocator", "Peak", "Capacity", "Peak / capacity", "Fragmentation",
                    "Allocations"], rows, {1, 2, 3, 4, 5})
    tops = [a for m in s.memory for a in m.top_allocations][:10]
    if tops:
        table += "<h2>Largest allocations at the peak</h2>" + _table(
            ["Op", "Size", "Shape", "Type"],
            [[_e(a.op_name), _e(_bytes(a.bytes)), _e(a.shape), _e(a.data_type)] for a in tops],
            {1})
    return f'<section class="wide" id="memory"><h2>Memory</h2>{table}</section>'


def _health(h: dict[str, Any]) -> str:
    rows = []
    if "steps_observed" in h:
        rows.append(["Steps observed", _e(h["steps_observed"])])
    for key, label in (("windows", "Windows"), ("errors", "Errors"), ("dropped", "Dropped")):
        counts = h.get(key) or {}
        text = ", ".join(f"{_e(k)} {int(v)}" for k, v in counts.items() if v) or "none"
        rows.append([label, text])
    if h.get("duty_cycle_ratio") is not None:
        rows.append(["Profiler duty cycle", _e(_pct(h["duty_cycle_ratio"]))])
    if h.get("estimated_overhead_ratio") is not None:
        rows.append(["Estimated overhead", _overhead(h["estimated_overhead_ratio"],
                                                     h.get("overhead_budget"))])
    ends = h.get("window_ends") or {}
    if ends:  # where tracing stopped, and what that took from the training thread
        n = sum(ends.values())
        end_s = h.get("window_end_s") or {}
        framework = (h.get("info") or {}).get("framework", "")
        rows.append(["Window end", _e(
            ", ".join(f"{k.replace('_', ' ')} {int(v)}" for k, v in sorted(ends.items()))
            + f"; on the training thread: device drain {_ms(end_s.get('drain', 0.0) / n)}, "
              f"stop {_ms(end_s.get('stop', 0.0) / n)} a window"
            + (f" ({framework} profiler)" if framework else ""))])
    kept = h.get("kept_last")
    if kept is not None:  # tfobs/runtime/keep.py: open it in TensorBoard / XProf
        folder = kept.path.split("/plugins/profile/")[0]
        rows.append(["Kept captures", f'{int(h.get("kept") or 0)}; latest: window '
                     f'{int(kept.index)} ({_e(kept.reason)}) <code>{_e(kept.path)}</code>; '
                     f'open with <code>tensorboard --logdir {_e(folder)}</code>'])
    if h.get("url"):
        rows.append(["Metrics", f'<a href="/metrics">{_e(h["url"])}</a>'])
    return f'<section id="health"><h2>tfobs health</h2>{_table(["", ""], rows, set())}</section>'


def _overhead(ratio: float, budget: float | None) -> str:
    """The estimate against the budget, and why it may stand over it for a while."""
    text = _e(_pct(ratio))
    if not budget:
        return text
    if ratio <= budget:
        return f"{text} of the {_e(_pct(budget))} budget (overhead_budget)"
    return (f'{text} <span class="muted" id="over-budget">over the {_e(_pct(budget))} budget '
            "(overhead_budget): the first window is taken whatever it costs, so early in a "
            "job its cost is spread over little training time; later windows wait until "
            "the estimate is back under the budget</span>")


def _stacked(s: WindowSummary, cls: str = "bar mini") -> str:
    ratios = s.breakdown_ratio
    order = [c for c in CATEGORIES if ratios.get(c, 0) > 0] + \
        [c for c in ratios if c not in CATEGORIES and ratios[c] > 0]
    spans = "".join(
        f'<span title="{_e(c)} {_pct(ratios[c])}" data-category="{_e(c)}" '
        f'style="width:{ratios[c] * 100:.3f}%;background:{_COLOURS.get(c, "#607d8b")}"></span>'
        for c in order)
    return f'<div class="{cls}">{spans}</div>'


def _chart(values: list[float], labels: list[str]) -> str:
    """Mean step time per window as an inline SVG line (no script, no external asset)."""
    w, h, pad = 600.0, 120.0, 24.0
    top = max(values) or 1.0
    n = len(values)
    xs = [pad + (w - 2 * pad) * (i / (n - 1) if n > 1 else 0.5) for i in range(n)]
    ys = [h - pad - (h - 2 * pad) * (v / top) for v in values]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs, ys, strict=True))
    dots = "".join(
        f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="#263238"><title>{_e(lab)}: '
        f"{_e(_ms(v))}</title></circle>"
        for x, y, v, lab in zip(xs, ys, values, labels, strict=True))
    return (f'<svg class="chart" id="history-chart" viewBox="0 0 {w:.0f} {h + 12:.0f}" '
            f'role="img" aria-label="mean step time per window">'
            f'<polyline points="{line}" fill="none" stroke="#3b6ea5" stroke-width="2"/>{dots}'
            f'<text x="{pad}" y="12">{_e(_ms(top))}</text>'
            f'<text x="{pad}" y="{h + 8:.0f}">0</text></svg>')


def _history(history: History) -> str:
    rows = []
    previous = None
    for label, s in history:
        verdict = s.input_bound.verdict
        changed = (f'<span class="changed">changed from {_e(previous)}</span>'
                   if previous is not None and verdict != previous else "")
        rows.append([_name(label, 48), _e(_ms(s.steps.mean_s)) if s.steps.count else "–",
                     _stacked(s), _e(_pct(s.input_bound.ratio)),
                     f'<span class="verdict-cell v-{_e(verdict)}">{_e(verdict)}</span>{changed}'])
        previous = verdict
    chart = _chart([s.steps.mean_s for _, s in history], [label for label, _ in history])
    return (f'<section class="wide" id="history"><h2>Recent windows (oldest first)</h2>{chart}'
            + _table(["Window", "Mean step", "Breakdown", "Input", "Verdict"], rows, {1, 3})
            + "</section>")


def _before_after(history: History) -> str:
    (first_label, first), (last_label, last) = history[0], history[-1]
    cats = [c for c in CATEGORIES if c in first.breakdown_s or c in last.breakdown_s]

    def change(a: float, b: float) -> str:
        if a <= 0:
            return "–"
        return f"{(b - a) / a * 100:+.0f} %"

    rows = [["mean step", _e(_ms(first.steps.mean_s)), _e(_ms(last.steps.mean_s)),
             _e(change(first.steps.mean_s, last.steps.mean_s))]]
    rows += [[_e(c), _e(_ms(first.breakdown_s.get(c, 0.0))), _e(_ms(last.breakdown_s.get(c, 0.0))),
              _e(change(first.breakdown_s.get(c, 0.0), last.breakdown_s.get(c, 0.0)))]
             for c in cats]
    rows.append(["input-bound", _e(first.input_bound.verdict), _e(last.input_bound.verdict), ""])
    return ('<section class="wide" id="before-after"><h2>First against last</h2>'
            + _table(["Per step", f"First: {first_label}", f"Last: {last_label}",
                      "Change"], rows, {1, 2, 3}) + "</section>")
