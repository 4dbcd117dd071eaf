"""A bounded schemathesis run against `kernelopt serve`'s own /openapi.json (issue 34): requests
generated from the API's description, valid and not, get no 5xx. schemathesis is in the dev
extra (CI runs this); skipped where it is not installed."""

from __future__ import annotations

import pytest
from conftest import REPO

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402

from kernelopt.kernelbench import load_problem_set  # noqa: E402
from kernelopt.rewards.service import RewardService, start_server  # noqa: E402
from kernelopt.sandbox import EvalOptions, EvalResult  # noqa: E402

PROBLEMS = load_problem_set(REPO / "examples" / "level1").problems


class InstantEvaluator:
    """Every program is incorrect at once: the run tests the HTTP layer, not the referee."""

    def __init__(self, problem, options, jobs):
        self.problem = problem

    def evaluate_many(self, sources):
        for index, _ in enumerate(sources):
            yield index, EvalResult(status="incorrect", correct=False, problem_name=self.problem.name)

    def close(self):
        pass


@pytest.fixture(scope="module")
def served():
    service = RewardService(PROBLEMS, EvalOptions(device="cpu"), evaluator_factory=InstantEvaluator,
                            request_timeout=30)
    server = start_server(service)
    yield server
    server.stop(timeout=5)


def test_no_generated_request_gets_a_server_error(served):
    # Each operation's strategy driven by hypothesis directly (schemathesis' pytest plugin is not
    # needed): up to 40 requests per operation, generated from the served description.
    operations = [result.ok() for result in schemathesis.openapi.from_url(served.url + "/openapi.json")
                  .get_all_operations()]
    assert {operation.path for operation in operations} >= {"/v1/evaluate", "/v1/openrlhf", "/healthz"}
    for operation in operations:
        @given(operation.as_strategy())
        @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def no_server_error(case):
            case.call_and_validate(base_url=served.url, checks=[not_a_server_error])

        no_server_error()
