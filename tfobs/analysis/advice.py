"""Advice: XProf's bottleneck sentences for the figures of one window."""

from __future__ import annotations

from tfobs.summary import Advice

HIGH_PCT = 15.0  # kernel launch, all others, collectives: XProf's "high"
MODERATE_PCT = 3.0


def _severity(pct: float, high: float = HIGH_PCT, moderate: float = MODERATE_PCT) -> str:
    return "critical" if pct >= high else "warning" if pct >= moderate else ""


def reduce_advice(ratios: dict[str, float], verdict: str, statement: str,
                  compute_16bit_ratio: float, device_compute_s: float,
                  memory_frag: list[tuple[str, float]]) -> tuple[Advice, ...]:
    out: list[Advice] = []
    if verdict != "unknown":
        levels = {"highly": "critical", "moderately": "warning", "potentially": "warning"}
        out.append(Advice("input_bound", levels.get(verdict, "info"), statement))
    pct = {k: 100.0 * v for k, v in ratios.items()}
    sentences = {
        "kernel_launch": " % of the total step time sampled is spent on 'Kernel Launch'.",
        "other": " % of the total step time sampled is spent on 'All Others' time. "
                 "This could be due to Python execution overhead.",
        "device_collectives": " % of the total step time sampled is spent on 'Device "
                              "Collective Communication'.",
    }
    for cat, text in sentences.items():
        sev = _severity(pct.get(cat, 0.0))
        if sev and not (cat == "other" and verdict == "potentially"):
            out.append(Advice(f"{cat}_bound", sev, f"{pct[cat]:.1f}{text}"))
    output = pct.get("output", 0.0)
    if output >= 5.0:
        level = "HIGHLY" if output >= 20.0 else "MODERATELY"
        out.append(Advice("output_bound", "critical" if output >= 20 else "warning",
                          f"Your program is {level} output-bound because {output:.1f}% of "
                          "the total step time sampled is spent on output."))
    if device_compute_s > 0 and compute_16bit_ratio < 0.10:
        out.append(Advice("low_16bit_compute", "info",
                          f"Only {100 * compute_16bit_ratio:.1f}% of device computation is "
                          "16 bit; mixed precision may speed it up."))
    for allocator, frag in memory_frag:
        if frag >= 0.5:
            out.append(Advice("memory_fragmentation", "warning",
                              f"Allocator {allocator} was {100 * frag:.0f}% fragmented at "
                              "its peak."))
    return tuple(out)
