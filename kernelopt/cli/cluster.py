"""`--ray [ADDRESS]` and its companions, defined once for bench, generate, baselines, serve and
doctor, and the judging pool they start (kernelopt/cluster, docs/scale.md)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from kernelopt.cli.errors import EnvironmentFailure, UsageError
from kernelopt.cli.text import progress

if TYPE_CHECKING:
    from kernelopt.cluster import JudgePool


def add_ray_options(p, pool: bool = True) -> None:
    """--ray; with `pool` also how many judging actors and their shares (doctor takes --ray only)."""
    group = p.add_argument_group("Ray cluster (docs/scale.md)")
    group.add_argument("--ray", nargs="?", const="auto", default=None, metavar="ADDRESS",
                       help="judge on a Ray cluster's actors: 'local' starts a Ray instance on this machine, an "
                            "address (HOST:6379, ray://HOST:10001) joins that cluster, no value joins $RAY_ADDRESS "
                            "or the cluster started here with `ray start --head`")
    if not pool:
        return
    group.add_argument("--ray-actors", type=int, default=None, metavar="N",
                       help="judging actors (default: one per GPU of the cluster; on a CPU-only cluster one per "
                            "--ray-cpus-per-actor cores)")
    group.add_argument("--ray-cpus-per-actor", type=float, default=1.0, metavar="C",
                       help="CPU-only clusters: the cores each actor claims for its timings (default 1)")
    group.add_argument("--ray-mix-devices", action="store_true",
                       help="allow actors on different GPU models in one run (the summary then groups results by "
                            "device model); without it a mixed cluster is refused")


def check_ray_args(args) -> None:
    """What --ray rules out: --gpus (a cluster's actors take the place of this machine's GPUs)."""
    if getattr(args, "gpus", None):
        raise UsageError("give --ray or --gpus, not both: with --ray, problems go to one judging actor per GPU "
                         "of the cluster")


@contextmanager
def ray_pool(args, device: str) -> Iterator[JudgePool | None]:
    """The judging pool --ray asks for on `device` (auto, cpu or cuda), or None without --ray;
    closed (and a local instance stopped) on leaving. A cluster that cannot meet the request is a
    UsageError before any work; one that fails during the work (actors dying in turn) an
    EnvironmentFailure."""
    if not getattr(args, "ray", None):
        yield None
        return
    from kernelopt.cluster import ClusterError, ClusterSpec, JudgePool, disconnect
    from kernelopt.cluster.connect import is_connected

    check_ray_args(args)
    owned = not is_connected()  # a caller's own connection (a notebook, a test) is left open
    if device not in ("auto", "cpu") and not device.startswith("cuda"):
        raise UsageError(f"--device {device}: with --ray use auto, cpu or cuda (each actor judges on its own GPU)")
    spec = ClusterSpec(address=args.ray, device=device, actors=args.ray_actors, cpus_per_actor=args.ray_cpus_per_actor,
                       mix_devices=args.ray_mix_devices)
    try:
        pool = JudgePool.start(spec)
    except ClusterError as exc:
        if owned:
            disconnect()
        raise UsageError(str(exc)) from exc
    progress(f"Ray: {pool.describe()}")
    try:
        yield pool
    except ClusterError as exc:
        raise EnvironmentFailure(str(exc)) from exc
    finally:
        pool.close()
        if owned:
            disconnect()
