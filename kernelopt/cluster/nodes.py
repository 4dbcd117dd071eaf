"""What each node of a Ray cluster offers (for `kernelopt doctor --ray`): its resources, its
GPUs and the kernelopt, torch and Python it would judge with, asked of the node itself by a
small task pinned to it."""

from __future__ import annotations

from kernelopt.cluster.connect import connect

PROBE_TIMEOUT_S = 120.0


def _probe() -> dict:
    """Runs on the node: the software a judging actor there would use, and its GPUs."""
    import platform
    import socket
    import subprocess

    facts: dict[str, object] = {"host": socket.gethostname(), "python": platform.python_version()}
    try:
        import kernelopt

        facts["kernelopt"] = kernelopt.__version__
    except ImportError as exc:
        facts["kernelopt"] = f"not importable: {exc}"
    try:
        import torch

        facts["torch"] = torch.__version__
    except ImportError:
        facts["torch"] = None
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=20)
        facts["gpu_models"] = done.stdout.split("\n")[:-1] if done.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired):
        facts["gpu_models"] = []
    return facts


def cluster_report(address: str | None) -> dict:
    """{"address", "nodes": [{node_id, address, alive, cpus, gpus, kernelopt, torch, python,
    gpu_models | error}], "cpus", "gpus"} for the cluster at `address`."""
    ray = connect(address)
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = ray.remote(num_cpus=0)(_probe)
    nodes, pending = [], {}
    for node in ray.nodes():
        resources = node.get("Resources", {})
        row = {"node_id": node["NodeID"], "address": node.get("NodeManagerAddress"), "alive": node["Alive"],
               "cpus": resources.get("CPU", 0), "gpus": resources.get("GPU", 0)}
        nodes.append(row)
        if node["Alive"]:
            strategy = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
            pending[node["NodeID"]] = probe.options(scheduling_strategy=strategy).remote()
    for row in nodes:
        ref = pending.get(row["node_id"])
        if ref is None:
            continue
        try:
            row.update(ray.get(ref, timeout=PROBE_TIMEOUT_S))
        except Exception as exc:  # noqa: BLE001 - a node that cannot answer is what doctor reports
            row["error"] = f"{type(exc).__name__}: {exc}"[:500]
    resources = ray.cluster_resources()
    return {"address": ray.get_runtime_context().gcs_address, "nodes": nodes,
            "cpus": resources.get("CPU", 0), "gpus": resources.get("GPU", 0)}
