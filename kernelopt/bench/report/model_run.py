"""`kernelopt report` on a `kernelopt model optimize` run folder: its report.json (the composition
report `model optimize` writes: per hot spot its share, speedup alone and fate; the end-to-end
verdict; Amdahl's prediction) read as data and laid out as the page's "Hot spots" section.

The report reads the folder's files only: kernelopt/bench does not import kernelopt/model
(tests/test_layout.py), so the JSON fields read here are the interface between the two.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from kernelopt.bench.report.data import ReportError
from kernelopt.bench.report.tables import Table, format_speedup

SPOT_KEYS = ("module", "share", "speedup_alone", "survived")
FIX = "rerun `kernelopt model optimize ... --out {folder} --resume` to write it again"


def is_model_run(folder: Path) -> bool:
    """A `kernelopt model optimize --out` folder: plan.json beside report.json, no results.jsonl."""
    folder = Path(folder)
    return (folder / "plan.json").is_file() and (folder / "report.json").is_file() \
        and not (folder / "results.jsonl").is_file()


def load_model_run(folder: Path) -> dict:
    """The folder's composition report, checked, with the numbers the section shows added
    (`amdahl_free_bound`, `measured_over_predicted`); ReportError when it is damaged."""
    folder = Path(folder)
    path = folder / "report.json"
    fix = FIX.format(folder=folder)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ReportError(f"{path} is damaged ({exc}): {fix}") from None
    if not isinstance(data, dict) or not isinstance(data.get("spots"), list) \
            or not isinstance(data.get("end_to_end"), dict):
        raise ReportError(f"{path} is not a `kernelopt model optimize` report (no spots and end_to_end): {fix}")
    for index, spot in enumerate(data["spots"]):
        if not isinstance(spot, dict) or not set(SPOT_KEYS) <= spot.keys():
            raise ReportError(f"{path} is damaged (spots[{index}] lacks one of {', '.join(SPOT_KEYS)}): {fix}")
    kept = [s["share"] for s in data["spots"] if s["survived"] and isinstance(s["share"], (int, float))]
    free = 1.0 - sum(kept)
    e2e, predicted = data["end_to_end"], data.get("amdahl_prediction")
    measured = e2e.get("speedup") if e2e.get("correct") else None
    return {**data, "run": str(folder), "mode": "model",
            "amdahl_free_bound": (round(1.0 / free, 4) if free > 1e-9 else math.inf) if kept else None,
            "measured_over_predicted": round(measured / predicted, 4) if measured and predicted else None}


def model_headline(report: dict) -> str:
    e2e = report["end_to_end"]
    kept = sum(1 for s in report["spots"] if s["survived"])
    what = (f"end to end correct, {format_speedup(e2e['speedup'])}" if e2e.get("correct")
            else f"end to end: {e2e.get('status')}")
    predicted = report.get("amdahl_prediction")
    return (f"model {report.get('model', '?')}: {kept} of {len(report['spots'])} hot spot(s) kept, {what}"
            + (f" (Amdahl predicts {format_speedup(predicted)})" if predicted else ""))


def model_tables(report: dict) -> dict[str, Table]:
    runs = {r.get("module"): r for r in report.get("runs") or [] if isinstance(r, dict)}
    rows = []
    for spot in report["spots"]:
        run = runs.get(spot["module"], {})
        fate = ("kept" if spot["survived"] else f"dropped: {spot['dropped_reason']}" if spot.get("dropped_reason")
                else "not composed")
        rows.append([spot["module"], _share(spot["share"]), format_speedup(spot["speedup_alone"]),
                     str(spot.get("alone") or "-"), fate, str(run.get("run_id") or "-"),
                     str(run.get("llm_calls", "-"))])
    e2e = report["end_to_end"]
    interval = e2e.get("interval")
    end = [[e2e.get("status") or "-", format_speedup(e2e.get("speedup") if e2e.get("correct") else None),
            f"{format_speedup(interval[0])}-{format_speedup(interval[1])}" if interval else "-",
            format_speedup(report.get("amdahl_prediction")), _bound(report.get("amdahl_free_bound")),
            f"{report['measured_over_predicted']:.2f}" if report.get("measured_over_predicted") else "-"]]
    ratio = report.get("measured_over_predicted")
    differ = (" Here the two differ by more than a quarter: the shares moved between the profile and the "
              "referee's timing (a loaded host, the profile's own overhead), or a replacement behaves "
              "differently on the model's activations than on random inputs; the end-to-end verdict is the "
              "measure." if ratio and not 0.8 <= ratio <= 1.25 else "")
    skipped = [[n.get("module", "?"), n.get("reason", "?")] for n in report.get("not_extracted") or []]
    result = {
        "model spots": Table("Hot spots", ["module", "share", "best alone", "verdict alone", "in the composed model",
                                           "run", "LLM calls"], rows,
                             "Each hot spot's share of the model's forward time (the profile), the best "
                             "speedup found for it alone (against its extracted problem), and whether its "
                             "replacement survived composition (a replacement that breaks the model end to "
                             "end is dropped, with the referee's reason).", key="model-spots"),
        "model end to end": Table("End to end against Amdahl", ["verdict", "speedup", "95% interval",
                                                               "Amdahl prediction", "bound if the kept spots were free",
                                                               "measured / predicted"], end,
                                  "The composed model judged against the model itself. Amdahl's prediction "
                                  "from the kept spots' shares and speedups alone: 1 / (1 - sum(share) + "
                                  "sum(share / speedup)); the bound: 1 / (1 - sum(share))." + differ,
                                  key="model-end-to-end")}
    if skipped:
        result["model not extracted"] = Table("Not extracted", ["module", "reason"], skipped,
                                              "Hot spots that could not be written as standalone problems.",
                                              key="model-not-extracted")
    return result


def _share(value) -> str:
    return f"{value:.1%}" if isinstance(value, (int, float)) else "-"


def _bound(value) -> str:
    return "inf" if value == math.inf else format_speedup(value)
