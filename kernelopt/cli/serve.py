"""`kernelopt serve`: the reward service for RL trainers (kernelopt/rewards/service/,
docs/serve.md). Checks everything it can before listening (device, sandbox backend, reward
spec, problem set, port), prints the URL on stderr and serves until Ctrl-C or SIGTERM, then
answers the requests it accepted before it exits. With `--ray [ADDRESS]` the lanes judge on a
Ray cluster's actors (kernelopt/cluster), one problem at a time per actor."""

from __future__ import annotations

import os
import signal
import sys
import threading

from kernelopt.cli.cluster import add_ray_options, ray_pool
from kernelopt.cli.errors import EXIT_OK, UsageError
from kernelopt.cli.options import add_judging_options, add_problem_set_options, judging_options, parse_size
from kernelopt.cli.selection import problem_set_from

DEFAULT_PORT = 8321


def add_command(commands) -> None:
    p = commands.add_parser(
        "serve", help="serve verdicts and rewards over HTTP for RL trainers (verl, TRL, OpenRLHF)",
        description="Judge LLM completions against reference programs over a JSON HTTP API: POST "
                    "/v1/evaluate, the OpenRLHF remote reward endpoint POST /v1/openrlhf, GET /healthz, "
                    "GET /metrics. Concurrent requests for one problem share a warm evaluator. See docs/serve.md.")
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help=f"TCP port (default {DEFAULT_PORT}; 0 picks a free one and prints it)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1, this machine only; any other needs --token)")
    p.add_argument("--token", default=os.environ.get("KERNELOPT_SERVE_TOKEN") or None, metavar="TOKEN",
                   help="require `Authorization: Bearer TOKEN` on every request but GET /healthz (default: "
                        "$KERNELOPT_SERVE_TOKEN, which keeps it out of the process list; required with a "
                        "--host beyond loopback)")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="a Host name clients may use besides loopback names and the --host address (repeat "
                        "it; e.g. the machine's DNS name when listening on 0.0.0.0)")
    add_problem_set_options(p.add_argument_group("problems that requests may name by id"), required=False)
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
    service.add_argument("--baselines", default=None, metavar="FILE",
                         help="baseline store written by `kernelopt baselines` (e.g. ~/.cache/kernelopt/baselines.json): "
                              "torch.compile's speedups there are the milestone reward's last step")
    service.add_argument("--quiet", action="store_true", help="no line on stderr per request")
    add_judging_options(p.add_argument_group("evaluation (as for kernelopt eval)"))
    add_ray_options(p)
    p.set_defaults(handler=run_serve)


def run_serve(args) -> int:
    with ray_pool(args, args.device) as pool:
        return serve(args, pool)


def serve(args, pool) -> int:
    service = make_service(args, pool)
    server = listen(service, args)
    where = pool.describe() if pool is not None else f"device {service.options.device}"
    print(f"kernelopt serve: listening on {server.url} ({where}, "
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


def make_service(args, pool=None):
    """The RewardService the arguments describe; UsageError for anything unusable. `pool`: a
    kernelopt.cluster.JudgePool whose actors judge (one lane per actor at a time)."""
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
        options = EvalOptions(**judging_options(args))
        select_backend(options.isolation, options.image)  # fail now, not at the first request
        if pool is not None:  # each actor judges on its own device; here the options only parse requests
            return RewardService(problems, options.model_copy(update={"device": "cpu"}), reward=args.reward,
                                 jobs=args.jobs, queue_size=args.queue_size, concurrency=pool.size,
                                 request_timeout=args.request_timeout, cache_size=max(args.cache_size, 2 * pool.size),
                                 evaluator_factory=pool.evaluator_factory())
        return RewardService(problems, options, reward=args.reward, jobs=args.jobs, queue_size=args.queue_size,
                             concurrency=args.concurrency, request_timeout=args.request_timeout,
                             cache_size=args.cache_size,
                             compile_speedups=compile_speedups(args.baselines, problems, options))
    except (ProblemSetError, RewardError, IsolationError) as exc:
        raise UsageError(str(exc)) from exc
    except ValueError as exc:  # pydantic's ValidationError and unusable devices
        raise UsageError(f"invalid option: {exc}") from exc


def compile_speedups(path: str | None, problems, options) -> dict[str, float]:
    """torch.compile's cached speedup per problem (by content hash), on this device, from the
    baseline store at `path`; problems without a correct compile baseline there are left out."""
    if not path:
        return {}
    from pathlib import Path

    from kernelopt.bench.baselines import BaselineStore, store_key
    from kernelopt.sandbox.device import resolve_device

    if not Path(path).expanduser().is_file():
        raise UsageError(f"--baselines {path}: no such file (write one with `kernelopt baselines --store {path}`)")
    store, device = BaselineStore(path), resolve_device(options.device)
    found = {}
    for problem in problems:
        record = store.get(store_key(problem, options, device)).get("compile") or {}
        if record.get("status") == "correct" and record.get("speedup_vs_eager"):
            found[problem.content_hash] = float(record["speedup_vs_eager"])
    return found


def listen(service, args):
    from kernelopt.rewards.service import RewardServer

    try:
        return RewardServer(service, args.host, args.port, max_body=args.max_body, log_requests=not args.quiet,
                            token=args.token, allow_hosts=args.allow_host)
    except ValueError as exc:
        raise UsageError(f"{exc}: choose a long random one, e.g. `export KERNELOPT_SERVE_TOKEN=$(python -c "
                         "'import secrets; print(secrets.token_urlsafe())')`") from exc
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc} (choose another "
                         "--port, or --port 0 for a free one)") from exc
