"""The attempt pipeline: one prompt in, one judged candidate out. It has no loop of its own: the
search loop (search.py) starts attempts as the strategy asks and waits for them.

`AttemptPipeline.attempt(messages)` reserves budget, asks the LLM (in a pool of `concurrency`
threads), extracts the code, and hands it to the evaluation lane, returning a future of the
`Attempt`. LLM calls of one round overlap with the evaluation of earlier answers; evaluations run
one at a time per device by default, because concurrent timing on one device would skew the
speedups.

Everything goes through the run store first: a call this run already finished is replayed from
it, an identical code hash is judged once, and the cross-run response cache answers repeated
requests. Because strategies decide only from finished rounds and a seeded RNG, replaying a
run after a crash sends the same requests in the same order, so resuming redoes no finished
work.
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from kernelopt.agent.budget import Budget
from kernelopt.agent.config import SearchRun
from kernelopt.agent.llm import LLMCallError, LLMConfigError, request_key
from kernelopt.kernelbench.completion import FormatError, extract_code
from kernelopt.agent.prompting import PromptContext, feedback_text, format_error_feedback, profile_text, short_error
from kernelopt.agent.selection import conservative_speedup, head_to_head, leader
from kernelopt.agent.store import LLMCallRecord
from kernelopt.kernelbench import ProblemError
from kernelopt.sandbox import EvalOptions, EvalResult
from kernelopt.sandbox.results import HeadToHead
from kernelopt.sandbox.batch import Evaluator
from kernelopt.sandbox.isolation import IsolationError
from kernelopt.sandbox.process import SandboxError
from kernelopt.sandbox.shaped import prompt_view

# Failures of the machinery rather than of a candidate: every further evaluation would fail too.
FATAL_EVAL_ERRORS = (ProblemError, IsolationError, SandboxError)


def code_hash(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


@dataclass
class Attempt:
    """One LLM answer and what became of it."""

    index: int                       # 1-based, in the order the strategy asked
    parent: Attempt | None = None
    data: dict = field(default_factory=dict)   # the strategy's own (depth, generation, ...)
    candidate_id: int | None = None
    code: str | None = None
    code_hash: str | None = None
    format_error: str | None = None
    llm_error: str | None = None
    eval_error: str | None = None    # the evaluation itself could not run
    result: EvalResult | None = None
    duplicate: bool = False          # same code as an earlier candidate: judged once
    answer_source: str | None = None  # where the LLM's answer came from: endpoint, run (resumed), cache

    @property
    def status(self) -> str:
        if self.llm_error:
            return "llm_error"
        if self.format_error:
            return "format_error"
        if self.result is not None:
            return self.result.status
        return "not_evaluated"

    @property
    def correct(self) -> bool:
        return self.result is not None and self.result.correct

    @property
    def score(self) -> float:
        """The search's reward: the speedup of a correct candidate, 0 for anything else."""
        r = self.result
        return float(r.speedup or 0.0) if r is not None and r.correct else 0.0

    @property
    def rank(self) -> float:
        """What the search ranks candidates by: the lower end of a correct candidate's 95 %
        speedup interval (its speedup where no interval is known), 0 for anything else. A
        candidate does not lead on a lucky reading alone (conservative_speedup)."""
        return conservative_speedup(self.result) if self.result is not None and self.correct else 0.0

    @property
    def head_to_head(self) -> HeadToHead | None:
        """The leader this candidate was measured against when it would have taken the lead."""
        r = self.result
        return r.timing.incumbent if r is not None and r.timing is not None else None

    @property
    def feedback(self) -> str:
        if self.format_error:
            return format_error_feedback(self.format_error)
        if self.result is not None:
            return feedback_text(self.result)
        return f"verdict: not evaluated\nmessage: {self.eval_error or self.llm_error or 'unknown'}"

    @property
    def headline(self) -> str:
        r = self.result
        if r is not None and r.correct:
            return (f"correct, speedup {r.speedup:.3f}x (reference {r.reference_ms:.4g} ms, "
                    f"candidate {r.candidate_ms:.4g} ms)")
        return self.status.replace("_", " ")

    def view(self) -> dict:
        """What the prompt templates see."""
        return {"label": f"attempt {self.index}", "headline": self.headline, "code": self.code,
                "feedback": self.feedback, "correct": self.correct, "score": self.score,
                "profile": profile_text(self.result),
                "error": None if self.correct else self.error_summary()}

    def error_summary(self) -> str:
        if self.result is not None:
            shown = prompt_view(self.result)
            return short_error(shown.message, shown.compile_log)
        return short_error(self.format_error or self.llm_error or self.eval_error or "")


