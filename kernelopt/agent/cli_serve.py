"""`kernelopt serve`: the reward service for RL trainers (kernelopt/rewards/service.py,
docs/serve.md). Checks everything it can before listening (device, sandbox backend, reward
spec, problem set, port), prints the URL on stderr and serves until Ctrl-C or SIGTERM, then
answers the requests it accepted before it exits."""

from __future__ import annotations

import signal
import sys
import threading

from kernelopt.agent.cli import EXIT_OK, UsageError, parse_size

DEFAULT_PORT = 8321


def add_serve_command(commands) -> None:
    p = commands.add_parser(
        "serve", help="serve verdicts and rewards over HTTP for RL trainers (verl, TRL, OpenRLHF)",
        description="Judge LLM completions against reference programs over a JSON HTTP API: POST "
                    "/v1/evaluate, the OpenRLHF remote reward endpoint POST /v1/openrlhf, GET /healthz, "
                    "GET /metrics. Concurrent requests for one problem share a warm evaluator. See docs/serve.md.")
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help=f"TCP port (default {DEFAULT_PORT}; 0 picks a free one and prints it)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1, this machine only; the API has no "
                        "authentication, so expose it only on a trusted network)")
    problems = p.add_argument_group("problems that requests may name by id")
    problems.add_argument("--kernelbench", default=None, metavar="SET",
                          help="a KernelBench checkout, a folder of problem files, a .parquet file or folder, or a "
                               "dataset id in the local HF cache (default: none; requests send reference sources)")
    problems.add_argument("--level", default=None, help="levels to include, e.g. 1 or 1,2 (default: all)")
    problems.add_argument("--problems", default=None, metavar="IDS", help="problem ids, e.g. 1,3,5-9 (default: all)")
    service = p.add_argument_group("service")
    service.add_argument("--reward", default="speedup", metavar="SPEC",
                         help="default reward, e.g. speedup, log_speedup:clip=2, cuda_l1:k=3 (default speedup; "
                              "a request may name its own; see docs/rewards.md)")
    service.add_argument("--jobs", type=int, default=2, metavar="N",
                         help="candidates of one problem in flight: one judged, the others starting and "
                              "compiling (default 2)")
    service.add_argument("--concurrency", type=int, default=1, metavar="N",
                         help="problems evaluated at once (default 1: problems timed together on one device "
                              "disturb each other's timings)")
    service.add_argument("--queue-size", type=int, default=64, metavar="N",
                         help="requests that may wait; beyond, requests are refused with 429 (default 64)")
    service.add_argument("--request-timeout", type=float, default=900.0, metavar="S",
                         help="seconds a request may wait for its verdict, queue included; then 504 (default 900)")
    service.add_argument("--cache-size", type=int, default=4, metavar="N",
                         help="warm evaluators kept, one per problem and option set (default 4)")
    service.add_argument("--max-body", type=parse_size, default=16 << 20, metavar="SIZE",
                         help="largest request body (default 16M)")
    service.add_argument("--quiet", action="store_true", help="no line on stderr per request")
    evaluation = p.add_argument_group("evaluation (as for kernelopt eval)")
    evaluation.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N")
    evaluation.add_argument("--timeout", type=float, default=300.0, help="seconds per evaluation (default 300)")
    evaluation.add_argument("--memory-limit", type=parse_size, default=None, metavar="SIZE",
                            help="resident memory per worker, e.g. 8G (default: half of RAM)")
    evaluation.add_argument("--correctness-trials", type=int, default=5, metavar="N", help="input sets (default 5)")
    evaluation.add_argument("--atol", type=float, default=1e-2, help="absolute tolerance (default 1e-2)")
    evaluation.add_argument("--rtol", type=float, default=1e-2, help="relative tolerance (default 1e-2)")
    evaluation.add_argument("--precision-policy", choices=["flag", "reject"], default="flag",
                            help="reduced-precision arithmetic: flag it (default) or reject the candidate")
    evaluation.add_argument("--timing-budget", type=float, default=10.0, metavar="S",
                            help="seconds of timing at most (default 10)")
    evaluation.add_argument("--isolation", "--sandbox", dest="isolation", default="auto",
                            choices=["auto", "bubblewrap", "unshare", "none", "docker"], help="sandbox backend")
    evaluation.add_argument("--image", default="kernelopt-sandbox", help="the docker backend's image")
    evaluation.add_argument("--build-mode", choices=["fast", "exact", "stock", "off"], default="fast",
                            help="how load_inline/load extensions are built (default fast, see docs/builds.md)")
    evaluation.add_argument("--build-cache", default=None, metavar="DIR", help="build cache directory")
    p.set_defaults(handler=run_serve)


def run_serve(args) -> int:
    service = make_service(args)
    server = listen(service, args)
    print(f"kernelopt serve: listening on {server.url} (device {service.options.device}, "
          f"{len(service.catalog)} problems, reward {service.default_reward.spec}); Ctrl-C stops",
          file=sys.stderr, flush=True)
    # SIGTERM stops like Ctrl-C. shutdown() waits for serve_forever, which runs in this thread,
    # so it is called from another one.
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    print("kernelopt serve: stopping; answering the requests already accepted (Ctrl-C again abandons them)",
          file=sys.stderr, flush=True)
    server.stop()
    return EXIT_OK


def make_service(args):
    """The RewardService the arguments describe; UsageError for anything unusable."""
    from kernelopt.agent.cli_bench import problem_set_from
    from kernelopt.kernelbench import ProblemSetError
    from kernelopt.rewards import RewardError
    from kernelopt.rewards.service import RewardService
    from kernelopt.sandbox import EvalOptions
    from kernelopt.sandbox.isolation import IsolationError, select_backend

    for name in ("jobs", "concurrency", "queue_size", "cache_size"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1, not {getattr(args, name)}")
    if not args.request_timeout > 0:
        raise UsageError(f"--request-timeout must be positive, not {args.request_timeout}")
    try:
        problems = problem_set_from(args) if args.kernelbench else ()
        options = EvalOptions(device=args.device, timeout=args.timeout, memory_limit=args.memory_limit,
                              correctness_trials=args.correctness_trials, atol=args.atol, rtol=args.rtol,
                              precision_policy=args.precision_policy, timing_budget=args.timing_budget,
                              isolation=args.isolation, image=args.image, build_mode=args.build_mode,
                              build_cache=args.build_cache)
        select_backend(options.isolation, options.image)  # fail now, not at the first request
        return RewardService(problems, options, reward=args.reward, jobs=args.jobs, queue_size=args.queue_size,
                             concurrency=args.concurrency, request_timeout=args.request_timeout,
                             cache_size=args.cache_size)
    except (ProblemSetError, RewardError, IsolationError) as exc:
        raise UsageError(str(exc)) from exc
    except ValueError as exc:  # pydantic's ValidationError and unusable devices
        raise UsageError(f"invalid option: {exc}") from exc


def listen(service, args):
    from kernelopt.rewards.service import RewardServer

    try:
        return RewardServer(service, args.host, args.port, max_body=args.max_body, log_requests=not args.quiet)
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc} (choose another "
                         "--port, or --port 0 for a free one)") from exc
