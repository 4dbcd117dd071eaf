"""`kernelopt mcp`: the referee as an MCP server (the official `mcp` SDK, `pip install
'kernelopt[mcp]'`), so that any MCP client (Claude Code, Codex CLI, Cursor, an in-house agent)
can judge, profile and record candidates with kernelopt's referee.

The tools are the agent strategy's (tools.py: evaluate, profile, reference, best, submit) with
one more argument, `problem`, naming the problem when the server holds a set (`problems()` lists
them). Every problem gets a run in the store (strategy "mcp") on its first tool call: its
candidates, verdicts and tool calls are stored as any run's, so `runs show`, `export` and
`report` read them. Candidates are judged only through the attempt pipeline's Evaluator (the
sandbox and the referee); nothing the client sends runs anywhere else.

Transports: stdio (the default: the client starts `kernelopt mcp ...` itself) or streamable
HTTP on loopback, where every request must carry `Authorization: Bearer <token>`.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path

from kernelopt.agent.attempt import AttemptPipeline
from kernelopt.agent.budget import Budget, BudgetLimits
from kernelopt.agent.search import OptimizeConfig, SearchRun, build_pipeline, start_run, summarize
from kernelopt.agent.store import RunStore
from kernelopt.agent.tools import TOOLS, Toolbox, ToolOutcome, tool_error
from kernelopt.kernelbench import Problem

INSTRUCTIONS = (
    "kernelopt's referee for KernelBench-style problems: write class ModelNew, a faster drop-in "
    "replacement of the reference Model. reference() shows the problem and the hardware; "
    "evaluate(code) judges a whole program (correctness on fresh inputs, then timing against "
    "the reference) and returns the verdict with its errors; profile(code) adds where the time "
    "goes; best() is the best correct candidate so far; submit(code) records your final one.")


def problem_key(problem: Problem) -> str:
    stem = Path(problem.path).stem if problem.path else problem.name
    return f"level{problem.level}/{stem}" if problem.level is not None else stem


@dataclass
class RefereeSettings:
    store: RunStore
    device: str
    backend: str | None = None
    eval_options: dict = field(default_factory=dict)
    max_evals: int | None = None
    out: Path = Path("kernelopt-runs") / "mcp"
    client_name: str = "mcp-client"


class Referee:
    """The problems served and, once used, each one's run and attempt pipeline."""

    def __init__(self, problems: list[Problem], settings: RefereeSettings):
        if not problems:
            raise ValueError("no problem to serve")
        self.problems = {problem_key(p): p for p in problems}
        self.settings = settings
        self._runs: dict[str, tuple[str, OptimizeConfig, AttemptPipeline]] = {}
        self._calls = 0
        self._lock = threading.Lock()

    def problem_list(self) -> str:
        return "\n".join(f"{key}: {p.name}" for key, p in self.problems.items())

    def call(self, name: str, arguments: dict) -> ToolOutcome:
        """One tool call; errors (an unknown problem, a bad argument) come back as tool errors."""
        if name == "problems":
            return ToolOutcome(self.problem_list())
        arguments = dict(arguments)
        wanted = arguments.pop("problem", None)
        if wanted is None and len(self.problems) == 1:
            wanted = next(iter(self.problems))
        if wanted not in self.problems:
            return tool_error(f"name the problem: one of {', '.join(self.problems)}" if wanted is None
                              else f"unknown problem {wanted!r}; see problems()")
        with self._lock:   # one evaluation at a time: concurrent timing would skew the speedups
            run_id, _, pipeline = self._run(wanted)
            self._calls += 1
            call_id = f"mcp_{self._calls}"
            outcome = Toolbox(pipeline).call(name, arguments, data={"tool_call_id": call_id})
            candidate = outcome.attempt.candidate_id if outcome.attempt is not None else None
            self.settings.store.add_tool_call(run_id, None, 0, self._calls, call_id, name,
                                              _arguments_text(arguments), outcome.text,
                                              outcome.is_error, candidate)
            self._record(wanted)
        return outcome

    def _record(self, key: str) -> None:
        """The run's status and summary as of now: an MCP run has no work pending between calls,
        so it is `finished` after each one (a client that kills the server loses nothing)."""
        run_id, config, pipeline = self._runs[key]
        summary = summarize(pipeline, run_id, config, self.problems[key], self.settings.out / run_id,
                            0.0, stop_reason="the MCP client's calls", status="finished")
        self.settings.store.set_run_status(run_id, "finished", summary.to_json())

    def _run(self, key: str) -> tuple[str, OptimizeConfig, AttemptPipeline]:
        if key not in self._runs:
            s, problem = self.settings, self.problems[key]
            limits = BudgetLimits(llm_calls=None, evaluations=s.max_evals)
            config = OptimizeConfig(problem_path=problem.path, model=s.client_name, base_url="",
                                    strategy="mcp", limits=limits.__dict__.copy(), device=s.device,
                                    backend=s.backend, eval_options={"profile": True, **s.eval_options})
            run_id = start_run(s.store, config, problem)
            run = SearchRun(store=s.store, run_id=run_id, config=config, problem=problem, device=s.device)
            pipeline = build_pipeline(run, Budget(limits))
            self._runs[key] = (run_id, config, pipeline)
        return self._runs[key]

    def close(self) -> None:
        """Stops the runs' warm evaluators (their records are already complete)."""
        with self._lock:
            for _, _, pipeline in self._runs.values():
                pipeline.close()
            self._runs.clear()

    def run_ids(self) -> dict[str, str]:
        return {key: run_id for key, (run_id, _, _) in self._runs.items()}


def _arguments_text(arguments: dict) -> str:
    return json.dumps(arguments)


def build_server(referee: Referee, **settings):
    """The MCP server over `referee` (`settings`: MCPServer's, e.g. host and port for HTTP)."""
    import anyio
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("kernelopt", instructions=INSTRUCTIONS, **settings)
    single = len(referee.problems) == 1
    problem_doc = "" if single else " `problem`: its name, as problems() lists it."

    def tool(name: str, takes_code: bool):
        description = TOOLS[name][0] + problem_doc

        if takes_code:
            async def handler(code: str, problem: str | None = None) -> str:
                return await _call(name, {"code": code, "problem": problem})
        else:  # (one signature per kind of tool: the MCP server builds the tool's schema from it)
            async def handler(problem: str | None = None) -> str:  # type: ignore[misc]
                return await _call(name, {"problem": problem})
        handler.__name__ = name
        server.add_tool(handler, name=name, description=description)

    async def _call(name: str, arguments: dict) -> str:
        arguments = {k: v for k, v in arguments.items() if v is not None}
        outcome = await anyio.to_thread.run_sync(referee.call, name, arguments)
        if outcome.is_error:
            raise ToolError(outcome.text)   # answered to the client as a result with isError
        return outcome.text

    for name in TOOLS:
        tool(name, name in ("evaluate", "profile", "submit"))

    async def problems() -> str:
        """The problems this server judges (key: name)."""
        return referee.problem_list()
    server.add_tool(problems, name="problems", description="The problems this server judges. Free.")
    return server
