"""The run store: every run, LLM call, candidate and evaluation, in one SQLite file.

Crash safety comes from SQLite itself (write-ahead log, one transaction per record): a run
killed at any point keeps everything recorded before the kill. Resuming replays the strategy
from the start and takes finished LLM calls and evaluations from here instead of redoing them,
so the store is the single source of truth and the strategies keep no state of their own.

Tables:
- runs: one row per `kernelopt optimize` run: problem, settings (JSON), status and summary.
- llm_calls: every call of a run: the full request, the response, usage, latency, cost, where
  the answer came from (endpoint or cache) and any error. Keyed within a run by the request's
  hash and its occurrence (the k-th identical request: best-of-n sends identical requests).
- candidates: the code extracted from each answer (or the format error), its hash, parent and
  the strategy's data (depth, generation, ...).
- evaluations: one verdict per distinct code hash of a run (identical candidates are judged
  once), with the full `EvalResult` JSON.
- llm_cache: answers by (request hash, occurrence) across runs, for reproducible reruns.
- tool_calls: the tool calls of `--strategy agent` conversations and of `kernelopt mcp`: which
  LLM call asked for it (none for an MCP client), its name, arguments, the text answered and the
  candidate it judged. A conversation's messages are its calls' requests and these results.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    status TEXT NOT NULL,
    problem_name TEXT,
    problem_path TEXT,
    problem_hash TEXT,
    problem_source TEXT,
    model TEXT,
    strategy TEXT,
    config TEXT NOT NULL,
    summary TEXT,
    error TEXT
);
CREATE TABLE IF NOT EXISTS llm_calls (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs(id),
    request_key TEXT NOT NULL,
    occurrence INTEGER NOT NULL,
    purpose TEXT NOT NULL,
    request TEXT NOT NULL,
    content TEXT,
    reasoning TEXT,
    response TEXT,
    prompt_tokens INTEGER DEFAULT 0,
    completion_tokens INTEGER DEFAULT 0,
    latency_s REAL,
    cost REAL,
    attempts INTEGER,
    source TEXT,
    error TEXT,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS llm_calls_by_key ON llm_calls(run_id, request_key, occurrence);
CREATE TABLE IF NOT EXISTS candidates (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs(id),
    llm_call_id INTEGER REFERENCES llm_calls(id),
    parent_id INTEGER REFERENCES candidates(id),
    code_hash TEXT,
    code TEXT,
    format_error TEXT,
    strategy_data TEXT,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS candidates_by_call ON candidates(llm_call_id);
CREATE TABLE IF NOT EXISTS evaluations (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs(id),
    code_hash TEXT NOT NULL,
    status TEXT NOT NULL,
    correct INTEGER NOT NULL,
    speedup REAL,
    message TEXT,
    result TEXT NOT NULL,
    created REAL NOT NULL,
    UNIQUE (run_id, code_hash)
);
CREATE TABLE IF NOT EXISTS llm_cache (
    request_key TEXT NOT NULL,
    occurrence INTEGER NOT NULL,
    content TEXT NOT NULL,
    reasoning TEXT,
    response TEXT,
    prompt_tokens INTEGER DEFAULT 0,
    completion_tokens INTEGER DEFAULT 0,
    created REAL NOT NULL,
    PRIMARY KEY (request_key, occurrence)
);
CREATE TABLE IF NOT EXISTS tool_calls (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs(id),
    llm_call_id INTEGER REFERENCES llm_calls(id),
    conversation INTEGER NOT NULL,
    turn INTEGER NOT NULL,
    call_id TEXT NOT NULL,
    name TEXT NOT NULL,
    arguments TEXT,
    result TEXT NOT NULL,
    is_error INTEGER NOT NULL,
    candidate_id INTEGER REFERENCES candidates(id),
    created REAL NOT NULL,
    UNIQUE (run_id, llm_call_id, call_id)
);
"""

