"""Interactive tuning of one kernel: the search driven by hand, from a notebook, a script or the
`kernelopt tune` workbench (kernelopt/tune).

    s = Session.open("problem.py", model="...", base_url="...", device="cuda")
    c = s.ask("try vectorized float4 loads", parent=s.best)   # one LLM call, judged
    cs = s.sample(4, parent=c)                                 # several, judged as they finish
    v = s.submit(open("my_kernel.py").read(), parent=c)        # hand-written code, judged
    s.diff(c, v); s.candidates; s.best; s.accept(v, "kernels/relu_best.py")

A session is a run of the run store like an `optimize` run, driven by the same attempt pipeline
(attempt.py: LLM call, code extraction, the sandboxed referee, deduplication, records) and the
same prompts; a strategy can be run on it for a few calls (`run`). What the engineer adds is
recorded with the candidates it produced: a hint in the candidate's strategy data
(`{"source": "hint", "hint": ...}`) and in the request of its LLM call; a hand edit as a
candidate with no LLM call (`{"source": "hand"}`). So `kernelopt runs show`, `export` and
`report` read a session like any run, and `Session.resume` continues any run (an `optimize` or
`bench` run too) from its stored candidates, without replaying a strategy.

Actions run one at a time (a lock), because each gets its own budget on the shared pipeline;
`stop()` may be called from another thread to end the action in progress.
"""

from __future__ import annotations

import difflib
import html
import os
import threading
import time
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kernelopt.agent.attempt import Attempt
from kernelopt.agent.budget import Budget, BudgetLimits
from kernelopt.agent.llm import LLMClient, LLMConfigError, resolve_endpoint
from kernelopt.agent.search import OptimizeConfig, SearchRun, build_pipeline, start_run, stored_problem, summarize
from kernelopt.agent.store import RunStore, StoreError, calls_cost
from kernelopt.agent.strategies import ancestors, first_messages, make_strategy, refine_messages
from kernelopt.kernelbench import ProblemError, load_problem
from kernelopt.kernelbench.backends import resolve_backend
from kernelopt.sandbox import EvalResult
from kernelopt.sandbox.device import resolve_device

SESSION_STRATEGY = "interactive"   # the strategy name a session's own run is stored with
NO_LIMITS = dict(llm_calls=None)


class SessionError(Exception):
    """A session cannot do what was asked; the message says why (the session goes on)."""


# views -------------------------------------------------------------------------------------------

class Verdict:
    """The referee's `EvalResult` with a readable HTML display; its fields read through."""

    def __init__(self, result: EvalResult):
        self.result = result

    def __getattr__(self, name):
        return getattr(self.result, name)

    @property
    def interval(self) -> tuple[float, float] | None:
        """The speedup's 95 % confidence interval, when timed."""
        r = self.result
        precision = r.timing.speedup_precision if r.timing is not None else None
        if r.speedup is None or precision is None:
            return None
        return (r.speedup * (1 - precision), r.speedup * (1 + precision))

    def headline(self) -> str:
        r = self.result
        if r.speedup is None:
            return r.status
        interval = self.interval
        around = f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else ""
        return f"{r.status}, speedup {r.speedup:.3f}x{around}"

    def __repr__(self) -> str:
        return f"<Verdict {self.headline()}>"

    def _repr_html_(self) -> str:
        r = self.result
        rows = [("verdict", self.headline()), ("message", r.message),
                ("flags", ", ".join(r.flags)), ("kinds", ", ".join(r.optimization_kinds)),
                ("trials", ", ".join("passed" if t.passed else f"failed: {t.message}" for t in r.trials)),
                ("configurations", "; ".join(f"[{s.name}]{' (held out)' if s.held_out else ''} "
                                             + (f"{s.speedup:.3f}x" if s.speedup is not None else s.status)
                                             for s in r.shapes or []))]
        if r.reference_ms is not None:
            rows.append(("timing", f"reference {r.reference_ms:.4g} ms, candidate {r.candidate_ms:.4g} ms"))
        body = "".join(f"<tr><th style='text-align:left'>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
                       for k, v in rows if v)
        log = f"<details><summary>compile log</summary><pre>{html.escape(r.compile_log)}</pre></details>" \
            if r.compile_log.strip() else ""
        return f"<table>{body}</table>{log}"


