"""The reward service: the referee behind a JSON HTTP API, for RL trainers (docs/serve.md).

    service = RewardService(problem_set, EvalOptions(device="cuda"), reward="speedup")
    server = start_server(service, "127.0.0.1", 8321)       # serves in a thread; server.url
    ...
    server.stop()                                            # answers what it accepted, then closes

A request names a problem (an id of the loaded set, or a reference source) and a completion
(an LLM's whole answer, or bare code). The program is pulled out of the completion first: an
answer with none gets its `format_error` verdict and reward at once, without touching a worker.
Otherwise the request becomes a job for the problem's *lane*:

- One lane per problem and option set, holding one `Evaluator` (a warm reference worker,
  candidates in flight up to `jobs`). The lane's thread takes every job waiting for it as one
  batch (`evaluate_many`), so concurrent requests for one problem share the warm reference.
- Lanes of different problems run concurrently, up to `concurrency` at once (a global
  semaphore: several problems timing on one GPU at the same moment would disturb each other's
  timings, so the default is one). Idle lanes are kept in a small LRU cache (`cache_size`); an
  evicted lane closes its Evaluator, and so does `close()`.
- Backpressure: at most `queue_size` jobs wait (accepted, not yet evaluating). A request that
  does not fit is refused at once with 429 and Retry-After; a request that is accepted always
  gets an answer: its verdict, or an explicit error (504 past `request_timeout`, 422 when the
  reference itself fails, 500 when the sandbox fails, 503 when the service shuts down).

The modules, one job each:

- `core`: `RewardService`, which ties the others together and knows nothing of HTTP;
- `requests`: request bodies checked and turned into `EvalItem`s (`REQUEST_OPTIONS`, OpenRLHF's
  queries); `answers`: verdicts turned into JSON answers;
- `catalog`: the loaded problem set by id; `jobs`: admission and the queue's counts;
  `lanes`: the per-problem evaluators and their threads; `metrics`: what /metrics shows;
- `errors`: each error answer as an exception with its status;
- `schemas`: the API's pydantic models, for the OpenAPI document;
- `guard`: who may call (Host, Origin, JSON bodies, the bearer token), also used by `tune`;
- `http`: the FastAPI app and its one route table; `server`: uvicorn serving it (`RewardServer`,
  `start_server`).

torch is imported with the Evaluator, in the lane threads; fastapi and uvicorn with this package.
"""

from kernelopt.rewards.service.answers import openrlhf_answer
from kernelopt.rewards.service.catalog import ProblemCatalog, problem_ids
from kernelopt.rewards.service.core import PendingAnswers, RewardService
from kernelopt.rewards.service.errors import (BadRequest, MethodNotAllowed, NotFound, Overloaded, ReferenceFailed,
                                              RequestTimedOut, ServiceError, ShuttingDown, as_service_error)
from kernelopt.rewards.service.http import ENDPOINTS, create_app
from kernelopt.rewards.service.lanes import EvaluatorFactory, default_evaluator_factory
from kernelopt.rewards.service.metrics import Metrics
from kernelopt.rewards.service.requests import (EVALUATE_FIELDS, OPERATOR_OPTIONS, REQUEST_OPTIONS, EvalItem,
                                                response_part)
from kernelopt.rewards.service.server import RewardServer, start_server

__all__ = ["ENDPOINTS", "EVALUATE_FIELDS", "OPERATOR_OPTIONS", "REQUEST_OPTIONS", "BadRequest", "EvalItem",
           "EvaluatorFactory", "MethodNotAllowed", "Metrics", "NotFound", "Overloaded", "PendingAnswers",
           "ProblemCatalog", "ReferenceFailed", "RequestTimedOut", "RewardServer", "RewardService", "ServiceError",
           "ShuttingDown", "as_service_error", "create_app", "default_evaluator_factory", "openrlhf_answer",
           "problem_ids", "response_part", "start_server"]
