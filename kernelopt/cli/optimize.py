"""`kernelopt optimize`: the search for a faster kernel, from the command line.

Exit codes: 0 when the run finished (whether or not it found a correct candidate: see `best`),
1 when it started but stopped on an error (it can be resumed), 2 for unusable input or an
unusable endpoint (nothing was started), 3 when the sandbox cannot run, 130 on Ctrl-C (resumable).
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from kernelopt.cli.agent_setup import (
    add_output_flags,
    add_search_options,
    apply_overrides,
    checked_run,
    configured_endpoint,
    missing_endpoint,
    new_config,
    stored_run,
    usage_errors,
)
from kernelopt.cli.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_RUN_FAILED, EnvironmentFailure, UsageError, failed
from kernelopt.cli.text import first_line, speedup_with_interval, summary_text


def add_command(commands) -> None:
    p = commands.add_parser(
        "optimize", help="search for a faster kernel with an LLM",
        description="Ask an LLM for ModelNew candidates for PROBLEM.py, judge each with the referee, "
                    "and feed the verdicts back, within a budget. Every call, candidate and verdict "
                    "is stored; a killed run continues with --resume RUN_ID.")
    p.add_argument("problem", nargs="?", metavar="PROBLEM.py", help="KernelBench-format problem file")
    out = add_search_options(p, "budget (the search stops at the first one spent)")
    out.add_argument("--out", default=None, metavar="DIR", help="where best.py and summary.json go (default: next to the store, in RUN_ID/)")
    out.add_argument("--resume", default=None, metavar="RUN_ID", help="continue a run (its settings come from the store)")
    add_output_flags(out, "print exactly one JSON object (the summary) on stdout")
    p.set_defaults(handler=run_optimize)


def run_optimize(args) -> int:
    from kernelopt.agent.search import SearchRun, run_search, start_run
    from kernelopt.agent.store import RunStore
    from kernelopt.kernelbench import load_problem
    from kernelopt.sandbox.process import SandboxError

    with usage_errors():
        store = RunStore.open(args.store)
        if args.resume:
            _, config, problem = stored_run(store, args.resume)
            apply_overrides(config, args, resuming=True)
            run_id = args.resume
        else:
            if not args.problem:
                raise UsageError("give a problem file (PROBLEM.py) or --resume RUN_ID")
            problem = load_problem(args.problem)
            base_url = configured_endpoint(args)
            if base_url is None:
                return explain_missing_endpoint(args)
            config = new_config(args, base_url, str(args.problem), args.strategy)
        device, client, api_key = checked_run(config, new=not args.resume)

    if not args.resume:
        run_id = start_run(store, config, problem)
    out_dir = Path(args.out) if args.out else store.path.parent / run_id
    if not args.quiet:
        verb = "resuming" if args.resume else "run"
        print(f"{verb} {run_id}: {problem.name} with {config.model} ({config.strategy}) on {device}; "
              f"store {store.path}", file=sys.stderr)
    printer = ProgressPrinter(config, enabled=not args.quiet)
    try:
        run = SearchRun(store=store, run_id=run_id, config=config, problem=problem, device=device, client=client,
                        api_key=api_key)
        outcome = run_search(run, out_dir, on_event=printer)
    except SandboxError as exc:
        raise EnvironmentFailure(str(exc)) from exc
    except KeyboardInterrupt:
        resume = f"kernelopt optimize --resume {run_id} --store {shlex.quote(str(store.path))}"
        return failed(args, "interrupted", f"interrupted: run {run_id} is saved with what was judged; "
                      f"resume it with\n  {resume}", f"interrupted; resume with: {resume}", EXIT_INTERRUPTED)
    outcome.summary.write(out_dir / "summary.json")
    summary = outcome.summary.to_json()
    if args.json:
        print(json.dumps(summary))
    else:
        print(summary_text(summary))
    return EXIT_OK if outcome.summary.status == "finished" else EXIT_RUN_FAILED


class ProgressPrinter:
    """One line per finished attempt on stderr: what it was, and the best so far."""

    def __init__(self, config, enabled: bool):
        self.enabled = enabled
        self.budget = config.limits.get("llm_calls")
        self.best: float | None = None  # the leader's speedup (the leader: the highest rank, selection.py)
        self.best_rank: float | None = None

    def __call__(self, kind: str, attempt) -> None:
        if attempt.correct and (self.best_rank is None or attempt.rank > self.best_rank):
            self.best, self.best_rank = attempt.score, attempt.rank
        if not self.enabled:
            return
        of = f"/{self.budget}" if self.budget else ""
        best = f"{self.best:.3f}x" if self.best is not None else "-"
        if attempt.correct:
            precision = attempt.result.timing.speedup_precision if attempt.result and attempt.result.timing else None
            what = f"correct, speedup {speedup_with_interval(attempt.score, precision)}"
        else:
            detail = attempt.format_error or attempt.llm_error or attempt.eval_error or \
                (attempt.result.message if attempt.result else "")
            what = attempt.status + (f": {first_line(detail)}" if detail else "")
        dup = " (duplicate, judged once)" if attempt.duplicate else ""
        replayed = _REPLAYED.get(attempt.answer_source or "", "")
        print(f"[attempt {attempt.index}{of} | best {best}] {what}{dup}{replayed}", file=sys.stderr, flush=True)


_REPLAYED = {"cache": " (answer reused from an earlier run: --reuse-answers)",
             "run": " (answer replayed: the run is resumed)"}


def explain_missing_endpoint(args) -> int:
    """No endpoint: say how to configure one, and show the referee on bundled candidates."""
    status = missing_endpoint(f"optimize {args.problem}", args.json)
    candidates = bundled_candidates(args.problem)
    if candidates and not args.json:
        demo_referee(args, candidates)
    return status


def bundled_candidates(problem_path: str) -> list[Path]:
    """Candidates shipped for a bundled example: examples/candidates/<problem stem>/*.py."""
    path = Path(problem_path).resolve()
    folder = path.parent.parent / "candidates" / path.stem
    return sorted(folder.glob("*.py")) if folder.is_dir() else []


DEMO_TIMING_BUDGET_S = 1.0  # a demo: each speedup's interval says how little a second of timing knows


def demo_referee(args, candidates: list[Path]) -> None:
    """The bundled candidates judged as one batch (the reference's worker stays warm, the next
    candidate loads while one is timed), each verdict printed as it is reached."""
    from kernelopt.kernelbench import load_problem
    from kernelopt.sandbox import EvalOptions, Evaluator

    problem = load_problem(args.problem)
    print(f"Meanwhile, the referee judging the candidates bundled with {args.problem} "
          "(no LLM involved):", file=sys.stderr)
    options = EvalOptions(device=args.device, timing_budget=args.timing_budget or DEMO_TIMING_BUDGET_S)
    sources = [path.read_text(encoding="utf-8") for path in candidates]
    with Evaluator(problem, options, jobs=2, keep_spare=False) as evaluator:
        for index, result in evaluator.evaluate_many(sources):
            precision = result.timing.speedup_precision if result.timing else None
            verdict = (f"{result.status}, speedup {speedup_with_interval(result.speedup, precision)}"
                       if result.correct and result.speedup is not None else result.status)
            print(f"  {candidates[index].name:28s} {verdict}: {first_line(result.message, 160)}", file=sys.stderr,
                  flush=True)
