"""`kernelopt cache info|clear`: the extension build cache (see kernelopt/sandbox/builds.py)."""

from __future__ import annotations

import json

from kernelopt.cli.errors import EXIT_OK, EnvironmentFailure, UsageError


def add_command(commands) -> None:
    p = commands.add_parser(
        "cache", help="show or clear the extension build cache",
        description="Candidates' load_inline/load builds are cached by content (sources, flags, "
                    "toolchain), shared by all evaluations on this machine. Location: --dir, else "
                    "$KERNELOPT_BUILD_CACHE, else ~/.cache/kernelopt/builds; size bound: "
                    "$KERNELOPT_BUILD_CACHE_MAX (default 20G), least recently used evicted first.")
    actions = p.add_subparsers(dest="action", required=True)
    for name, text in (("info", "entries, size and location"), ("clear", "remove every entry"),
                       ("warm", "precompile torch/extension.h (about 0.8 GB per flag set) and, with "
                                "the CUDA build of torch, the host prefix of CUDA sources (about "
                                "0.45 GB per flag set); speeds up every later cold build")):
        action = actions.add_parser(name, help=text)
        action.add_argument("--dir", default=None, help="cache directory (default as above)")
        action.add_argument("--json", action="store_true", help="print one JSON object")
        action.set_defaults(handler=run_cache)
        if name == "warm":
            action.add_argument("--cflag", action="append", default=None, metavar="FLAG",
                                help="an extra_cflags value the candidates use, e.g. --cflag=-O3; "
                                     "repeat for several (default: none, and -O3 as a second set)")
            action.add_argument("--cuda-cflag", action="append", default=None, metavar="FLAG",
                                help="an extra_cuda_cflags value the candidates use, e.g. "
                                     "--cuda-cflag=-O3; repeat for several (default: none, -O3, "
                                     "and -O3 --use_fast_math as the other sets)")
            action.add_argument("--skip-cuda", action="store_true",
                                help="only what C++ (CPU) extensions use, even with the CUDA build of torch")
            action.add_argument("--isolation", choices=["auto", "bubblewrap", "unshare", "none"],
                                default="auto", help="sandbox of the builder (default auto)")


def run_cache(args) -> int:
    from kernelopt.sandbox.builds import BuildCache

    try:
        cache = BuildCache(args.dir)
    except (OSError, ValueError) as exc:
        raise UsageError(f"build cache: {exc}") from exc
    if args.action == "warm":
        report = warm(cache, args)
        text = "\n".join([f"precompiled torch/extension.h for extra_cflags {h['extra_cflags']}"
                          f"{' (with CUDA)' if h['with_cuda'] else ''}: {h['path']}" for h in report["headers"]]
                         + [f"precompiled the CUDA host prefix for extra_cuda_cflags {h['extra_cuda_cflags']}: "
                            f"{h['path']}" for h in report["cuda_headers"]]
                         + [f"skipped the CUDA host prefix: {report['cuda_skipped']}"] * bool(report["cuda_skipped"]))
    elif args.action == "clear":
        report = {"root": str(cache.root), "removed": cache.clear()}
        text = f"removed {report['removed']} entries from {report['root']}"
    else:
        report = cache.info()
        text = (f"build cache {report['root']}\n{report['entries']} entries "
                f"({report['failed_builds']} failed builds), {report['bytes'] / 2**20:.1f} MiB "
                f"of {report['max_bytes'] / 2**30:.1f} GiB")
    print(json.dumps(report) if args.json else text)
    return EXIT_OK


def warm(cache, args) -> dict:
    import torch

    from kernelopt.cli.console import ConsoleProgress
    from kernelopt.sandbox import isolation
    from kernelopt.sandbox.builds import BuildFailure, BuildService

    try:
        service = BuildService(cache, isolation.select_backend(args.isolation))
    except isolation.IsolationError as exc:
        raise UsageError(str(exc)) from exc
    # Builds target the device's architecture (kernelopt.sandbox.builds.target_architectures),
    # and so must what is precompiled for them.
    device = "cuda" if torch.cuda.is_available() else "cpu"
    skipped = "--skip-cuda" if args.skip_cuda else cuda_build_missing()
    variants = [False] if skipped else [False, True]  # C++ flags without and with the CUDA headers
    header_sets = [(flags, with_cuda) for flags in ([args.cflag] if args.cflag else [[], ["-O3"]])
                   for with_cuda in variants]
    cuda_sets = [] if skipped else [args.cuda_cflag] if args.cuda_cflag else [[], ["-O3"], ["-O3", "--use_fast_math"]]
    total = len(header_sets) + len(cuda_sets)
    headers, cuda_headers = [], []
    with ConsoleProgress("precompiling") as report:
        report.update(0, total)
        for flags, with_cuda in header_sets:
            try:
                path = service.warm(flags, device, with_cuda=with_cuda)
            except BuildFailure as exc:
                raise EnvironmentFailure(f"precompiling torch/extension.h failed: {exc}") from exc
            headers.append({"extra_cflags": flags, "with_cuda": with_cuda, "path": str(path)})
            report.update(len(headers), total)
        for flags in cuda_sets:
            try:
                cuda_headers.append({"extra_cuda_cflags": flags, "path": str(service.warm_cuda(flags, device))})
            except BuildFailure as exc:
                raise EnvironmentFailure(f"precompiling the CUDA host prefix failed: {exc}") from exc
            report.update(len(headers) + len(cuda_headers), total)
    return {"root": str(cache.root), "headers": headers, "cuda_headers": cuda_headers, "cuda_skipped": skipped}


def cuda_build_missing() -> str:
    """Why CUDA sources cannot be built here ('' when they can)."""
    import torch

    from kernelopt.sandbox import isolation

    if torch.version.cuda is None:
        return "the installed torch is a CPU build"
    return "" if isolation.detect_cuda_home() else "no CUDA toolkit (nvcc) found"