class Candidate:
    """One attempt of the session (an LLM answer, a hand edit, or a failed call), as the
    engineer sees it. `id` is the store's candidate id (`kernelopt runs show`), `number` the
    attempt's place in the session."""

    def __init__(self, attempt: Attempt):
        self.attempt = attempt

    @property
    def number(self) -> int:
        return self.attempt.index

    @property
    def id(self) -> int | None:
        return self.attempt.candidate_id

    @property
    def parent(self) -> Candidate | None:
        return Candidate(self.attempt.parent) if self.attempt.parent is not None else None

    @property
    def code(self) -> str | None:
        return self.attempt.code

    @property
    def status(self) -> str:
        return self.attempt.status

    @property
    def correct(self) -> bool:
        return self.attempt.correct

    @property
    def speedup(self) -> float | None:
        return self.attempt.result.speedup if self.attempt.result is not None else None

    @property
    def verdict(self) -> Verdict | None:
        return Verdict(self.attempt.result) if self.attempt.result is not None else None

    @property
    def source(self) -> str:
        """hint | hand | sample | the strategy that asked for it (its data says which)."""
        return self.attempt.data.get("source", "strategy")

    @property
    def hint(self) -> str | None:
        return self.attempt.data.get("hint")

    @property
    def error(self) -> str | None:
        """Why there is no verdict (LLM error, no program in the answer, evaluation failure)."""
        a = self.attempt
        return a.llm_error or a.format_error or a.eval_error

    @property
    def pending(self) -> bool:
        return self.attempt.status == "not_evaluated" and not self.attempt.eval_error

    def to_json(self) -> dict:
        verdict = self.verdict
        return {"number": self.number, "id": self.id,
                "parent": self.attempt.parent.index if self.attempt.parent else None,
                "status": "pending" if self.pending else self.status, "correct": self.correct,
                "speedup": self.speedup, "interval": verdict.interval if verdict else None,
                "flags": list(verdict.flags) if verdict else [], "source": self.source, "hint": self.hint,
                "message": verdict.message if verdict else self.error, "duplicate": self.attempt.duplicate}

    def __eq__(self, other) -> bool:
        return isinstance(other, Candidate) and other.attempt is self.attempt

    def __hash__(self) -> int:
        return id(self.attempt)

    def __repr__(self) -> str:
        what = self.verdict.headline() if self.verdict else self.status
        return f"<Candidate #{self.id} (attempt {self.number}, {self.source}): {what}>"

    def _repr_html_(self) -> str:
        title = f"candidate #{self.id} (attempt {self.number}, {self.source})"
        parts = [f"<h4>{html.escape(title)}</h4>"]
        if self.hint:
            parts.append(f"<p>hint: {html.escape(self.hint)}</p>")
        parts.append(self.verdict._repr_html_() if self.verdict else f"<p>{html.escape(self.status)}: "
                     f"{html.escape(self.error or '')}</p>")
        if self.code:
            parts.append(f"<details><summary>code</summary><pre>{html.escape(self.code)}</pre></details>")
        return "".join(parts)


@dataclass
class Diff:
    """A unified diff between two programs (str() is the text)."""

    old: str
    new: str
    text: str

    def __str__(self) -> str:
        return self.text

    def _repr_html_(self) -> str:
        colours = {"+": "#e6ffec", "-": "#ffebe9", "@": "#ddf4ff"}
        lines = [f"<span style='background:{colours.get(line[:1], 'transparent')}'>{html.escape(line)}</span>"
                 for line in self.text.splitlines()]
        return "<pre>" + "\n".join(lines) + "</pre>"


@dataclass
class Usage:
    """What the session's run has spent so far (every call of the run, resumed ones included)."""

    llm_calls: int
    llm_calls_failed: int
    prompt_tokens: int
    completion_tokens: int
    cost: float | None  # US dollars; None: a model without a price
    evaluations: int
    wall_s: float


@dataclass
class Accepted:
    path: str
    command: str   # re-judges the accepted file with the referee


# the session -------------------------------------------------------------------------------------

