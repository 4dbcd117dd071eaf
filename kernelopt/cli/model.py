"""`kernelopt model`: a whole model as the unit of work (docs/model.md).

  profile MODEL.py    where the forward time goes, by submodule path, with Amdahl's bounds
  extract MODEL.py    the top hot spots as standalone KernelBench problems + manifest.json
  compose MODEL.py    replacements swapped in, judged end to end by the referee (optimized.py)
  optimize MODEL.py   the search on each hot spot (one budget, weighted by share), then compose

Exit codes as everywhere (errors.py): 0 done, 1 a run stopped on an error, 2 unusable input,
3 the sandbox failed.
"""

from __future__ import annotations

import json
from pathlib import Path

from kernelopt.cli.errors import EXIT_OK, UsageError
from kernelopt.cli.model_shared import add_profile_options, compose_and_report, composition_text_for, load_and_profile
from kernelopt.cli.model_shared import profiled_pass
from kernelopt.cli.options import add_judging_options, judging_options


def add_command(commands) -> None:
    p = commands.add_parser("model", help="profile a whole model, extract, optimize and compose its hot spots",
                            description="Work on a whole model in the KernelBench format (Model, get_inputs, "
                                        "get_init_inputs): find its hot spots, write them as problems, "
                                        "search for faster kernels and compose them back, judged end to end.")
    sub = p.add_subparsers(dest="model_command", required=True, metavar="SUBCOMMAND")

    prof = sub.add_parser("profile", help="where the forward time goes, by submodule",
                          description="Profile a few forwards (torch.profiler, single-threaded on a CPU like "
                                      "the referee's timed calls) and list the hot spots: submodule paths with "
                                      "their share of the forward time, calls, inputs seen and the end-to-end "
                                      "speedup if the spot took no time or ran 2x faster (Amdahl).")
    add_profile_options(prof)
    prof.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    prof.set_defaults(handler=run_profile)

    ext = sub.add_parser("extract", help="write the top hot spots as standalone problems",
                         description="Write each of the top N hot spots as a KernelBench-format problem "
                                     "(the model's code, `class Model(<the spot's class>)` with the "
                                     "constructor arguments the model used, get_inputs with the shapes seen) "
                                     "and DIR/manifest.json; spots that cannot be extracted are listed with "
                                     "the reason.")
    add_profile_options(ext)
    ext.add_argument("--top", type=int, default=3, metavar="N", help="how many hot spots (default 3)")
    ext.add_argument("--out", required=True, metavar="DIR", help="where the problems and manifest.json go")
    ext.add_argument("--json", action="store_true", help="print the manifest as one JSON object on stdout")
    ext.set_defaults(handler=run_extract)

    comp = sub.add_parser("compose", help="swap replacements into the model and judge it end to end",
                          description="Compose replacements (KernelBench candidates: a ModelNew built with the "
                                      "submodule's constructor arguments) into a ModelNew for the whole model, "
                                      "judge each alone against its extracted problem and the composition "
                                      "against MODEL.py; a replacement that breaks the model is dropped and "
                                      "the rest composed again.")
    add_profile_options(comp, device=False)
    comp.add_argument("--replace", required=True, action="append", metavar="PATH=CANDIDATE.py",
                      help="submodule path and its replacement (repeatable)")
    comp.add_argument("--out", required=True, metavar="OPTIMIZED.py", help="where the composed model goes")
    add_judging_options(comp)
    comp.add_argument("--json", action="store_true", help="print the report as one JSON object on stdout")
    comp.set_defaults(handler=run_compose)

    from kernelopt.cli.model_optimize import add_optimize_command

    add_optimize_command(sub)


def run_profile(args) -> int:
    from kernelopt.model.report import profile_text

    _, profile = load_and_profile(args)
    print(json.dumps(profile.to_json()) if args.json else profile_text(profile))
    return EXIT_OK


def run_extract(args) -> int:
    from kernelopt.model.extract import extract_spots, write_extracted

    if args.top < 1:
        raise UsageError(f"--top must be at least 1, not {args.top}")
    loaded, profile = load_and_profile(args)
    items = extract_spots(loaded, profile.spots, args.top, training_pass=profiled_pass(args, loaded.problem))
    manifest = write_extracted(items, Path(args.out), args.model_file, profile.to_json())
    if args.json:
        print(manifest.read_text(encoding="utf-8").strip().replace("\n", " "))
        return EXIT_OK
    for item in items:
        where = str(Path(args.out) / item.file) if item.file else f"not extracted: {item.reason}"
        print(f"{item.path:32s} {item.share:7.1%}  {where}")
    print(f"manifest: {manifest}")
    return EXIT_OK


def parse_replacements(values: list[str]) -> list[tuple[str, Path]]:
    pairs: list[tuple[str, Path]] = []
    for value in values:
        path, sep, file = value.partition("=")
        if not sep or not path or not file:
            raise UsageError(f"--replace {value!r}: give PATH=CANDIDATE.py (for example blocks.0.mlp=mlp.py)")
        if not Path(file).is_file():
            raise UsageError(f"--replace {value!r}: {file}: file not found")
        if path in (p for p, _ in pairs):
            raise UsageError(f"--replace: `{path}` is given twice")
        pairs.append((path, Path(file)))
    for a, _ in pairs:
        for b, _ in pairs:
            if a != b and b.startswith(a + "."):
                raise UsageError(f"--replace: `{b}` is inside `{a}`; replace one or the other")
    return pairs


def run_compose(args) -> int:
    from kernelopt.model.compose import replacement_for
    from kernelopt.model.loading import record_constructors
    from kernelopt.sandbox import EvalOptions

    pairs = parse_replacements(args.replace)
    loaded, profile = load_and_profile(args)
    constructors = record_constructors(loaded)
    try:
        options = EvalOptions(**judging_options(args))
        replacements = [replacement_for(loaded, constructors, path, file.read_text(encoding="utf-8"), str(file))
                        for path, file in pairs]
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    report = compose_and_report(loaded, profile, replacements, options, Path(args.out))
    print(json.dumps(report) if args.json else composition_text_for(report))
    return EXIT_OK
