"""What `kernelopt model` prints: the profile's table, and the report of a composition (per hot
spot: share, speedup alone, whether it survived; end to end against Amdahl's prediction)."""

from __future__ import annotations

from kernelopt.model.profiler import ModelProfile, combined_amdahl


def profile_text(profile: ModelProfile) -> str:
    lines = [f"{profile.model} on {profile.device}: {profile.forward_ms:.3f} ms per forward "
             f"({profile.unit}, {profile.forwards} forwards profiled)",
             f"{'hot spot':32s} {'module':16s} {'share':>7s} {'calls':>6s}  {'if free':>8s} {'if 2x':>7s}  inputs"]
    for s in profile.spots:
        free = f"{s.free_bound:7.3f}x" if s.free_bound is not None else "     inf"
        lines.append(f"{s.path:32s} {s.kind[:16]:16s} {s.share:7.1%} {s.calls:6g}  {free} "
                     f"{s.half_bound:6.3f}x  {inputs_text(s.inputs)}")
    other = max(0.0, 1.0 - sum(s.share for s in profile.spots) - profile.model_self)
    lines.append(f"{'(model: outside every submodule)':49s} {profile.model_self:7.1%}")
    if other > 0.0005:
        lines.append(f"{'(submodules own code, no spot)':49s} {other:7.1%}")
    return "\n".join(lines)


def inputs_text(inputs: list[dict]) -> str:
    parts = []
    for a in inputs:
        parts.append(f"{a['dtype']}[{','.join(map(str, a['shape']))}]" if "shape" in a else a["value"])
    return ", ".join(parts)


def composition_report(spots: list[dict], composition, model: str) -> dict:
    """spots: per hot spot {"module", "share", "speedup_alone" (None: no correct candidate),
    "alone": the verdict alone, "source": where its replacement came from}. The end-to-end speedup against the Amdahl
    prediction from the survivors' shares and speedups alone."""
    rows = []
    for spot in spots:
        path = spot["module"]
        survived = path in composition.kept
        rows.append({**spot, "composed": path in composition.kept or path in composition.dropped,
                     "survived": survived, "dropped_reason": composition.dropped.get(path)})
    parts = [(r["share"], r["speedup_alone"]) for r in rows if r["survived"] and r["speedup_alone"]]
    result = composition.result if composition.source else None
    interval = None
    if result is not None and result.speedup and result.timing and result.timing.speedup_precision is not None:
        p = result.timing.speedup_precision
        interval = [round(result.speedup * (1 - p), 4), round(result.speedup * (1 + p), 4)]
    return {"model": model, "spots": rows,
            "end_to_end": {"status": result.status if result is not None else "nothing composed",
                           "correct": bool(result is not None and result.correct),
                           "speedup": result.speedup if result is not None else None,
                           "interval": interval,
                           "message": result.message if result is not None else ""},
            "amdahl_prediction": round(combined_amdahl(parts), 4) if parts else None}


def composition_text(report: dict) -> str:
    lines = [f"{'hot spot':32s} {'share':>7s} {'alone':>8s}  in the composed model"]
    for r in report["spots"]:
        alone = f"{r['speedup_alone']:.3f}x" if r.get("speedup_alone") else (r.get("alone") or "-")[:24]
        share = f"{r['share']:.1%}" if r.get("share") is not None else "-"
        fate = "kept" if r["survived"] else (f"dropped ({r['dropped_reason']})" if r["dropped_reason"]
                                             else "not composed")
        lines.append(f"{r['module']:32s} {share:>7s} {alone:>8s}  {fate}")
    e = report["end_to_end"]
    if e["correct"]:
        interval = f" [{e['interval'][0]:.3f}, {e['interval'][1]:.3f}]" if e["interval"] else ""
        lines.append(f"end to end: correct, speedup {e['speedup']:.3f}x{interval}")
    else:
        lines.append(f"end to end: {e['status']}")
    if report["amdahl_prediction"]:
        lines.append(f"Amdahl's prediction from the kept spots' shares and speedups alone: "
                     f"{report['amdahl_prediction']:.3f}x")
    return "\n".join(lines)