class AttemptPipeline:
    """Turns prompts into judged attempts for one run: budget, LLM call (replayed, cached or
    sent), code extraction, evaluation (deduplicated by code hash), every step recorded in the
    store. What strategies read: `attempts`, `best()`, `judged()`, `stop_reason()`, `prompts`."""

    def __init__(self, run: SearchRun, *, budget: Budget, eval_options: EvalOptions, prompts: PromptContext,
                 on_event: Callable[[str, Attempt], None] | None = None):
        self.run_id, self.problem, self.store, self.client = run.run_id, run.problem, run.store, run.client
        self.settings, self.budget = run.llm_settings(), budget
        self.eval_options, self.prompts, self.use_cache = eval_options, prompts, run.config.use_cache
        self.on_event = on_event or (lambda kind, attempt: None)
        # Called when an answer is in, before its verdict (an interactive session shows it live).
        self.on_answer: Callable[[Attempt], None] = lambda attempt: None
        # `judge`: the caller's (a bench's, on this machine or a cluster), which the caller closes.
        # Default: the pipeline's own warm Evaluator (the reference worker and a pre-started
        # candidate worker kept between candidates; see kernelopt/sandbox/batch.py), made at the
        # first candidate and made afresh after a harness failure.
        self._warm_judge, self._owns_judge = run.judge, run.judge is None
        self.attempts: list[Attempt] = []
        self.conversations = 0           # tool-calling conversations started (conversation.py)
        self.fatal: Exception | None = None
        self._occurrences: Counter[str] = Counter()
        self._evaluations: dict[str, Future] = {}
        self._leading = 0.0  # the conservative speedup of the best verdict so far (selection.py)
        self._lock = threading.Lock()
        self._llm_pool = ThreadPoolExecutor(max(1, self.settings.concurrency), thread_name_prefix="llm")
        self._eval_pool = ThreadPoolExecutor(max(1, run.config.eval_workers), thread_name_prefix="eval")

    def close(self, interrupted: bool = False) -> None:
        """Wait for the calls and the evaluation in flight, then stop the judge. Interrupted:
        wait for neither (what was judged is stored already; a resume sends and judges the rest
        again), and stop the judge at once, which ends the evaluation in flight."""
        self._llm_pool.shutdown(wait=not interrupted, cancel_futures=True)
        self._eval_pool.shutdown(wait=not interrupted, cancel_futures=True)
        if self._owns_judge and self._warm_judge is not None:
            self._warm_judge.close(at_once=interrupted)

    def _evaluate(self, code: str) -> EvalResult:
        """Evaluations run on the one eval thread, so the judge is used sequentially."""
        if self._warm_judge is None:
            self._warm_judge = Evaluator(self.problem, self.eval_options)
        try:
            return self._warm_judge.evaluate(code)
        except BaseException:
            if self._owns_judge:  # a harness failure: start afresh for the next candidate
                self._warm_judge.close()
                self._warm_judge = None
            raise

    # what strategies use ---------------------------------------------------------------------

    def stop_reason(self) -> str | None:
        return self.budget.stop_reason()

    def attempt(self, messages: list[dict], parent: Attempt | None = None,
                data: dict | None = None) -> Future | None:
        """Ask for one candidate and judge it; None when the budget allows no more."""
        if not self.budget.reserve_attempt():
            return None
        request = self.settings.request(messages)
        key, occurrence = self._next_key(request)
        attempt = Attempt(index=len(self.attempts) + 1, parent=parent, data=dict(data or {}))
        self.attempts.append(attempt)
        done: Future = Future()
        self._llm_pool.submit(self._run_attempt, attempt, request, key, occurrence, done)
        return done

    def judge_code(self, code: str, parent: Attempt | None = None, data: dict | None = None,
                   call_id: int | None = None) -> Future | None:
        """Judge a program that no LLM answer held as such: an engineer's hand edit in an
        interactive session, or a tool call's argument (`call_id`: the LLM call that made it,
        `data["tool_call_id"]` its id; a replayed conversation finds its candidate stored).
        Recorded as a candidate, judged in the same lane and deduplicated like every answer.
        None when the budget allows no more evaluations."""
        if not self.budget.reserve_evaluation(asked=call_id is not None):
            return None
        with self._lock:
            attempt = Attempt(index=len(self.attempts) + 1, parent=parent, data=dict(data or {}),
                              code=code, code_hash=code_hash(code))
            self.attempts.append(attempt)
        stored = (self.store.candidate_for_tool_call(call_id, attempt.data["tool_call_id"])
                  if call_id is not None and "tool_call_id" in attempt.data else None)
        if stored:
            attempt.candidate_id = stored["id"]
        else:
            parent_id = parent.candidate_id if parent else None
            attempt.candidate_id = self.store.add_candidate(self.run_id, call_id, parent_id, code,
                                                            attempt.code_hash, None, attempt.data)
        done: Future = Future()
        self._evaluation(attempt).add_done_callback(lambda f: self._judged(attempt, f, done))
        return done

    def rejudge(self, attempt: Attempt) -> Future | None:
        """Judge a taken-up attempt whose evaluation never finished (its run was stopped while it
        was judged); None when the budget allows no more evaluations."""
        if not self.budget.reserve_evaluation():
            return None
        done: Future = Future()
        self._evaluation(attempt).add_done_callback(lambda f: self._judged(attempt, f, done))
        return done

    def take_up(self, attempts: list[Attempt], calls: list[dict]) -> None:
        """Continue a stored run without replaying a strategy (an interactive session): its
        attempts as they were, and its requests' occurrences counted, so that asking the same
        thing again is a new call rather than a replay of the stored answer."""
        self.attempts.extend(attempts)
        numbers = [a.data["conversation"] for a in attempts if isinstance(a.data.get("conversation"), int)]
        self.conversations = max(numbers, default=-1) + 1
        with self._lock:
            for call in calls:
                key = call["request_key"]
                self._occurrences[key] = max(self._occurrences[key], call["occurrence"] + 1)

    def critique(self, attempt: Attempt) -> str | None:
        """An optional diagnosis of a failed or slow attempt by the LLM (one more call)."""
        if not self.budget.reserve_call():
            return None
        request = self.settings.request(self.prompts.messages("critique.j2", last=attempt.view()))
        key, occurrence = self._next_key(request)
        try:
            return self._call(request, key, occurrence, "critique").content
        except LLMConfigError as exc:
            self._fail(exc)
        except LLMCallError:
            pass
        return None

    def chat(self, request: dict, purpose: str) -> LLMCallRecord:
        """One LLM call of a conversation (budget reserved by the caller): replayed from this
        run, else the cache, else the endpoint. LLMCallError / LLMConfigError as `_call`."""
        key, occurrence = self._next_key(request)
        return self._call(request, key, occurrence, purpose)

    def run_task(self, task: Callable[[], Attempt | None]) -> Future:
        """Runs a strategy's own task (a tool-calling conversation) beside the LLM calls."""
        return self._llm_pool.submit(task)

    def fail(self, exc: Exception) -> None:
        """Stops the run for an error every further call would repeat."""
        self._fail(exc)

    def best(self) -> Attempt | None:
        """The run's leader (selection.leader): a later candidate takes the lead only when it is
        clearly faster, not on a lucky reading."""
        return leader(self.attempts)

    def judged(self) -> list[Attempt]:
        """Attempts with a response (code or a format error), in order: what prompts can cite."""
        return [a for a in self.attempts if a.status not in ("llm_error", "not_evaluated")]

    # internals -------------------------------------------------------------------------------

    def _next_key(self, request: dict) -> tuple[str, int]:
        key = request_key(request)
        with self._lock:
            occurrence = self._occurrences[key]
            self._occurrences[key] += 1
        return key, occurrence

    def _fail(self, exc: Exception) -> None:
        with self._lock:
            self.fatal = self.fatal or exc
        self.budget.stop(f"stopped: {exc}")

    def _run_attempt(self, attempt: Attempt, request: dict, key: str, occurrence: int,
                     done: Future) -> None:
        try:
            self._answer(attempt, request, key, occurrence)
        except Exception as exc:  # never lose the run to one attempt's surprise
            attempt.eval_error = f"internal error: {type(exc).__name__}: {exc}"
        if attempt.code is None:
            self.budget.release_evaluation()
            self._finish(attempt, done)
            return
        self.on_answer(attempt)
        judged = self._evaluation(attempt)
        judged.add_done_callback(lambda f: self._judged(attempt, f, done))

    def _answer(self, attempt: Attempt, request: dict, key: str, occurrence: int) -> None:
        if self.budget.stop_reason() and self.fatal:
            attempt.llm_error = "not sent: the run stopped"
            return
        try:
            call = self._call(request, key, occurrence, "generate")
        except LLMConfigError as exc:
            self._fail(exc)
            attempt.llm_error = str(exc)
            return
        except LLMCallError as exc:
            attempt.llm_error = str(exc)
            return
        attempt.answer_source = call.source
        try:
            extracted = extract_code(call.content or "", self.prompts.backend)
            attempt.code, attempt.code_hash = extracted.code, code_hash(extracted.code)
        except FormatError as exc:
            attempt.format_error = str(exc)
        stored = self.store.candidate_for_call(call.id) if call.source == "run" else None
        if stored:
            attempt.candidate_id = stored["id"]
        else:
            parent_id = attempt.parent.candidate_id if attempt.parent else None
            attempt.candidate_id = self.store.add_candidate(
                self.run_id, call.id, parent_id, attempt.code, attempt.code_hash,
                attempt.format_error, attempt.data)

    def _call(self, request: dict, key: str, occurrence: int, purpose: str) -> LLMCallRecord:
        """A finished call of this run, else the cross-run cache, else the endpoint."""
        record = self.store.find_call(self.run_id, key, occurrence)
        if record is None and self.use_cache:
            cached = self.store.cached_answer(key, occurrence)
            if cached is not None:
                cached.id = self.store.add_call(
                    self.run_id, key, occurrence, purpose, request, content=cached.content,
                    reasoning=cached.reasoning, response=cached.response, prompt_tokens=cached.prompt_tokens,
                    completion_tokens=cached.completion_tokens, cost=0.0, source="cache")
                record = cached
        if record is None:
            record = self._call_endpoint(request, key, occurrence, purpose)
        self.budget.add_usage(record.prompt_tokens + record.completion_tokens, record.cost)
        return record

    def _call_endpoint(self, request: dict, key: str, occurrence: int, purpose: str) -> LLMCallRecord:
        if self.client is None:
            raise LLMConfigError("no LLM endpoint configured")
        try:
            c = self.client.complete(request)
        except (LLMCallError, LLMConfigError) as exc:
            self.store.add_call(self.run_id, key, occurrence, purpose, request, error=str(exc))
            raise
        call_id = self.store.add_call(
            self.run_id, key, occurrence, purpose, request, content=c.content, reasoning=c.reasoning,
            response=c.response, prompt_tokens=c.prompt_tokens, completion_tokens=c.completion_tokens,
            latency_s=c.latency_s, cost=c.cost, attempts=c.attempts)
        self.store.cache_answer(key, occurrence, c.content, c.reasoning, c.response,
                                c.prompt_tokens, c.completion_tokens)
        return LLMCallRecord(id=call_id, content=c.content, reasoning=c.reasoning,
                          prompt_tokens=c.prompt_tokens, completion_tokens=c.completion_tokens,
                          latency_s=c.latency_s, cost=c.cost, source="endpoint", error=None,
                          response=c.response)

    def _evaluation(self, attempt: Attempt) -> Future:
        """The verdict for this code: judged once per run, however often it is proposed."""
        code, digest = attempt.code, attempt.code_hash
        if code is None or digest is None:
            raise ValueError(f"attempt {attempt.index} has no code to judge")
        with self._lock:
            known = self._evaluations.get(digest)
            if known is not None:
                attempt.duplicate = True
                self.budget.release_evaluation()
                return known
            stored = self.store.find_evaluation(self.run_id, digest)
            if stored is not None:
                future: Future = Future()
                replayed = EvalResult.model_validate_json(stored)
                self._leading = max(self._leading, conservative_speedup(replayed))
                future.set_result(replayed)
            else:
                future = self._eval_pool.submit(self._judge, code, digest)
            self._evaluations[digest] = future
            return future

    def _judge(self, code: str, digest: str) -> EvalResult | None:
        """The verdict for new code. One that would take the lead is measured head to head with
        the leader: judged again, with the leader judged between its two readings, and keeps the
        lower of them (selection.py): the best of many noisy readings is biased upward (the
        winner's curse), and a leader crowned on one lucky reading, or on a machine that grew
        quieter since the leader was judged, would steer the search."""
        if self.fatal:
            return None
        try:
            result = self._evaluate(code)
            if result.correct and conservative_speedup(result) > self._leading:
                incumbent = self._measure_leader_again()
                result = head_to_head(result, self._evaluate(code), incumbent)
        except FATAL_EVAL_ERRORS as exc:
            self._fail(exc)
            return None
        if result.correct:
            self._leading = max(self._leading, conservative_speedup(result))
        self.store.add_evaluation(self.run_id, digest, result)
        return result

    def _measure_leader_again(self) -> HeadToHead | None:
        """The run's leader judged once more, now (None before there is one)."""
        incumbent = self.best()
        if incumbent is None or incumbent.code is None or incumbent.code_hash is None:
            return None
        fresh = self._evaluate(incumbent.code)
        return HeadToHead(index=incumbent.index, code_hash=incumbent.code_hash,
                          speedup=fresh.speedup if fresh.correct else None)

    def _judged(self, attempt: Attempt, judged: Future, done: Future) -> None:
        exc = judged.exception()
        if exc is not None:
            attempt.eval_error = f"internal error: {type(exc).__name__}: {exc}"
        elif judged.result() is None:
            attempt.eval_error = f"not evaluated: {self.fatal}"
        else:
            attempt.result = judged.result()
            if attempt.correct:
                self.budget.record_speedup(attempt.score)
        self._finish(attempt, done)

    def _finish(self, attempt: Attempt, done: Future) -> None:
        try:
            self.on_event("attempt", attempt)
        finally:
            done.set_result(attempt)