DEFAULT_STORE = Path("kernelopt-runs") / "store.sqlite"


class StoreError(Exception):
    """The store cannot be opened or does not hold what was asked for."""


def default_store_path() -> Path:
    return Path(os.environ.get("KERNELOPT_STORE") or DEFAULT_STORE)


def calls_cost(calls: list[dict]) -> float | None:
    """What a run's LLM calls cost, in US dollars (a cached answer costs nothing). None where an
    answered call has no cost: its model had no price (--price), so the sum would read as free."""
    return total_cost([c["cost"] for c in calls if c.get("error") is None])


def total_cost(costs: list[float | None]) -> float | None:
    """The sum of runs' costs; None where any is unknown."""
    if any(cost is None for cost in costs):
        return None
    return round(sum(c for c in costs if c is not None), 6)


def describe_cost(cost: float | None) -> str:
    """A cost in US dollars, or why there is none (its model had no price: --price)."""
    return f"${cost:.4f}" if cost is not None else "cost unknown (no --price for the model)"


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


@dataclass
class LLMCallRecord:
    """One LLM call of a run (a row of llm_calls, or an answer from the response cache);
    `source`: "run" (this run's finished call), "cache" or "endpoint"."""

    id: int
    content: str | None
    reasoning: str | None
    prompt_tokens: int
    completion_tokens: int
    latency_s: float | None
    cost: float | None
    source: str
    error: str | None
    response: dict | None = None    # the endpoint's full answer (its tool calls), when kept


