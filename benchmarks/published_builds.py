"""Does every candidate of a published release build? Each candidate's extensions, built by
kernelopt's own builder, without a GPU.

For each candidate of a release in CUDA-L1's format (`kernelopt bench --solutions FILE` reads the
same files; see kernelopt/bench/published.py):
1. capture: the candidate runs in the sandbox (the isolation backend the referee uses, on the
   CPU) with `torch.utils.cpp_extension.load_inline`/`load` replaced by a recorder that turns
   each call into the build request our candidate worker would send the host (the worker's own
   `build_request`, worker/extensions.py); its module is executed and `ModelNew(*get_init_inputs())` constructed, so
   extensions built in `__init__` are seen too. Nothing is built or run on a device here.
2. build: each request goes to the host's BuildService (the content-addressed cache the referee
   uses), for TORCH_CUDA_ARCH_LIST (default 9.0, the H100).
Reported per candidate: its requests, each build's result, seconds and whether it was cached, and
for a failure the compiler's first error line; in total how many candidates build, fail to
build, call no extension builder at all (PyTorch only: not loaded), or call it only on a path
taken with a GPU (`if x.is_cuda:` ...; `torch.cuda.is_available()` is claimed true in the
capture, tensors stay on the CPU), which only a GPU run can build. Everything in OUT/builds.jsonl (resumable: a
rerun skips what was reported) and OUT/builds.md. Needs the CUDA build of torch and nvcc:

    TORCH_CUDA_ARCH_LIST=9.0 .venv-cuda/bin/python benchmarks/published_builds.py \\
        --solutions CUDA-L1/optimized_cuda_code/h100.json --level 1 --out cuda-l1-builds [--build-mode fast]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kernelopt.bench.published import read_published  # noqa: E402
from kernelopt.kernelbench import parse_id_ranges  # noqa: E402
from kernelopt.sandbox import isolation  # noqa: E402
from kernelopt.sandbox.builds import BuildCache, BuildFailure, BuildService, parse_request  # noqa: E402

SANDBOX_DIR = REPO / "kernelopt" / "sandbox"

# Runs inside the sandbox: the candidate with a recording load_inline/load. Prints the requests.
CAPTURE = r'''
import json, sys
sys.path.insert(0, sys.argv[1])
from torch.utils import cpp_extension
from worker.extensions import build_request

requests, problems = [], []

class _NotBuilt:
    """What the recorder returns: the candidate's module goes on loading; a call fails."""
    def __getattr__(self, name):
        def not_built(*args, **kwargs):
            raise RuntimeError("extension not built: capturing only")
        return not_built

def recorder(name, original):
    def record(*args, **kwargs):
        request = build_request(name, original, args, kwargs)
        if request is None:
            problems.append(f"a {name} call the host builder does not take (it would build in place)")
        else:
            requests.append(request)
        return _NotBuilt()
    return record

for name in ("load_inline", "load"):
    setattr(cpp_extension, name, recorder(name, getattr(cpp_extension, name)))

def run(path, name):
    scope = {"__name__": name}
    exec(compile(open(path).read(), path, "exec"), scope)
    return scope

import torch
# Most candidates build lazily, on a path taken only with a GPU (`if torch.cuda.is_available():`
# in __init__ or in forward's first call): claim one, so that those paths run up to the build.
torch.cuda.is_available = lambda: True

def step(what, action):
    try:
        return action()
    except BaseException as exc:  # a later step may need a real GPU; what was captured counts
        problems.append(f"{what}: {type(exc).__name__}: {str(exc)[:200]}")
        return None

reference = step("loading the reference", lambda: run(sys.argv[2], "reference"))
candidate = step("loading the candidate", lambda: run(sys.argv[3], "candidate"))
if reference and candidate and "ModelNew" in candidate:
    model = step("ModelNew(...)", lambda: candidate["ModelNew"](*reference["get_init_inputs"]()))
    if model is not None and not requests:
        step("forward on CPU inputs", lambda: model(*reference["get_inputs"]()))
