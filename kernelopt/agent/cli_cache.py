"""`kernelopt cache info|clear`: the extension build cache (see kernelopt/sandbox/builds.py)."""

from __future__ import annotations

import json

from kernelopt.agent.cli import EXIT_OK, UsageError


def add_cache_command(commands) -> None:
    p = commands.add_parser(
        "cache", help="show or clear the extension build cache",
        description="Candidates' load_inline/load builds are cached by content (sources, flags, "
                    "toolchain), shared by all evaluations on this machine. Location: --dir, else "
                    "$KERNELOPT_BUILD_CACHE, else ~/.cache/kernelopt/builds; size bound: "
                    "$KERNELOPT_BUILD_CACHE_MAX (default 20G), least recently used evicted first.")
    actions = p.add_subparsers(dest="action", required=True)
    for name, text in (("info", "entries, size and location"), ("clear", "remove every entry"),
                       ("warm", "precompile torch/extension.h for extension builds (about 0.8 GB "
                                "per flag set; speeds up every later cold build)")):
        action = actions.add_parser(name, help=text)
        action.add_argument("--dir", default=None, help="cache directory (default as above)")
        action.add_argument("--json", action="store_true", help="print one JSON object")
        action.set_defaults(handler=run_cache)
        if name == "warm":
            action.add_argument("--cflag", action="append", default=None, metavar="FLAG",
                                help="an extra_cflags value the candidates use, e.g. --cflag=-O3; "
                                     "repeat for several (default: none, and -O3 as a second set)")
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
        text = "\n".join(f"precompiled torch/extension.h for extra_cflags {h['extra_cflags']}: {h['path']}"
                         for h in report["headers"])
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
    from kernelopt.agent.cli import EnvironmentFailure
    from kernelopt.sandbox import isolation
    from kernelopt.sandbox.builds import BuildFailure, BuildService

    try:
        service = BuildService(cache, isolation.select_backend(args.isolation))
    except isolation.IsolationError as exc:
        raise UsageError(str(exc)) from exc
    flag_sets = [args.cflag] if args.cflag else [[], ["-O3"]]
    headers = []
    for flags in flag_sets:
        try:
            headers.append({"extra_cflags": flags, "path": str(service.warm(flags))})
        except BuildFailure as exc:
            raise EnvironmentFailure(f"precompiling torch/extension.h failed: {exc}") from exc
    return {"root": str(cache.root), "headers": headers}
