"""Build serving: a candidate's build requests (load_inline's extensions, CuPy's NVRTC kernels),
answered by the host's builder from its cache or by a build, while the candidate loads."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from kernelopt.sandbox import builds as builds_module
from kernelopt.sandbox import isolation, nvrtc, rules
from kernelopt.sandbox.results import BuildRecord, EvalOptions
from kernelopt.sandbox.worker import commands


def build_service(options: EvalOptions, backend: isolation.Backend) -> builds_module.BuildService | None:
    """The host's builder for this evaluation's extensions (None: candidates build in place)."""
    if options.build_mode == "off" or backend.name == "docker":
        return None  # in a container the image's torch builds (the host's may differ)
    return builds_module.BuildService(builds_module.BuildCache(options.build_cache), backend, options.build_mode)


class BuildServer:
    """The builds of one candidate: the services, and a record of each build it was served."""

    def __init__(self, options: EvalOptions, backend: isolation.Backend, device: str):
        self.options, self.device = options, device
        self.builds = build_service(options, backend)
        self.kernel_compiles = nvrtc.NvrtcService(self.builds.cache, backend) if self.builds else None
        self.records: list[BuildRecord] = []
        self.seconds = 0.0  # waited for builds

    @property
    def offered(self) -> bool:
        return self.builds is not None

    def serve(self, raw: object, deadline: float, scratch: Callable[[], Path]) -> dict:
        """A build request, answered from the cache or by a build (the `built` reply)."""
        rules.enforce(rules.unoffered_build(self.offered))
        assert self.builds is not None and self.kernel_compiles is not None
        begin = time.monotonic()
        service: builds_module.BuildService | nvrtc.NvrtcService
        try:
            if nvrtc.is_request(raw):  # CuPy's NVRTC, or load_inline
                service = self.kernel_compiles
                build = service.compile(nvrtc.parse_request(raw), self.device, deadline - 1.0)
            else:
                service = self.builds
                build = service.build(builds_module.parse_request(raw), self.device, deadline - 1.0)
        except ValueError as exc:
            return commands.built(False, error=str(exc))
        except builds_module.BuildFailure as exc:
            if time.monotonic() >= deadline - 1.5:
                rules.enforce(rules.build_timeout(str(exc), self.options.timeout))
            return commands.built(False, error=str(exc))
        waited = time.monotonic() - begin
        self.seconds += waited
        self.records.append(BuildRecord(
            name=build.name, key=build.key, ok=build.ok, cached=build.cached, mode=build.mode,
            lean=build.lean, build_seconds=build.seconds, wait_seconds=round(waited, 4)))
        if not build.ok:
            return commands.built(False, error="compilation failed", log=build.log, cached=build.cached)
        path = service.deliver(build, scratch())
        return commands.built(True, path=path, cached=build.cached, lean=build.lean, lowered=build.lowered)
