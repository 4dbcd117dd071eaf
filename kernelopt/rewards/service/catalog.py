"""The problem set a service was started with, looked up by the ids requests use."""

from __future__ import annotations

from collections.abc import Iterable

from kernelopt.kernelbench import Problem
from kernelopt.rewards.service.errors import BadRequest


def problem_ids(problem: Problem) -> list[str]:
    """The ids a problem of a loaded set answers to: "level/id" (e.g. "1/3"; the bare id when
    the set has no levels) and its name."""
    ids = []
    if problem.problem_id is not None:
        ids.append(f"{problem.level}/{problem.problem_id}" if problem.level is not None else str(problem.problem_id))
    ids.append(problem.name)
    return ids


class ProblemCatalog:
    """The loaded problem set, by id. A name shared by several problems is ambiguous."""

    def __init__(self, problems: Iterable[Problem] = ()):
        self.problems = list(problems)
        self._by_id: dict[str, Problem | None] = {}  # None: ambiguous
        for problem in self.problems:
            for key in problem_ids(problem):
                self._by_id[key] = None if key in self._by_id and self._by_id[key] is not problem else problem

    def __len__(self) -> int:
        return len(self.problems)

    def get(self, problem_id: str) -> Problem:
        if not self.problems:
            raise BadRequest(f"unknown problem id {problem_id!r}: no problem set is loaded; send the reference "
                             'program as {"source": ...}, or start the service with --kernelbench SET')
        if problem_id not in self._by_id:
            examples = ", ".join(problem_ids(self.problems[0]))
            raise BadRequest(f"unknown problem id {problem_id!r}: the loaded set has {len(self.problems)} problems, "
                             f"named by level/id or by name (e.g. {examples}); GET /v1/problems lists them")
        problem = self._by_id[problem_id]
        if problem is None:
            raise BadRequest(f"problem id {problem_id!r} is ambiguous (several problems have that name): "
                             "use level/id, e.g. 1/3")
        return problem

    def listing(self) -> list[dict]:
        return [{"ids": problem_ids(p), "name": p.name, "level": p.level, "problem_id": p.problem_id,
                 "hash": p.content_hash} for p in self.problems]