print(json.dumps({"requests": requests, "problems": problems}))
'''

EXTENSION_CALL = re.compile(r"\bload_inline\b|\bcpp_extension\b")
FIRST_ERROR = re.compile(r"^.*\berror\b.*$", re.IGNORECASE | re.MULTILINE)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--solutions", required=True, type=Path, help="a release file in CUDA-L1's format")
    parser.add_argument("--level", type=int, action="append", default=None, help="only this level (repeatable)")
    parser.add_argument("--ids", default=None, help="only these task ids, e.g. 1,3,5-9")
    parser.add_argument("--out", type=Path, default=Path("published-builds"))
    parser.add_argument("--build-mode", default="fast", choices=["fast", "exact"])
    parser.add_argument("--cache", type=Path, default=None, help="build cache (default: the referee's)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per build")
    return parser.parse_args(argv)


def capture(backend, reference: str, candidate: str, timeout: float = 300.0) -> dict:
    """The build requests the candidate makes when loaded (and constructed), in the sandbox."""
    with tempfile.TemporaryDirectory(prefix="capture-") as scratch_name:
        scratch = Path(scratch_name)
        (scratch / "tmp").mkdir()
        (scratch / "reference.py").write_text(reference)
        (scratch / "candidate.py").write_text(candidate)
        command = [sys.executable, "-E", "-s", "-c", CAPTURE, str(SANDBOX_DIR),
                   str(scratch / "reference.py"), str(scratch / "candidate.py")]
        command = isolation.wrap_command(backend, command, scratch, "cpu", (), read_only=(SANDBOX_DIR,))
        env = isolation.scrubbed_environment(scratch)
        try:
            proc = subprocess.run(command, cwd=scratch, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"requests": [], "problems": [f"loading took over {timeout:.0f} s"]}
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"requests": [], "problems": [f"the capture exited {proc.returncode}: {proc.stderr.strip()[-400:]}"]}


def build_all(service: BuildService, requests: list[dict], timeout: float) -> list[dict]:
    builds = []
    for raw in requests:
        started = time.monotonic()
        try:
            build = service.build(parse_request(raw), "cpu", time.monotonic() + timeout)
        except (BuildFailure, ValueError) as exc:
            builds.append({"name": raw.get("name"), "ok": False, "seconds": time.monotonic() - started,
                           "cached": False, "error": str(exc)[:400]})
            continue
        error = "" if build.ok else first_error(build.log)
        builds.append({"name": raw.get("name"), "ok": build.ok, "seconds": round(time.monotonic() - started, 2),
                       "cached": build.cached, "error": error})
    return builds


def first_error(log: str) -> str:
    """The compiler's first error line, without the build directory's path."""
    match = FIRST_ERROR.search(log)
    line = (match.group(0) if match else log.strip()[-300:]).strip()
    return re.sub(r"^\S*/build/", "", line)[:300]


def falls_back(code: str) -> bool:
    """Whether the candidate catches its own build's failure (a `try:` around the builder call),
    so that a failed build leaves it running whatever its `except` branch does, usually PyTorch."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and node.handlers:
            for inner in (n for statement in node.body for n in ast.walk(statement)):
                if isinstance(inner, ast.Call) and _called_name(inner.func) in ("load_inline", "load"):
                    return True
    return False


def _called_name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def judge_builds(solution, reference: str, backend, service: BuildService, timeout: float) -> dict:
    record = {"key": solution.key, "level": solution.level, "problem_id": solution.problem_id,
              "sample": solution.sample, "problems": [], "builds": []}
    if not EXTENSION_CALL.search(solution.code):
        return {**record, "outcome": "no_extension"}  # nothing to build: not even loaded
    captured = capture(backend, reference, solution.code)
    record.update(problems=captured["problems"], builds=build_all(service, captured["requests"], timeout),
                  falls_back=falls_back(solution.code))
    return {**record, "outcome": outcome(record["builds"])}


def outcome(builds: list[dict]) -> str:
    if not builds:
        return "gpu_path_only"  # it calls the builder, but only on a path the CPU never takes
    return "builds" if all(b["ok"] for b in builds) else "fails"


def report(records: list[dict], machine: str, arch: str) -> str:
    counts = Counter(r["outcome"] for r in records)
    built = [b for r in records for b in r["builds"] if b["ok"] and not b["cached"]]
    failed = [r for r in records if r["outcome"] == "fails"]
    lines = [f"# Published candidates built by kernelopt's builder ({machine}, sm {arch})", "",
             f"{len(records)} candidates: {counts['builds']} build, {counts['fails']} fail to build "
             f"({sum(r.get('falls_back', False) for r in failed)} of them catch the failure and fall back), "
             f"{counts['no_extension']} call no extension builder (PyTorch only), {counts['gpu_path_only']} call the "
             "builder only on a path taken with a GPU (not seen here).",
             f"Cold builds: {len(built)}, median {median([b['seconds'] for b in built])} s.", "",
             "| level | task | outcome | falls back | seconds | first error or problem |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in records:
        if r["outcome"] in ("builds", "no_extension"):
            continue
        why = "; ".join([b["error"] for b in r["builds"] if not b["ok"]] + r["problems"])
        fallback = "yes" if r.get("falls_back") else "no" if r["outcome"] == "fails" else ""
        lines.append(f"| {r['level']} | {r['problem_id']} | {r['outcome']} | {fallback} | "
                     f"{sum(b['seconds'] for b in r['builds']):.0f} | {' '.join(why.split()).replace('|', '/')[:200]} |")
    return "\n".join(lines) + "\n"


def median(values: list[float]) -> str:
    if not values:
        return "—"
    ordered = sorted(values)
    return f"{ordered[len(ordered) // 2]:.1f}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    published = read_published(args.solutions, set(args.level) if args.level else None,
                               parse_id_ranges(args.ids) if args.ids else None)
    references = {(p.level, p.problem_id): p.source for p in published.problem_set}
    args.out.mkdir(parents=True, exist_ok=True)
    log_path = args.out / "builds.jsonl"
    done = {}
    if log_path.exists():
        done = {json.loads(line)["key"]: json.loads(line) for line in log_path.read_text().splitlines() if line}
    backend = isolation.select_backend("auto")
    service = BuildService(BuildCache(args.cache), backend, args.build_mode)
    with log_path.open("a") as log:
        for index, solution in enumerate(published.solutions, 1):
            if solution.key in done:
                continue
            print(f"[{index}/{len(published.solutions)}] {solution.label}", file=sys.stderr, flush=True)
            record = judge_builds(solution, references[(solution.level, solution.problem_id)], backend, service,
                                  args.timeout)
            log.write(json.dumps(record) + "\n")
            log.flush()
            done[solution.key] = record
    text = report(list(done.values()), os.environ.get("KERNELOPT_MACHINE", platform.node()),
                  os.environ.get("TORCH_CUDA_ARCH_LIST", isolation.DEFAULT_CUDA_ARCH_LIST_WITHOUT_GPU))
    (args.out / "builds.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