class Session:
    """Open one with `Session.open` (a new run) or `Session.resume` (a stored run)."""

    def __init__(self, store: RunStore, run_id: str, config: OptimizeConfig, problem, client: LLMClient | None,
                 api_key: str | None, device: str):
        self.store, self.run_id, self.config, self.problem, self.device = store, run_id, config, problem, device
        self.out_dir = store.path.parent / run_id
        run = SearchRun(store=store, run_id=run_id, config=config, problem=problem, device=device, client=client,
                        api_key=api_key)
        self.pipeline = build_pipeline(run, Budget(BudgetLimits(**NO_LIMITS)), self._judged)
        self.pipeline.on_answer = self._answered
        self.listeners: list[Callable[[str, dict], None]] = []
        self.errors: list[str] = []
        self._actions = threading.Lock()
        self._opened = time.monotonic()
        self._closed = False

    @classmethod
    def open(cls, problem_path: str | Path, *, model: str, base_url: str | None = None, device: str = "auto",
             store: str | Path | None = None, api_key_env: str = "OPENAI_API_KEY", eval_options: dict | None = None,
             llm_options: dict | None = None, use_cache: bool = False, backend: str | None = None,
             price: tuple[float, float] | None = None, check: bool = True, profile: bool | None = None) -> Session:
        """A new session (a new run in the store) on the problem file. `llm_options`: LLMSettings
        fields (temperature, max_tokens, concurrency, ...); `price`: dollars per million input
        and output tokens, for the cost in `usage()`; `check`: fail at once, with SessionError,
        on an endpoint that cannot be used (unreachable, rejected key, unknown model), instead of
        at the first call; `profile`: profile correct candidates for the model's next prompt
        (EvalOptions.profile; default: on, as with the refine strategy, unless `eval_options`
        says otherwise)."""
        eval_options = {"profile": True, **(eval_options or {})}
        if profile is not None:
            eval_options["profile"] = profile
        try:
            problem = load_problem(problem_path)
        except ProblemError as exc:
            raise SessionError(f"cannot use the problem: {exc}") from exc
        url, _, _ = resolve_endpoint(base_url, api_key_env)
        config = OptimizeConfig(problem_path=str(problem_path), model=model, base_url=url, api_key_env=api_key_env,
                                strategy=SESSION_STRATEGY, limits=dict(NO_LIMITS), device=device,
                                eval_options=dict(eval_options or {}), llm_options=dict(llm_options or {}),
                                use_cache=use_cache, backend=backend, price=list(price) if price else None)
        run_store = _open_store(store)
        client, api_key, device = cls._started(config, check)
        run_id = start_run(run_store, config, problem)
        return cls(run_store, run_id, config, problem, client, api_key, device)._record()

    @classmethod
    def resume(cls, run_id: str, *, store: str | Path | None = None, base_url: str | None = None,
               check: bool = True) -> Session:
        """The stored run (a session's, or an `optimize` or `bench` run) continued: its
        candidates and verdicts as they were, new work added to it."""
        run_store = _open_store(store, existing=True)
        try:
            run = run_store.run(run_id)
        except StoreError as exc:
            raise SessionError(str(exc)) from exc
        config = OptimizeConfig.from_json(run["config"])
        config.base_url = base_url or config.base_url
        config.limits = dict(NO_LIMITS)
        problem = stored_problem(run)
        session = cls(run_store, run_id, config, problem, *cls._started(config, check))
        session.pipeline.take_up(stored_attempts(run_store, run_id), run_store.calls(run_id))
        return session._record()

    @staticmethod
    def _started(config: OptimizeConfig, check: bool) -> tuple:
        """(client, API key, device) for a session, checked before its run is recorded."""
        api_key = os.environ.get(config.api_key_env) or None
        try:
            device = resolve_device(config.device)
            config.backend = resolve_backend(config.backend, device)  # recorded with a new session's run
            client = LLMClient(config.llm_settings(api_key))
            if check:
                client.check()
        except (LLMConfigError, ValueError) as exc:
            raise SessionError(str(exc)) from exc
        return client, api_key, device

    # what the engineer does ----------------------------------------------------------------------

    def ask(self, hint: str | None = None, parent: Candidate | int | None = None) -> Candidate:
        """One LLM call (the refine prompt for `parent`, the first-attempt prompt without one,
        with the hint in it), judged. Blocks until the verdict is in."""
        return self.sample(1, parent=parent, hint=hint)[0]

    def sample(self, n: int, parent: Candidate | int | None = None, hint: str | None = None) -> list[Candidate]:
        """`n` answers to the same prompt, asked together and judged as they come in."""
        if n < 1:
            raise SessionError(f"sample needs n >= 1, not {n}")
        node = self._attempt_of(parent)
        data = {"source": "hint" if hint else "sample"} | ({"hint": hint} if hint else {})
        with self._action(Budget(BudgetLimits(**NO_LIMITS))):
            messages = self._messages(node, hint)
            futures = [self._started_attempt(self.pipeline.attempt(messages, parent=node, data=data))
                       for _ in range(n)]
            return [Candidate(f.result()) for f in futures]

    def submit(self, code: str, parent: Candidate | int | None = None) -> Candidate:
        """A program written by hand (`parent`: the candidate it was edited from), judged."""
        if not code.strip():
            raise SessionError("the submitted code is empty")
        node = self._attempt_of(parent)
        with self._action(Budget(BudgetLimits(**NO_LIMITS))):
            future = self._started_attempt(self.pipeline.judge_code(code, parent=node, data={"source": "hand"}))
            return Candidate(future.result())

    def left_pending(self) -> list[Candidate]:
        """Candidates with a program but no verdict: a stored run stopped (killed) while they were
        being judged. `judge_pending` judges them."""
        return [Candidate(a) for a in self.pipeline.attempts if a.code and Candidate(a).pending]

    def judge_pending(self) -> list[Candidate]:
        """Judges the candidates a resumed run left without a verdict; returns them judged."""
        waiting = self.left_pending()
        if not waiting:
            return []
        with self._action(Budget(BudgetLimits(**NO_LIMITS))):
            futures = [self.pipeline.rejudge(c.attempt) for c in waiting]
            return [Candidate(f.result()) for f in futures if f is not None]

    def run(self, strategy: str = "refine", calls: int = 4, **options) -> list[Candidate]:
        """A strategy of `kernelopt optimize` for at most `calls` LLM calls, continuing from the
        session's attempts (refine starts from the last one). Returns the new candidates."""
        if calls < 1:
            raise SessionError(f"run needs calls >= 1, not {calls}")
        try:
            chosen = make_strategy(strategy, **options)
        except ValueError as exc:
            raise SessionError(str(exc)) from exc
        from kernelopt.agent.search import search_loop

        before = len(self.pipeline.attempts)
        with self._action(Budget(BudgetLimits(llm_calls=calls))):
            search_loop(chosen, self.pipeline)
        return [Candidate(a) for a in self.pipeline.attempts[before:]]

    def stop(self, reason: str = "stopped by the user") -> None:
        """Ends the action in progress (from another thread): nothing new starts, what is in
        flight finishes. The next action starts afresh."""
        self.pipeline.budget.stop(reason)

    def diff(self, old: Candidate | int | str, new: Candidate | int | str) -> Diff:
        """Unified diff between two candidates' programs ("reference": the problem's source)."""
        old_label, old_code = self._program(old)
        new_label, new_code = self._program(new)
        lines = difflib.unified_diff(old_code.splitlines(keepends=True), new_code.splitlines(keepends=True),
                                     fromfile=old_label, tofile=new_label)
        return Diff(old_label, new_label, "".join(lines))

    def accept(self, candidate: Candidate | int, path: str | Path) -> Accepted:
        """Writes the candidate's program to `path`; returns the command that re-judges it."""
        chosen = self._candidate(candidate)
        if not chosen.code:
            raise SessionError(f"candidate {chosen.number} has no program to accept ({chosen.status})")
        target = Path(path)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(chosen.code, encoding="utf-8")
        except OSError as exc:
            raise SessionError(f"cannot write {target}: {exc}") from exc
        command = (f"kernelopt eval --reference {self.config.problem_path} --candidate {target} "
                   f"--device {self.device}")
        self._emit("accepted", {"number": chosen.number, "path": str(target), "command": command})
        return Accepted(str(target), command)

    # what the engineer reads ---------------------------------------------------------------------

    @property
    def candidates(self) -> list[Candidate]:
        return [Candidate(a) for a in self.pipeline.attempts]

    @property
    def best(self) -> Candidate | None:
        best = self.pipeline.best()
        return Candidate(best) if best is not None else None

    def candidate(self, number: int) -> Candidate:
        """The session's attempt `number` (1-based, as the workbench numbers them)."""
        if not 1 <= number <= len(self.pipeline.attempts):
            raise SessionError(f"no candidate {number}: the session has {len(self.pipeline.attempts)}")
        return Candidate(self.pipeline.attempts[number - 1])

    def endpoint_problem(self) -> str | None:
        """Why the LLM endpoint cannot be used (unreachable, rejected key, unknown model), or
        None. A session opened with check=False still judges hand edits without one."""
        client = self.pipeline.client
        if client is None:
            return "no LLM endpoint configured"
        try:
            client.check()
        except LLMConfigError as exc:
            return str(exc)
        return None

    def usage(self) -> Usage:
        calls = self.store.calls(self.run_id)
        return Usage(llm_calls=len(calls), llm_calls_failed=sum(1 for c in calls if c["error"]),
                     prompt_tokens=sum(c["prompt_tokens"] or 0 for c in calls),
                     completion_tokens=sum(c["completion_tokens"] or 0 for c in calls),
                     cost=calls_cost(calls),
                     evaluations=len(self.store.evaluations(self.run_id)),
                     wall_s=round(time.monotonic() - self._opened, 1))

    def close(self) -> None:
        """Ends the session: the run is `finished` in the store, with its summary."""
        if not self._closed:
            self._closed = True
            self.pipeline.close()
            self._record("finished")

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _repr_html_(self) -> str:
        best = self.best
        rows = "".join(f"<tr><td>{c.number}</td><td>{c.id if c.id is not None else ''}</td>"
                       f"<td>{c.parent.number if c.parent else ''}</td><td>{html.escape(c.source)}</td>"
                       f"<td>{html.escape(c.verdict.headline() if c.verdict else c.status)}</td></tr>"
                       for c in self.candidates)
        head = (f"<p>session {html.escape(self.run_id)}: {html.escape(self.problem.name)} with "
                f"{html.escape(self.config.model)}; best: {html.escape(repr(best)) if best else 'none yet'}</p>")
        return head + f"<table><tr><th>#</th><th>id</th><th>parent</th><th>source</th><th>verdict</th></tr>{rows}</table>"

    # internals -----------------------------------------------------------------------------------

    @contextmanager
    def _action(self, budget: Budget):
        """One action at a time, with its own budget; an endpoint failure that stopped it is
        kept as a message (`errors`) and does not stop the next action."""
        if self._closed:
            raise SessionError("the session is closed")
        with self._actions:
            self.pipeline.budget = budget
            self.pipeline.fatal = None
            try:
                yield
            finally:
                if self.pipeline.fatal is not None:
                    self._error(str(self.pipeline.fatal))
                    self.pipeline.fatal = None
                self._record()

    def _started_attempt(self, future: Future | None) -> Future:
        if future is None:
            raise SessionError(self.pipeline.budget.stop_reason() or "the budget allows no more work")
        self._emit("started", Candidate(self.pipeline.attempts[-1]).to_json())
        return future

    def _messages(self, parent: Attempt | None, hint: str | None) -> list[dict]:
        if parent is None:
            return first_messages(self.pipeline, hint=hint)
        return refine_messages(self.pipeline, parent, ancestors(parent), hint=hint)

    def _attempt_of(self, parent: Candidate | int | None) -> Attempt | None:
        return self._candidate(parent).attempt if parent is not None else None

    def _candidate(self, which: Candidate | int) -> Candidate:
        """A candidate of this session: itself, or by the store's candidate id."""
        if isinstance(which, Candidate):
            if not any(a is which.attempt for a in self.pipeline.attempts):
                raise SessionError(f"{which!r} is not a candidate of this session")
            return which
        for attempt in self.pipeline.attempts:
            if attempt.candidate_id == which:
                return Candidate(attempt)
        raise SessionError(f"no candidate with id {which!r} in run {self.run_id}")

    def _program(self, which: Candidate | int | str) -> tuple[str, str]:
        if isinstance(which, str):
            if which == "reference":
                return "reference", self.problem.shown_source
            raise SessionError(f"no candidate with id {which!r} in run {self.run_id}")
        chosen = self._candidate(which)
        if not chosen.code:
            raise SessionError(f"candidate {chosen.number} has no program ({chosen.status})")
        return f"candidate {chosen.number}", chosen.code

    def _answered(self, attempt: Attempt) -> None:
        self._emit("answered", Candidate(attempt).to_json())

    def _judged(self, kind: str, attempt: Attempt) -> None:
        self._emit("judged", Candidate(attempt).to_json())

    def _error(self, message: str) -> None:
        self.errors.append(message)
        self._emit("error", {"message": message})

    def _emit(self, kind: str, payload: dict) -> None:
        for listener in list(self.listeners):
            listener(kind, payload)

    def _record(self, status: str = "running") -> Session:
        """The run's status and summary in the store, as `runs show` prints them."""
        summary = summarize(self.pipeline, self.run_id, self.config, self.problem, self.out_dir,
                            time.monotonic() - self._opened, stop_reason="interactive session", status=status)
        self.store.set_run_status(self.run_id, status, summary.to_json())
        return self


def stored_attempts(store: RunStore, run_id: str) -> list[Attempt]:
    """A run's candidates as attempts, with their parents and verdicts, in the order made."""
    attempts: list[Attempt] = []
    by_id: dict[int, Attempt] = {}
    for row in store.candidates_with_calls(run_id):
        attempt = Attempt(index=len(attempts) + 1, parent=by_id.get(row["parent_id"]), data=row["strategy_data"],
                          candidate_id=row["id"], code=row["code"], code_hash=row["code_hash"],
                          format_error=row["format_error"],
                          result=EvalResult.model_validate_json(row["result"]) if row["result"] else None)
        attempts.append(attempt)
        by_id[row["id"]] = attempt
    return attempts


def _open_store(path: str | Path | None, existing: bool = False) -> RunStore:
    try:
        return RunStore.open(path, existing=existing)
    except StoreError as exc:
        raise SessionError(str(exc)) from exc
