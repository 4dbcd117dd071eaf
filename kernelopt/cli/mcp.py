"""`kernelopt mcp`: the referee as an MCP server over a problem or a problem set (docs/agent.md).

stdio by default (an MCP client starts the command itself; stdout carries the protocol, so
everything else goes to stderr); `--http` serves streamable HTTP on loopback, every request
needing `Authorization: Bearer TOKEN`. Exit codes: 0 when the client hangs up or on Ctrl-C,
2 for unusable input (no problem, a bad set, the SDK missing, a taken port).
"""

from __future__ import annotations

import os
import secrets
import signal
import sys
from pathlib import Path

from kernelopt.cli.errors import EXIT_OK, UsageError
from kernelopt.cli.options import add_problem_set_options, add_run_eval_options, run_eval_settings

TOKEN_ENV = "KERNELOPT_MCP_TOKEN"


def add_command(commands) -> None:
    p = commands.add_parser(
        "mcp", help="serve the referee to MCP clients (Claude Code, Codex CLI, Cursor, ...)",
        description="An MCP server (stdio by default) whose tools judge candidates with the referee: "
                    "evaluate(code), profile(code), reference(), best(), submit(code), problems(). "
                    "Every problem served gets a run in the store.")
    p.add_argument("problem", nargs="?", metavar="PROBLEM.py", help="KernelBench-format problem file")
    add_problem_set_options(p, required=False)
    add_run_eval_options(p)
    p.add_argument("--max-evals", type=int, default=None, metavar="N",
                   help="evaluations allowed per problem (default: no limit)")
    p.add_argument("--store", default=None, metavar="PATH",
                   help="SQLite run store (default: $KERNELOPT_STORE or kernelopt-runs/store.sqlite)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="where each run's best program goes (default kernelopt-runs/mcp/RUN_ID)")
    web = p.add_argument_group("transport")
    web.add_argument("--http", action="store_true",
                     help="streamable HTTP on loopback instead of stdio (needs the token)")
    web.add_argument("--port", type=int, default=8765, help="--http: TCP port on 127.0.0.1 (default 8765)")
    web.add_argument("--token", default=None,
                     help=f"--http: the bearer token clients send (default ${TOKEN_ENV}, else a random "
                          "one, printed)")
    p.set_defaults(handler=run_mcp)


def run_mcp(args) -> int:
    try:
        import mcp.server.mcpserver  # noqa: F401  (the SDK, 2.x: checked before any work)

        from kernelopt.agent.mcp_server import Referee, RefereeSettings, build_server
    except ImportError as exc:
        raise UsageError(f"kernelopt mcp needs the MCP SDK: pip install 'kernelopt[mcp]' ({exc})") from exc
    if args.http:
        _check_port(args.port)
    referee = _referee(args, Referee, RefereeSettings)
    served = ", ".join(referee.problems)
    signal.signal(signal.SIGTERM, _stop)   # a client's terminate: the runs are still closed
    try:
        if args.http:
            token = args.token or os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(24)
            print(f"kernelopt mcp: serving {served} at http://127.0.0.1:{args.port}/mcp ; header "
                  f"'Authorization: Bearer {token}'", file=sys.stderr, flush=True)
            serve_http(build_server(referee), token, args.port)
        else:
            print(f"kernelopt mcp: serving {served} on stdio", file=sys.stderr, flush=True)
            build_server(referee).run("stdio")
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)   # the client's terminate: finish closing
        runs = referee.run_ids()
        referee.close()
        for key, run_id in runs.items():
            print(f"kernelopt mcp: {key}: run {run_id}", file=sys.stderr)
    return EXIT_OK


def _check_port(port: int) -> None:
    import socket

    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise UsageError(f"cannot listen on 127.0.0.1:{port}: {exc} (choose another --port)") from exc


def _stop(signum, frame) -> None:
    raise KeyboardInterrupt


def _referee(args, referee_class, settings_class):
    from kernelopt.agent.store import RunStore
    from kernelopt.cli.agent_setup import device_and_backend, usage_errors
    from kernelopt.cli.selection import problem_set_from
    from kernelopt.kernelbench import load_problem

    if bool(args.problem) == bool(args.kernelbench):
        raise UsageError("give one problem file or --kernelbench SET (with --level/--problems)")
    with usage_errors():
        problems = [load_problem(args.problem)] if args.problem else list(problem_set_from(args).problems)
        device, backend = device_and_backend(args.device, args.backend)
        store = RunStore.open(args.store)
    if not problems:
        raise UsageError(f"no problem selected in {args.kernelbench}")
    options = {k: v for k, v in run_eval_settings(args).items() if k != "profile"}
    settings = settings_class(store=store, device=device, backend=backend, eval_options=options,
                              max_evals=args.max_evals,
                              out=Path(args.out) if args.out else Path("kernelopt-runs") / "mcp")
    return referee_class(problems, settings)


def serve_http(server, token: str, port: int) -> None:
    """Streamable HTTP on 127.0.0.1 only, each request checked for the bearer token."""
    import uvicorn

    app = require_token(server.streamable_http_app(), token)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def require_token(app, token: str):
    """An ASGI wrapper answering 401 to any HTTP request without `Authorization: Bearer TOKEN`."""
    import hmac

    expected = f"Bearer {token}".encode()

    async def guarded(scope, receive, send):
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, expected):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body",
                            "body": b'{"error": "missing or wrong bearer token"}'})
                return
        await app(scope, receive, send)
    return guarded
