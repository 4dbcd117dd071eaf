"""Wording that several commands share: counts, one-line excerpts, a run's summary, progress
lines on stderr."""

from __future__ import annotations

import sys

from kernelopt.agent.store import describe_cost


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def first_line(text: str, limit: int = 120) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:limit] + ("..." if len(line) > limit else "")


def speedup_with_interval(speedup: float, precision: float | None) -> str:
    """`7.546x +-8.8%` (the 95 % interval's relative half-width), or `7.546x` where none is known."""
    return f"{speedup:.3f}x" + (f" +-{100 * precision:.1f}%" if precision is not None else "")


def progress(line: str) -> None:
    """A progress line on stderr, at once (stdout is kept for the result)."""
    print(line, file=sys.stderr, flush=True)


def summary_text(summary: dict) -> str:
    """An optimization run's summary (optimize's result, runs show)."""
    best = summary["best"]
    lines = [f"run {summary['run_id']} {summary['status']}: {summary['stop_reason']}"]
    if best:
        lines.append(f"best: attempt {best['attempt']}, speedup {speedup_with_interval(best['speedup'], best.get('speedup_precision'))} "
                     f"({', '.join(best['optimization_kinds']) or 'kind unknown'}) -> {best['path']}")
    else:
        lines.append("best: no correct candidate")
    tokens = summary["tokens"]["prompt"] + summary["tokens"]["completion"]
    lines.append(f"{summary['llm_calls']} LLM calls ({summary['llm_calls_failed']} failed), "
                 f"{summary['candidates']} candidates, {summary['evaluations']} evaluations, "
                 f"{tokens} tokens, {describe_cost(summary['cost'])}, {summary['wall_s']:.0f} s")
    lines.append(f"details: kernelopt runs show {summary['run_id']} --store {summary['store']}")
    return "\n".join(lines)
