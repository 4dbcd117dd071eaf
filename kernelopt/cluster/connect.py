"""Reaching a Ray cluster: `ray` imported here only (lazily, it is an extra), and the one
`connect` every command's `--ray [ADDRESS]` goes through."""

from __future__ import annotations

import os

INSTALL_HINT = "pip install 'kernelopt[ray]'"
LOCAL = "local"   # --ray local: start a Ray instance on this machine
AUTO = "auto"     # --ray without an address: $RAY_ADDRESS, else the cluster running on this machine


class ClusterError(RuntimeError):
    """The cluster cannot do what was asked (no Ray, unreachable, lacks a device); the message
    says what to do."""


def require_ray():
    """The ray module, or ClusterError saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ClusterError(f"--ray needs Ray, which is not installed here: {INSTALL_HINT}") from exc
    return ray


def connect(address: str | None, *, num_cpus: float | None = None):
    """Join the cluster at `address` ("local": start one on this machine; None or "auto":
    $RAY_ADDRESS, else the one started on this machine with `ray start --head`). Idempotent: a
    process already connected stays connected. Returns the ray module."""
    ray = require_ray()
    if ray.is_initialized():
        return ray
    settings = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR",
                "configure_logging": False}
    try:
        if address == LOCAL:
            ray.init(address="local", num_cpus=num_cpus, **settings)
        else:
            target = address if address not in (None, AUTO) else os.environ.get("RAY_ADDRESS") or "auto"
            ray.init(address=target, **settings)
    except ConnectionError as exc:
        raise ClusterError(f"cannot reach the Ray cluster at {address or os.environ.get('RAY_ADDRESS') or 'auto'}: "
                           f"{exc}. Start one with `ray start --head` (docs/scale.md), pass its address "
                           "(--ray HOST:6379) or set RAY_ADDRESS; --ray local starts one on this machine") from exc
    return ray


def is_connected() -> bool:
    """Whether this process is connected to a Ray cluster already (without importing ray)."""
    import sys

    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def disconnect() -> None:
    """Leave the cluster (and stop a local instance this process started)."""
    try:
        import ray
    except ImportError:
        return
    if ray.is_initialized():
        ray.shutdown()
