"""`kernelopt report RUN`: report.html, report.json and report.md for a bench run folder (see
kernelopt/bench/report/)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kernelopt.cli.errors import EXIT_OK, UsageError


def add_command(commands) -> None:
    p = commands.add_parser(
        "report", help="HTML, JSON and Markdown report of a kernelopt bench run",
        description="Write report.html (one self-contained page: metrics tables, speedup per problem, best "
                    "speedup against LLM calls, the fast_p curve, the speedup distribution, optimization kinds, "
                    "problem health, every problem), report.json and report.md for a bench run folder (the "
                    "--out of kernelopt bench, holding results.jsonl and summary.json). For a kernelopt model "
                    "optimize --out folder: its hot spots (share, best speedup alone, kept or dropped) and the "
                    "end-to-end speedup against Amdahl's prediction, from its report.json.")
    p.add_argument("run", metavar="RUN", help="a kernelopt bench --out folder, or a kernelopt model optimize --out folder")
    p.add_argument("--out", default=None, metavar="DIR", help="write the report here (default: RUN)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    p.set_defaults(handler=run_report)


def run_report(args) -> int:
    from kernelopt.bench.report import ReportError, headline, write_report

    try:
        written = write_report(Path(args.run), Path(args.out) if args.out else None)
    except ReportError as exc:
        raise UsageError(str(exc)) from exc
    report = written["report"]
    if report.get("mode") == "model":
        return model_report_printed(args, written)
    overall = report["summary"]["overall"]
    if args.json:
        print(json.dumps({"files": written["files"], "mode": report["mode"], "overall": overall,
                          "levels": report["summary"]["levels"], "skipped_lines": report["skipped_lines"]}))
        return EXIT_OK
    for kind, path in written["files"].items():
        print(f"{kind:>4}: {path}")
    print(headline(report))
    if report["skipped_lines"]:
        print(f"{report['skipped_lines']} damaged line(s) of results.jsonl left out", file=sys.stderr)
    return EXIT_OK


def model_report_printed(args, written: dict) -> int:
    from kernelopt.bench.report import model_headline

    report = written["report"]
    if args.json:
        print(json.dumps({"files": written["files"], "mode": "model", "end_to_end": report["end_to_end"],
                          "amdahl_prediction": report.get("amdahl_prediction"),
                          "amdahl_free_bound": report.get("amdahl_free_bound"),
                          "spots": [{k: s.get(k) for k in ("module", "share", "speedup_alone", "survived")}
                                    for s in report["spots"]]}))
        return EXIT_OK
    for kind, path in written["files"].items():
        print(f"{kind:>4}: {path}")
    print(model_headline(report))
    return EXIT_OK
