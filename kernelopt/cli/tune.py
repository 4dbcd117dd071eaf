"""`kernelopt tune`: the interactive workbench for one kernel, in the browser (docs/tune.md).

Exit codes: 0 after Ctrl-C or SIGTERM (the session's run is stored as finished), 2 for unusable
input (the problem, the store, a taken port, no endpoint configured).
"""

from __future__ import annotations

import signal
import sys
import threading

from kernelopt.cli.agent_setup import configured_endpoint, llm_settings, missing_endpoint, price_from_table
from kernelopt.cli.errors import EXIT_OK, UsageError
from kernelopt.cli.options import add_endpoint_options, add_llm_options, add_run_eval_options, run_eval_settings


def add_command(commands) -> None:
    p = commands.add_parser(
        "tune", help="tune one kernel by hand in a local web workbench",
        description="A local web page over an interactive session: the candidates as a live tree, "
                    "hints to the model, hand edits judged by the referee, diffs, strategies run for "
                    "a few calls, and the kernel to keep. Every request needs the token in the "
                    "printed URL.")
    p.add_argument("problem", nargs="?", metavar="PROBLEM.py", help="KernelBench-format problem file")
    add_endpoint_options(p)
    add_llm_options(p)
    add_run_eval_options(p)
    web = p.add_argument_group("workbench")
    web.add_argument("--port", type=int, default=0, help="TCP port (default 0: a free one, printed)")
    web.add_argument("--host", default="127.0.0.1",
                     help="address to listen on (default 127.0.0.1; any other exposes the page to the "
                          "network, protected by the token only)")
    web.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                     help="a Host name the page may be opened with besides loopback names and the --host "
                          "address (repeat it); others are refused, so a web page cannot reach the session "
                          "through a DNS name pointed at this machine")
    web.add_argument("--no-browser", action="store_true", help="print the URL without opening a browser")
    rec = p.add_argument_group("records")
    rec.add_argument("--store", default=None, metavar="PATH",
                     help="SQLite run store (default: $KERNELOPT_STORE or kernelopt-runs/store.sqlite)")
    rec.add_argument("--resume", default=None, metavar="RUN_ID",
                     help="continue a stored run (a session's, or an optimize or bench run)")
    spots = p.add_argument_group("a model's hot spots")
    spots.add_argument("--model-spots", default=None, metavar="DIR",
                       help="the --out folder of kernelopt model extract (or model optimize): the page lists its "
                            "hot spots and opens any of them (without PROBLEM.py: opens --spot)")
    spots.add_argument("--spot", default=None, metavar="MODULE",
                       help="with --model-spots and no PROBLEM.py: the hot spot to open first (default: the "
                            "hottest extracted one)")
    p.set_defaults(handler=run_tune)


def run_tune(args) -> int:
    from kernelopt.tune.server import TuneServer, is_loopback
    from kernelopt.tune.workbench import Workbench

    spots = model_spots(args)
    session = open_session(args)
    if session is None:
        return missing_endpoint(f"tune {args.problem}", getattr(args, "json", False))
    notices = [f"the LLM endpoint cannot be used: {problem} (hand edits are still judged)"
               for problem in [session.endpoint_problem()] if problem]
    workbench = Workbench(session, notices, spots=spots, open_problem=lambda path: open_spot_session(args, path))
    try:
        server = TuneServer(workbench, args.host, args.port, allow_hosts=args.allow_host)
    except OSError as exc:
        session.close()
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc}") from exc
    server.start()
    server.workbench.judge_pending()  # a resumed run stopped mid-evaluation: its candidates get their verdicts
    if not is_loopback(args.host):
        print(f"kernelopt tune: warning: listening on {args.host}, reachable from other machines; "
              "only the token protects the session", file=sys.stderr)
    for notice in notices:
        print(f"kernelopt tune: {notice}", file=sys.stderr)
    print(f"kernelopt tune: run {session.run_id} ({session.problem.name} with {session.config.model} on "
          f"{session.device}); open {server.url} ; Ctrl-C stops", file=sys.stderr, flush=True)
    if not args.no_browser:
        open_browser(server.url)
    serve_until_stopped()
    print("kernelopt tune: stopping; the session's run is in the store", file=sys.stderr)
    server.stop()
    return EXIT_OK


def model_spots(args):
    """--model-spots' manifest (None without it); without PROBLEM.py, args.problem becomes the
    problem file of --spot (default: the hottest extracted spot)."""
    from kernelopt.tune.spots import SpotsError, read_spots

    if args.spot and not args.model_spots:
        raise UsageError("--spot MODULE names a hot spot of --model-spots DIR: give --model-spots too")
    if not args.model_spots:
        return None
    try:
        spots = read_spots(args.model_spots)
    except SpotsError as exc:
        raise UsageError(str(exc)) from exc
    if args.spot and (args.problem or args.resume):
        raise UsageError("--spot opens a hot spot in place of PROBLEM.py or --resume: give one or the other")
    if not args.problem and not args.resume:
        spot = spots.find(args.spot) if args.spot else spots.spots[0]
        if spot is None:
            raise UsageError(f"--spot {args.spot}: not an extracted hot spot of {spots.manifest} (choose one of "
                             f"{', '.join(s.module for s in spots.spots)})")
        args.problem = str(spot.path)
    return spots


def open_spot_session(args, path):
    """A new Session on a hot spot's problem, with the command's settings (for the page's
    "open" of a spot); SessionError when it cannot be opened."""
    from kernelopt.agent.session import SessionError

    try:
        session = open_session(args, problem=str(path))
    except UsageError as exc:
        raise SessionError(str(exc)) from exc
    if session is None:
        raise SessionError("no LLM endpoint is configured (--base-url or OPENAI_BASE_URL)")
    return session


def open_session(args, problem: str | None = None):
    """The Session to tune (None: no endpoint configured for a new one); `problem`: a new
    session on that problem file instead of PROBLEM.py or --resume."""
    from kernelopt.agent.session import Session, SessionError

    try:
        if args.resume and problem is None:
            return Session.resume(args.resume, store=args.store, base_url=args.base_url, check=False)
        problem = problem or args.problem
        if not problem:
            raise UsageError("give a problem file (PROBLEM.py), --resume RUN_ID or --model-spots DIR")
        base_url = configured_endpoint(args)
        if base_url is None:
            return None
        if not args.model:
            raise UsageError(f"--model is required (the model's name at {base_url}), or set KERNELOPT_MODEL")
        return Session.open(problem, model=args.model, base_url=base_url, device=args.device,
                            store=args.store, api_key_env=args.api_key_env, eval_options=run_eval_settings(args),
                            llm_options=llm_settings(args), use_cache=args.reuse_answers and not args.no_cache, backend=args.backend,
                            price=tuple(args.price) if args.price else price_from_table(args.price_table, args.model),
                            check=False)
    except SessionError as exc:
        raise UsageError(str(exc)) from exc


def open_browser(url: str) -> None:
    import webbrowser

    try:
        webbrowser.open(url)
    except webbrowser.Error:
        pass   # the URL is printed: opening it by hand works as well


def serve_until_stopped() -> None:
    """Until Ctrl-C or SIGTERM."""
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    try:
        while not stopped.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
