"""Which problems and devices a command over a problem set runs on, from its options
(options.add_problem_set_options, options.add_gpus_option)."""

from __future__ import annotations

from kernelopt.cli.errors import UsageError


def problem_set_from(args):
    """The selected problem set (args.kernelbench, args.level, args.problems: the ids); raises
    ProblemSetError saying what is wrong."""
    from kernelopt.kernelbench import load_problem_set, parse_id_ranges

    return load_problem_set(args.kernelbench, levels=parse_id_ranges(args.level) if args.level else None,
                            ids=parse_id_ranges(args.problems) if args.problems else None)


def devices_from(args) -> list[str]:
    """The devices problems run on: each --gpus id as cuda:N, else the one --device."""
    import torch

    from kernelopt.kernelbench import ProblemSetError, parse_id_ranges
    from kernelopt.sandbox.device import resolve_device

    if not args.gpus:
        return [resolve_device(args.device)]
    if not torch.cuda.is_available():
        raise UsageError(f"--gpus needs CUDA, and torch {torch.__version__} sees no GPU here: leave --gpus out "
                         "to run on one device (--device cpu), or see `kernelopt doctor`")
    if args.device != "auto":
        raise UsageError("give --gpus or --device, not both (--gpus runs every problem on a GPU of its list)")
    count = torch.cuda.device_count()
    if args.gpus.strip() == "all":
        return [f"cuda:{index}" for index in range(count)]
    try:
        indices = sorted(parse_id_ranges(args.gpus))
    except ProblemSetError as exc:
        raise UsageError(f"--gpus {args.gpus!r}: give GPU ids like 0,1 or 0-3, or all") from exc
    missing = [i for i in indices if i >= count]
    if missing:
        raise UsageError(f"--gpus {args.gpus}: no GPU {missing[0]} here ({count} visible: 0-{count - 1})")
    return [f"cuda:{index}" for index in indices]
