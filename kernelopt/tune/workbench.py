"""The workbench's model: a Session as the page sees it (state, one candidate in detail, diffs),
and the actions the page starts, run one at a time on a worker thread so that requests return at
once and the results arrive as events."""

from __future__ import annotations

import dataclasses
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer, PythonLexer

from kernelopt.agent.prompting import profile_text
from kernelopt.agent.session import Candidate, Session, SessionError
from kernelopt.agent.strategies import STRATEGIES
from kernelopt.tune.events import EventHub
from kernelopt.tune.spots import ModelSpots

MAX_HINT = 4000
MAX_CODE = 1 << 20
MAX_SAMPLES = 16
MAX_CALLS = 200
HIGHLIGHT_CLASS = "hl"


class BadRequest(Exception):
    """The page (or a client) asked for something that cannot be done; the message says why."""


class Busy(BadRequest):
    """An action is running already."""


class Workbench:
    def __init__(self, session: Session, notices: list[str] | None = None, spots: ModelSpots | None = None,
                 open_problem: Callable[[Path], Session] | None = None):
        """`spots`: a model's extracted hot spots (`--model-spots`), which the page can open;
        `open_problem`: a new Session on a problem file, with this workbench's settings."""
        self.session = session
        self.spots = spots
        self.spot = spots.of_problem(session.config.problem_path) if spots else None
        self._open_problem = open_problem
        self.events = EventHub()
        self.notices: list[str] = list(notices or [])
        self.accepted: list[dict] = []
        self.busy: str | None = None
        self._lock = threading.Lock()
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="tune-action")
        session.listeners.append(self._relay)

    def judge_pending(self) -> bool:
        """Starts judging the candidates a resumed run left without a verdict; False if none."""
        pending = len(self.session.left_pending())
        if pending:
            self._start(f"judging {pending} candidate(s) left pending", self.session.judge_pending)
        return bool(pending)

    def close(self) -> None:
        self.session.stop("the workbench is closing")
        self._worker.shutdown(wait=True, cancel_futures=True)
        self.events.close()
        self.session.close()

    # what the page reads -----------------------------------------------------------------------

    def state(self) -> dict:
        s = self.session
        best = s.best
        return {"run_id": s.run_id, "problem": s.problem.name, "problem_path": s.config.problem_path,
                "model": s.config.model, "device": s.device, "busy": self.busy,
                "candidates": [c.to_json() for c in s.candidates], "best": best.number if best else None,
                "chart": best_by_calls(s.candidates), "usage": dataclasses.asdict(s.usage()),
                "notices": self.notices[-20:], "accepted": self.accepted, "strategies": list(STRATEGIES),
                "spots": {**self.spots.to_json(), "open": self.spot} if self.spots else None}

    def detail(self, number: int) -> dict:
        c = self._candidate(number)
        verdict = c.verdict
        return {**c.to_json(), "code": c.code, "code_html": highlighted(c.code or "", PythonLexer()),
                "error": c.error, "verdict": verdict.result.model_dump(mode="json") if verdict else None,
                "profile_text": profile_text(verdict.result) if verdict else None,  # as the model sees it
                "tool_call": self._tool_call(c.id)}

    def _tool_call(self, candidate_id: int | None) -> dict | None:
        """The tool call that judged this candidate (--strategy agent), with what the model read."""
        s = self.session
        for row in s.store.tool_calls(s.run_id) if candidate_id is not None else []:
            if row["candidate_id"] == candidate_id:
                return {k: row[k] for k in ("name", "conversation", "turn", "result", "is_error")}
        return None

    def diff(self, old: str, new: str) -> dict:
        try:
            d = self.session.diff(self._which(old), self._which(new))
        except SessionError as exc:
            raise BadRequest(str(exc)) from exc
        return {"old": d.old, "new": d.new, "text": d.text, "html": highlighted(d.text, DiffLexer())}

    # what the page does (the arguments are the request's JSON values, checked here) -----------

    def ask(self, parent: object, hint: object, n: object = 1) -> None:
        hint = checked_text(hint, "hint", MAX_HINT) or None
        if not isinstance(n, int) or not 1 <= n <= MAX_SAMPLES:
            raise BadRequest(f"n must be a whole number from 1 to {MAX_SAMPLES}")
        node = self._candidate(parent) if parent is not None else None
        what = f"sampling {n}" if n > 1 else "asking"
        self._start(f"{what} from {node.number}" if node else what,
                    lambda: self.session.sample(n, parent=node, hint=hint))

    def submit(self, parent: object, code: object) -> None:
        code = checked_text(code, "code", MAX_CODE)
        if not code.strip():
            raise BadRequest("the code is empty")
        node = self._candidate(parent) if parent is not None else None
        self._start("judging a hand edit", lambda: self.session.submit(code, parent=node))

    def run(self, strategy: object, calls: object) -> None:
        if not isinstance(strategy, str) or strategy not in STRATEGIES:
            raise BadRequest(f"unknown strategy {strategy!r}: choose one of {', '.join(STRATEGIES)}")
        if not isinstance(calls, int) or not 1 <= calls <= MAX_CALLS:
            raise BadRequest(f"calls must be a whole number from 1 to {MAX_CALLS}")
        self._start(f"running {strategy} for {calls} calls", lambda: self.session.run(strategy, calls=calls))

    def stop(self) -> None:
        self.session.stop()

    def open_spot(self, module: object) -> dict:
        """Opens the hot spot `module`'s problem in a new session (a new run in the store, with
        the same settings) in place of the current one, which is stored as finished."""
        if self.spots is None or self._open_problem is None:
            raise BadRequest("no hot spots to open: start kernelopt tune with --model-spots DIR "
                             "(the --out folder of kernelopt model extract)")
        spot = self.spots.find(module) if isinstance(module, str) else None
        if spot is None:
            raise BadRequest(f"no extracted hot spot {module!r}: choose one of "
                             f"{', '.join(s.module for s in self.spots.spots)}")
        with self._lock:
            if self.busy:
                raise Busy(f"busy: {self.busy} (stop it first)")
            self.busy = f"opening {module}"
        try:
            session = self._open_problem(spot.path)
        except SessionError as exc:
            raise BadRequest(f"cannot open {module}: {exc}") from exc
        finally:
            with self._lock:
                self.busy = None
        old, self.session, self.spot = self.session, session, spot.module
        old.listeners.remove(self._relay)
        session.listeners.append(self._relay)
        old.stop(f"the workbench opened {module}")
        old.close()
        state = self.state()
        self.events.publish("state", state)
        return state

    def accept(self, number: object, path: object, overwrite: object = False, create_dirs: object = False) -> dict:
        """Writes candidate `number` to `path`: never over an existing file unless `overwrite`,
        and into a missing folder outside the working directory only with `create_dirs`."""
        path = checked_text(path, "path", 4096).strip()
        if not path:
            raise BadRequest("give the path to write the candidate to")
        if "\x00" in path:
            raise BadRequest("the path holds a NUL character")
        if not isinstance(overwrite, bool) or not isinstance(create_dirs, bool):
            raise BadRequest("overwrite and create_dirs must be true or false")
        target = Path(path).expanduser()
        if target.is_dir():
            raise BadRequest(f"{target} is a folder: give a file name")
        if target.exists() and not overwrite:
            raise BadRequest(f"{target} already exists: choose another path, or overwrite it (overwrite: true)")
        if not target.parent.is_dir() and not create_dirs and not _inside(target.parent, Path.cwd()):
            raise BadRequest(f"the folder {target.parent} does not exist and is outside the working directory: "
                             "create it first, or ask for it (create_dirs: true)")
        try:
            accepted = self.session.accept(self._candidate(number), target)
        except SessionError as exc:
            raise BadRequest(str(exc)) from exc
        entry = {"number": number, "path": accepted.path, "command": accepted.command}
        self.accepted.append(entry)
        return entry

    # internals ---------------------------------------------------------------------------------

    def _start(self, label: str, action: Callable[[], object]) -> None:
        with self._lock:
            if self.busy:
                raise Busy(f"busy: {self.busy} (stop it first)")
            self.busy = label
        self.events.publish("busy", {"busy": label})
        self._worker.submit(self._run, action)

    def _run(self, action: Callable[[], object]) -> None:
        try:
            action()
        except SessionError as exc:
            self._notice(str(exc))
        except Exception as exc:  # the workbench outlives a surprise in one action; say what it was
            self._notice(f"internal error: {type(exc).__name__}: {exc}")
        finally:
            with self._lock:
                self.busy = None
            self.events.publish("busy", {"busy": None})

    def _notice(self, message: str) -> None:
        self.notices.append(message)
        self.events.publish("error", {"message": message})

    def _relay(self, kind: str, payload: dict) -> None:
        """The session's events (started, answered, judged, error, accepted) to the page."""
        if kind == "error":
            self.notices.append(payload["message"])
        self.events.publish(kind, payload)

    def _candidate(self, number) -> Candidate:
        if not isinstance(number, int) or isinstance(number, bool):
            raise BadRequest(f"a candidate is named by its number, not {number!r}")
        try:
            return self.session.candidate(number)
        except SessionError as exc:
            raise BadRequest(str(exc)) from exc

    def _which(self, name: str) -> Candidate | str:
        if name == "reference":
            return "reference"
        if not str(name).isdigit():
            raise BadRequest(f"diff takes candidate numbers or 'reference', not {name!r}")
        return self._candidate(int(name))