class RunStore:
    """Thread-safe: one connection, one lock, one transaction per write. Open one with
    `RunStore.open`, the one way every caller opens the store."""

    @classmethod
    def open(cls, path: str | Path | None = None, *, existing: bool = False) -> RunStore:
        """The store at `path`, by default $KERNELOPT_STORE or kernelopt-runs/store.sqlite. A new
        store is created there unless `existing` (readers: opening would create an empty one);
        StoreError when it cannot be opened or, with `existing`, is not there."""
        path = Path(path) if path else default_store_path()
        if existing and not path.is_file():
            raise StoreError(f"no run store at {path} (give --store PATH, or set KERNELOPT_STORE)")
        return cls(path)

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the run store {self.path}: {exc}") from exc
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _write(self, sql: str, params: tuple) -> None:
        with self._lock, self._db:
            self._db.execute(sql, params)

    def _insert(self, sql: str, params: tuple) -> int:
        """Run an INSERT; the new row's id."""
        with self._lock, self._db:
            row_id = self._db.execute(sql, params).lastrowid
        if row_id is None:  # (sqlite3 sets it after every INSERT)
            raise StoreError(f"no row id after {sql.split('(')[0].strip()}")
        return row_id

    def _read(self, sql: str, params: tuple = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    # runs ------------------------------------------------------------------------------------

    def create_run(self, run_id: str, problem, model: str, strategy: str, config: dict) -> None:
        now = time.time()
        self._write(
            "INSERT INTO runs (id, created, updated, status, problem_name, problem_path, problem_hash,"
            " problem_source, model, strategy, config) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (run_id, now, now, "running", problem.name, str(problem.path or ""), problem.content_hash,
             problem.source, model, strategy, json.dumps(config)))

    def set_run_status(self, run_id: str, status: str, summary: dict | None = None,
                       error: str | None = None) -> None:
        self._write("UPDATE runs SET status=?, updated=?, summary=COALESCE(?, summary), error=? WHERE id=?",
                    (status, time.time(), json.dumps(summary) if summary is not None else None,
                     error, run_id))

    def run(self, run_id: str) -> dict:
        rows = self._read("SELECT * FROM runs WHERE id=?", (run_id,))
        if not rows:
            raise StoreError(f"no run {run_id!r} in {self.path} (see `kernelopt runs list`)")
        return _run_dict(rows[0])

    def runs(self) -> list[dict]:
        return [_run_dict(r) for r in self._read("SELECT * FROM runs ORDER BY created")]

    # LLM calls -------------------------------------------------------------------------------

    def find_call(self, run_id: str, key: str, occurrence: int) -> LLMCallRecord | None:
        """The finished (successful) call of this run with this key and occurrence, if any."""
        rows = self._read(
            "SELECT * FROM llm_calls WHERE run_id=? AND request_key=? AND occurrence=? AND error IS NULL"
            " ORDER BY id LIMIT 1", (run_id, key, occurrence))
        return _call_record(rows[0]) if rows else None

    def add_call(self, run_id: str, key: str, occurrence: int, purpose: str, request: dict, *,
                 content: str | None = None, reasoning: str | None = None, response: dict | None = None,
                 prompt_tokens: int = 0, completion_tokens: int = 0, latency_s: float | None = None,
                 cost: float | None = None, attempts: int | None = None, source: str = "endpoint",
                 error: str | None = None) -> int:
        return self._insert(
            "INSERT INTO llm_calls (run_id, request_key, occurrence, purpose, request, content, reasoning,"
            " response, prompt_tokens, completion_tokens, latency_s, cost, attempts, source, error, created)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (run_id, key, occurrence, purpose, json.dumps(request), content, reasoning,
             json.dumps(response) if response is not None else None, prompt_tokens, completion_tokens,
             latency_s, cost, attempts, source, error, time.time()))

    def calls(self, run_id: str) -> list[dict]:
        return [dict(r) for r in self._read("SELECT * FROM llm_calls WHERE run_id=? ORDER BY id", (run_id,))]

    # the cross-run response cache --------------------------------------------------------------

    def cached_answer(self, key: str, occurrence: int) -> LLMCallRecord | None:
        rows = self._read("SELECT * FROM llm_cache WHERE request_key=? AND occurrence=?", (key, occurrence))
        if not rows:
            return None
        r = rows[0]
        return LLMCallRecord(id=0, content=r["content"], reasoning=r["reasoning"],
                          prompt_tokens=r["prompt_tokens"], completion_tokens=r["completion_tokens"],
                          latency_s=None, cost=None, source="cache", error=None,
                          response=json.loads(r["response"]) if r["response"] else None)

    def cache_answer(self, key: str, occurrence: int, content: str, reasoning: str | None,
                     response: dict | None, prompt_tokens: int, completion_tokens: int) -> None:
        self._write(
            "INSERT OR REPLACE INTO llm_cache (request_key, occurrence, content, reasoning, response,"
            " prompt_tokens, completion_tokens, created) VALUES (?,?,?,?,?,?,?,?)",
            (key, occurrence, content, reasoning, json.dumps(response) if response is not None else None,
             prompt_tokens, completion_tokens, time.time()))

    # candidates and evaluations ----------------------------------------------------------------

    def candidate_for_call(self, call_id: int) -> dict | None:
        rows = self._read("SELECT * FROM candidates WHERE llm_call_id=? ORDER BY id LIMIT 1", (call_id,))
        return _candidate_dict(rows[0]) if rows else None

    def add_candidate(self, run_id: str, call_id: int | None, parent_id: int | None, code: str | None,
                      code_hash: str | None, format_error: str | None, strategy_data: dict) -> int:
        return self._insert(
            "INSERT INTO candidates (run_id, llm_call_id, parent_id, code_hash, code, format_error,"
            " strategy_data, created) VALUES (?,?,?,?,?,?,?,?)",
            (run_id, call_id, parent_id, code_hash, code, format_error, json.dumps(strategy_data),
             time.time()))

    def candidates(self, run_id: str) -> list[dict]:
        rows = self._read(
            "SELECT c.*, e.status, e.speedup, e.message FROM candidates c LEFT JOIN evaluations e"
            " ON e.run_id = c.run_id AND e.code_hash = c.code_hash WHERE c.run_id=? ORDER BY c.id",
            (run_id,))
        return [_candidate_dict(r) for r in rows]

    def candidates_with_calls(self, run_id: str) -> list[dict]:
        """Each candidate of the run with the request and answer of its LLM call and the full
        `EvalResult` JSON of its code (`result`, None when not judged): what an export needs."""
        rows = self._read(
            "SELECT c.id, c.parent_id, c.code, c.code_hash, c.format_error, c.strategy_data,"
            " l.request, l.content, l.reasoning, e.result FROM candidates c"
            " LEFT JOIN llm_calls l ON l.id = c.llm_call_id"
            " LEFT JOIN evaluations e ON e.run_id = c.run_id AND e.code_hash = c.code_hash"
            " WHERE c.run_id=? ORDER BY c.id", (run_id,))
        return [_candidate_dict(r) for r in rows]

    def find_evaluation(self, run_id: str, code_hash: str) -> str | None:
        """The stored `EvalResult` JSON for this code in this run, if judged already."""
        rows = self._read("SELECT result FROM evaluations WHERE run_id=? AND code_hash=?", (run_id, code_hash))
        return rows[0]["result"] if rows else None

    def add_evaluation(self, run_id: str, code_hash: str, result) -> None:
        self._write(
            "INSERT OR REPLACE INTO evaluations (run_id, code_hash, status, correct, speedup, message,"
            " result, created) VALUES (?,?,?,?,?,?,?,?)",
            (run_id, code_hash, result.status, int(result.correct), result.speedup, result.message,
             result.model_dump_json(), time.time()))

    def candidate_for_tool_call(self, call_id: int | None, tool_call_id: str) -> dict | None:
        """The candidate a tool call of this LLM call judged (a resumed conversation)."""
        rows = self._read("SELECT * FROM candidates WHERE llm_call_id IS ? AND"
                          " json_extract(strategy_data, '$.tool_call_id')=? ORDER BY id LIMIT 1",
                          (call_id, tool_call_id))
        return _candidate_dict(rows[0]) if rows else None

    # tool calls ----------------------------------------------------------------------------------

    def add_tool_call(self, run_id: str, llm_call_id: int | None, conversation: int, turn: int,
                      call_id: str, name: str, arguments: str | None, result: str, is_error: bool,
                      candidate_id: int | None) -> None:
        """Recorded once: a replayed conversation finds its calls here already."""
        self._write(
            "INSERT OR IGNORE INTO tool_calls (run_id, llm_call_id, conversation, turn, call_id, name,"
            " arguments, result, is_error, candidate_id, created) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (run_id, llm_call_id, conversation, turn, call_id, name, arguments, result, int(is_error),
             candidate_id, time.time()))

    def tool_calls(self, run_id: str) -> list[dict]:
        return [dict(r) for r in self._read("SELECT * FROM tool_calls WHERE run_id=? ORDER BY id", (run_id,))]

    def evaluations(self, run_id: str) -> list[dict]:
        rows = self._read("SELECT id, code_hash, status, correct, speedup, message, created FROM evaluations"
                          " WHERE run_id=? ORDER BY id", (run_id,))
        return [dict(r) for r in rows]


def _run_dict(row: sqlite3.Row) -> dict:
    run = dict(row)
    run["config"] = json.loads(run["config"]) if run["config"] else {}
    run["summary"] = json.loads(run["summary"]) if run["summary"] else None
    return run


def _candidate_dict(row: sqlite3.Row) -> dict:
    candidate = dict(row)
    candidate["strategy_data"] = json.loads(candidate["strategy_data"] or "{}")
    return candidate


def _call_record(row: sqlite3.Row) -> LLMCallRecord:
    return LLMCallRecord(id=row["id"], content=row["content"], reasoning=row["reasoning"],
                      prompt_tokens=row["prompt_tokens"], completion_tokens=row["completion_tokens"],
                      latency_s=row["latency_s"], cost=row["cost"], source="run", error=row["error"],
                      response=json.loads(row["response"]) if row["response"] else None)
