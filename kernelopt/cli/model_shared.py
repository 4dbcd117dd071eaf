"""What the `kernelopt model` subcommands share: the model file and its profile from the command
line, and a composition judged and reported (compose and optimize)."""

from __future__ import annotations

import sys
from pathlib import Path

from kernelopt.cli.errors import EnvironmentFailure, UsageError


def add_profile_options(p, device: bool = True) -> None:
    """MODEL.py and the profile's options; `device`: add --device (commands that judge take it
    from the referee's options instead, and profile on the device they judge on)."""
    p.add_argument("model_file", metavar="MODEL.py", help="the model, in the KernelBench format")
    if device:
        p.add_argument("--device", default="cpu", metavar="D",
                       help="device to profile on: cpu, cuda, cuda:N (default cpu)")
    p.add_argument("--forwards", type=int, default=10, metavar="N",
                   help="forwards profiled; the fastest one is attributed (default 10)")
    p.add_argument("--split", type=float, default=0.35, metavar="SHARE",
                   help="a spot holding more than this share of the time is split into its submodules "
                        "(default 0.35)")
    if device:  # commands that judge take --pass with the referee's options
        p.add_argument("--pass", dest="training_pass", choices=("auto", "forward", "backward", "both"),
                       default="auto", help="profile the forward, or training steps (forward and backward: "
                                            "backward ops count for the module whose forward made them); "
                                            "extracted problems then ask for the same pass; auto: the model "
                                            "file's PASS, else forward (docs/training.md)")


def load_and_profile(args):
    from kernelopt.kernelbench import ProblemError
    from kernelopt.model.loading import load_model
    from kernelopt.model.profiler import profile_model

    if args.forwards < 1:
        raise UsageError(f"--forwards must be at least 1, not {args.forwards}")
    if not 0 < args.split <= 1:
        raise UsageError(f"--split must be in (0, 1], not {args.split}")
    device = args.device
    if device == "auto":
        from kernelopt.sandbox.device import resolve_device

        device = resolve_device(device)
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise UsageError(f"--device {device}: no CUDA device is available")
    elif device != "cpu":
        raise UsageError(f"--device must be cpu, cuda or cuda:N, not {device!r}")
    try:
        loaded = load_model(args.model_file, device=device)
        return loaded, profile_model(loaded, device=device, forwards=args.forwards, split=args.split,
                                     training=profiled_pass(args, loaded.problem) != "forward")
    except ProblemError as exc:
        raise UsageError(str(exc)) from exc


def profiled_pass(args, problem) -> str:
    """The pass a model command profiles and extracts for: --pass, or the model file's PASS."""
    from kernelopt.kernelbench.training import effective_pass

    option = getattr(args, "training_pass", None) or "auto"
    return effective_pass(option, problem.training_pass)


def compose_and_report(loaded, profile, replacements, options, out: Path, alone: dict | None = None) -> dict:
    """Each replacement judged alone against its extracted problem (unless `alone` gives its
    speedup), the composition judged end to end; optimized.py written when it is correct."""
    from kernelopt.kernelbench import ProblemError
    from kernelopt.model.compose import compose_and_verify
    from kernelopt.model.report import composition_report
    from kernelopt.sandbox.isolation import IsolationError
    from kernelopt.sandbox.process import SandboxError

    alone = dict(alone or {})   # path -> (speedup or None, what the verdict alone was)
    try:
        for r in replacements:
            if r.path not in alone:
                alone[r.path] = speedup_alone(loaded, profile, r, options)
        composition = compose_and_verify(loaded.problem, replacements, options, on_verdict=progress_line)
    except (ProblemError, IsolationError) as exc:
        raise UsageError(str(exc)) from exc
    except SandboxError as exc:
        raise EnvironmentFailure(str(exc)) from exc
    spots = [{"module": r.path, "share": profile.modules.get(r.path), "speedup_alone": alone[r.path][0],
              "alone": alone[r.path][1], "source": r.label} for r in replacements]
    report = composition_report(spots, composition, loaded.problem.name)
    if composition.source:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(composition.source, encoding="utf-8")
        report["optimized"] = str(out)
    else:
        report["optimized"] = None
    return report


def speedup_alone(loaded, profile, replacement, options) -> tuple[float | None, str]:
    """The replacement's speedup against its hot spot as a standalone problem (None: not
    correct alone, or the spot cannot be extracted), and the verdict's status or why none."""
    from kernelopt.kernelbench import problem_from_source
    from kernelopt.model.extract import NotExtractable, problem_source
    from kernelopt.model.loading import record_constructors
    from kernelopt.sandbox import evaluate

    spot = profile.every.get(replacement.path)
    if spot is None:
        progress_line(replacement.path, None, "not called in the profiled forwards")
        return None, "not called in the profiled forwards"
    try:
        source, *_ = problem_source(loaded, spot, record_constructors(loaded).get(replacement.path))
    except NotExtractable as exc:
        progress_line(replacement.path, None, f"cannot be judged alone: {exc}")
        return None, f"not judged alone: {exc}"
    result = evaluate(problem_from_source(source, path=f"{replacement.path}.py"), replacement.source, options)
    progress_line(f"{replacement.path} alone", result)
    return (result.speedup if result.correct else None), str(result.status)


def progress_line(what: str, result, note: str = "") -> None:
    if result is None:
        print(f"{what}: {note}", file=sys.stderr, flush=True)
        return
    verdict = f"correct, {result.speedup:.3f}x" if result.correct else f"{result.status}: " + \
        ((result.message or "").strip().splitlines() or [""])[0][:160]
    print(f"{'composed (' + what + ')' if ' ' not in what else what}: {verdict}", file=sys.stderr, flush=True)


def composition_text_for(report: dict) -> str:
    from kernelopt.model.report import composition_text

    text = composition_text(report)
    return text + (f"\ncomposed model: {report['optimized']}" if report.get("optimized") else "")