def best_by_calls(candidates: list[Candidate]) -> list[list[float]]:
    """The chart's points: [LLM calls so far, best speedup so far], at each new best."""
    points: list[list[float]] = []
    calls, best = 0, 0.0
    for c in candidates:
        calls += c.source != "hand"
        if c.correct and c.speedup is not None and c.speedup > best:
            best = c.speedup
            points.append([calls, round(best, 4)])
    return points


def highlighted(text: str, lexer) -> str:
    """HTML of `text` with syntax classes (Pygments escapes the text)."""
    return highlight(text, lexer, HtmlFormatter(nowrap=True, classprefix=f"{HIGHLIGHT_CLASS}-"))


def highlight_css() -> str:
    return HtmlFormatter(style="default", classprefix=f"{HIGHLIGHT_CLASS}-").get_style_defs(f".{HIGHLIGHT_CLASS}")


def checked_text(value, name: str, limit: int) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadRequest(f"{name} must be text")
    if len(value) > limit:
        raise BadRequest(f"{name} is too long ({len(value)} characters; at most {limit})")
    if any("\ud800" <= c <= "\udfff" for c in value):
        raise BadRequest(f"{name} holds a lone UTF-16 surrogate, which is not text")
    return value


def _inside(folder: Path, root: Path) -> bool:
    try:
        folder.resolve().relative_to(root.resolve())
        return True
    except (ValueError, OSError):
        return False
