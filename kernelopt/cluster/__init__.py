"""Scaling out on a Ray cluster (docs/scale.md): judging actors, one per GPU (or per share of a
CPU-only node's cores), each holding warm Evaluators as a local run does; the driver keeps the
LLM calls and alone writes results.

- `connect`: `--ray [ADDRESS]` (local, an address, or $RAY_ADDRESS); `ClusterError`;
- `pool`: `JudgePool` (the actors, checkout of an idle one, retry on a new actor when one dies),
  `RemoteEvaluator` (an Evaluator's interface over the pool), `run_on_pool`;
- `actor`: `JudgeWorker`, what runs on the nodes;
- `nodes`: `cluster_report`, each node's resources and software (`kernelopt doctor --ray`).

Layer: above sandbox/ (it drives Evaluators), below rewards/ and bench/ (which drive it).
`ray` is an extra (`pip install 'kernelopt[ray]'`), imported only inside this package, lazily.
"""

from kernelopt.cluster.connect import INSTALL_HINT, ClusterError, connect, disconnect, require_ray
from kernelopt.cluster.pool import ClusterSpec, JudgePool, RemoteEvaluator, run_on_pool

__all__ = ["INSTALL_HINT", "ClusterError", "ClusterSpec", "JudgePool", "RemoteEvaluator", "connect", "disconnect",
           "require_ray", "run_on_pool"]
