"""The docker backend against a real daemon and the sandbox image (the `docker` marker: skipped
without them on a developer's machine, failed without them in CI, where scripts/docker_tests.sh
starts a private daemon and builds the CPU image). What only a real daemon shows: the container's
limits (memory, pids, network), its cgroup adopted by the host, a container killed or paused from
outside, and that nothing is left behind."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest
from conftest import REPO

from kernelopt.kernelbench import load_problem
from kernelopt.sandbox import containers, evaluate

docker = pytest.importorskip("docker")
pytestmark = pytest.mark.docker

RELU = REPO / "examples" / "level1" / "1_ReLU.py"
# A candidate of 1_ReLU whose forward first runs STEP (a statement), then computes honestly.
CANDIDATE = """import os, sys, time
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
{step}
        return torch.relu(x)
"""


def candidate(step: str) -> str:
    return CANDIDATE.format(step="\n".join("        " + line for line in step.strip().splitlines()))


def options(fast_options, **extra):
    return fast_options(**{"isolation": "docker", "image": containers.DEFAULT_IMAGE, **extra})


def quick(fast_options, **extra):
    """For a test of the sandbox, not of timing: the fewest trials and timed calls."""
    return options(fast_options, timing_budget=0.3, correctness_trials=2, warmup_calls=1, min_timed_calls=3, **extra)


def mine(client) -> list:
    """This process's worker containers, running or not."""
    owner = f"{socket.gethostname()}:{os.getpid()}"
    return [c for c in client.containers.list(all=True) if c.labels.get(containers.OWNER_LABEL) == owner]


@pytest.fixture
def client():
    return docker.from_env()


def test_an_honest_candidate_is_correct_in_containers_whose_cgroup_the_host_holds(client, fast_options):
    source = (REPO / "examples/candidates/1_ReLU/relu_clamp.py").read_text()
    result = evaluate(load_problem(RELU), source, quick(fast_options))
    assert result.status == "correct", result.message
    assert result.isolation.backend == "docker" and result.isolation.containment == "docker"
    assert "container's own cgroup" in result.isolation.containment_detail
    assert "frozen, charged and killed by the host" in result.isolation.containment_detail, (
        "a local daemon's container cgroup is adopted: the host freezes and charges it itself")
    assert "uncontained" not in result.flags
    assert result.isolation.wakeup_sources_denied, "the worker's timer filter holds under docker's own seccomp profile"
    assert not mine(client), "no container outlives its evaluation"


def test_the_container_has_no_network_no_capabilities_and_a_read_only_root(client, fast_options):
    probe = candidate("""
if self.calls == 1:
    print("interfaces", sorted(os.listdir("/sys/class/net")), file=sys.stderr)
    import socket
    try:
        socket.create_connection(("1.1.1.1", 53), timeout=2)
        print("network: reached", file=sys.stderr)
    except OSError as exc:
        print("network: refused", exc, file=sys.stderr)
    try:
        open("/opt/kernelopt/planted", "w")
        print("root: writable", file=sys.stderr)
    except OSError:
        print("root: read-only", file=sys.stderr)
    print("uid", os.getuid(), "capeff", open("/proc/self/status").read().split("CapEff:")[1].split()[0], file=sys.stderr)
    # Groups below the root it sees (v2), or below each v1 controller's root: none but its own root.
    roots = ["/sys/fs/cgroup"] if os.path.exists("/sys/fs/cgroup/cgroup.controllers") else [
        "/sys/fs/cgroup/" + entry for entry in os.listdir("/sys/fs/cgroup")]
    groups = [root + "/" + entry for root in roots if os.path.isdir(root) for entry in os.listdir(root)
              if os.path.isdir(root + "/" + entry)]
    print("groups seen", groups, file=sys.stderr)
""")
    result = evaluate(load_problem(RELU), probe, quick(fast_options))
    assert result.status == "correct", result.message
    output = result.candidate_output
    assert "interfaces ['lo']" in output and "network: refused" in output
    assert "root: read-only" in output
    assert "uid 0 " not in output and "capeff 0000000000000000" in output
    assert "groups seen []" in output, "its own cgroup namespace: no other worker's group in sight"


def test_a_fork_bomb_meets_the_containers_pids_limit(client, fast_options):
    # posix_spawn: small processes, so the pids limit is met before the memory watchdog's
    bomb = candidate("""
if self.calls == 1:
    children = 0
    try:
        while children < 5000:
            os.posix_spawn("/bin/sleep", ["sleep", "60"], {})
            children += 1
    except OSError as exc:
        print("spawned", children, "then", exc.strerror, file=sys.stderr)
""")
    result = evaluate(load_problem(RELU), bomb, quick(fast_options, timeout=60))
    assert result.status in ("rejected", "runtime_error"), result.message
    spawned = [line for line in result.candidate_output.splitlines() if line.startswith("spawned")]
    assert spawned, result.candidate_output[-2000:]
    assert int(spawned[0].split()[1]) < containers.ContainerLimits(memory_bytes=0).pids, spawned
    assert "Resource temporarily unavailable" in spawned[0]
    assert not mine(client)


def test_a_container_out_of_memory_is_judged_out_of_memory_not_the_machine(client, fast_options):
    hog = candidate("""
if self.calls == 1:
    kept = []
    while True:
        kept.append(torch.ones(64 << 20, dtype=torch.uint8))
""")
    result = evaluate(load_problem(RELU), hog, quick(fast_options, memory_limit=1_000_000_000))
    assert result.status in ("rejected", "runtime_error"), result.message
    assert "memory limit" in result.message and "machine ran out" not in result.message, result.message
    assert not mine(client)


def _act_on_the_candidates_container(client, action) -> threading.Thread:
    """Once the candidate's container says it is inside forward (its log), `action(container)`,
    from a thread, as an operator or a crashing daemon would."""

    def run():
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            for container in mine(client):
                try:
                    if b"inside forward" in container.logs(stdout=False, stderr=True):
                        action(container)
                        return
                except docker.errors.APIError:
                    pass
            time.sleep(0.2)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


SLOW_AT_THE_FIRST_CALL = candidate("""
if self.calls == 1:
    print("inside forward", file=sys.stderr, flush=True)
    time.sleep(20)
""")


def test_a_container_killed_from_outside_is_a_runtime_error_and_is_removed(client, fast_options):
    killer = _act_on_the_candidates_container(client, lambda c: c.kill())
    result = evaluate(load_problem(RELU), SLOW_AT_THE_FIRST_CALL, quick(fast_options, timeout=60))
    killer.join(timeout=5)
    assert result.status == "runtime_error", result.message
    assert "killed" in result.message or "exited" in result.message, result.message
    assert not mine(client)


def test_a_container_paused_forever_times_out_and_is_removed(client, fast_options):
    pauser = _act_on_the_candidates_container(client, lambda c: c.pause())
    result = evaluate(load_problem(RELU), SLOW_AT_THE_FIRST_CALL, quick(fast_options, timeout=8))
    pauser.join(timeout=5)
    assert result.status == "timeout", result.message
    assert not mine(client), "a paused container is removed all the same"


def test_doctor_reports_the_daemon_the_image_its_protocol_and_gpus():
    from kernelopt.sandbox import doctor
    from kernelopt.sandbox.worker import wire

    check = doctor._check_docker("cpu")
    assert check.ok, check.detail
    assert f"worker protocol {wire.PROTOCOL_VERSION}" in check.detail
    assert "daemon" in check.detail and containers.DEFAULT_IMAGE in check.detail
    assert "GPUs: not passed through" in check.detail or "GPUs: passed through" in check.detail


# -- the GPU flavour: its CUDA parts ----------------------------------------------------------

GPU_IMAGE = "kernelopt-sandbox-gpu"  # the tag `scripts/docker_image.sh --flavour gpu --tag ...` gives it
BUILD_GPU_IMAGE = f"bash scripts/docker_image.sh --flavour gpu --tag {GPU_IMAGE}"


def _flavour(client, image: str) -> str:
    try:
        return (client.images.get(image).labels or {}).get(containers.FLAVOUR_LABEL, "")
    except docker.errors.ImageNotFound:
        return ""


def gpu_flavour_image(client) -> str | None:
    """The GPU flavour of the sandbox image, where one is built: $KERNELOPT_GPU_IMAGE, else
    kernelopt-sandbox-gpu, else kernelopt-sandbox when it is the GPU flavour (a GPU host's)."""
    named = os.environ.get("KERNELOPT_GPU_IMAGE")
    for image in ([named] if named else [GPU_IMAGE, containers.DEFAULT_IMAGE]):
        if _flavour(client, image) == "gpu":
            return image
    return None


@pytest.fixture
def gpu_image(client):
    image = gpu_flavour_image(client)
    if image is None:
        pytest.skip(f"needs the GPU flavour of the sandbox image, which CI does not build: `{BUILD_GPU_IMAGE}` "
                    f"(offline, no GPU needed), or `docker build -t {GPU_IMAGE} .`")
    return image


# Run inside the image: each check prints one line, "ok NAME: ..." or "FAILED NAME: ...", so
# one container run shows them all.
CUDA_TOOLCHAIN = r'''
import glob, subprocess, sys, traceback
sys.path.insert(0, "/opt/kernelopt")
KERNEL = "__global__ void twice(const float* x, float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 2 * x[i]; }"

def check(name, step):
    try:
        print("ok", name + ":", step(), flush=True)
    except BaseException:
        print("FAILED", name + ":", traceback.format_exc().replace("\n", " | "), flush=True)

def nvcc():
    return subprocess.run(["nvcc", "--version"], capture_output=True, text=True, check=True).stdout.strip().splitlines()[-2]

def extension():
    import torch
    from torch.utils.cpp_extension import load_inline
    cuda = KERNEL + """
torch::Tensor run(torch::Tensor x) { auto y = torch::empty_like(x); twice<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel()); return y; }"""
    module = load_inline("twice", cpp_sources="torch::Tensor run(torch::Tensor x);", cuda_sources=cuda,
                         functions=["run"], build_directory="/tmp", verbose=False)
    return f"built and loaded {module.__name__} (run: {callable(module.run)}), torch {torch.__version__} cuda {torch.version.cuda}"

def nvrtc():
    from worker import nvrtc_runner
    found = [p for p in glob.glob("/opt/venv/lib/python3*/site-packages/nvidia/*/lib/libnvrtc.so*") if "builtins" not in p]
    library = nvrtc_runner.load(sorted(found)[0])
    options = ["-std=c++17", "-arch=sm_90", "--device-as-default-execution-space", "-I/opt/venv/cuda/include"]
    cubin, lowered, log = nvrtc_runner.compile_cubin(library, 'extern "C" ' + KERNEL, options, ["twice"])
    assert cubin is not None, log
    elf = cubin[:4] == b"\x7fELF"
    return f"NVRTC {nvrtc_runner.version(library)}, a cubin of {len(cubin)} bytes (ELF: {elf}), {lowered}"

def cupy():
    import cupy
    return f"cupy {cupy.__version__}"

for name, step in [("nvcc", nvcc), ("extension", extension), ("nvrtc", nvrtc), ("cupy", cupy)]:
    check(name, step)
'''


@pytest.mark.docker_gpu_image
def test_the_gpu_image_compiles_cuda_without_a_gpu(client, gpu_image):
    """The toolkit's wheels make a compiler without a device: nvcc runs; load_inline compiles,
    links and loads a CUDA extension (loading needs libcudart, not a GPU); the worker's NVRTC
    path compiles a kernel to a cubin; CuPy imports. Running any of it needs a GPU (below)."""
    output = client.containers.run(gpu_image, ["python3", "-c", CUDA_TOOLCHAIN], remove=True, network_mode="none",
                                   environment={"TORCH_CUDA_ARCH_LIST": "9.0", "MAX_JOBS": "2"},
                                   stdout=True, stderr=True).decode(errors="replace")
    lines = {line.split(":")[0]: line for line in output.splitlines() if line.startswith(("ok ", "FAILED "))}
    for name in ("nvcc", "extension", "nvrtc", "cupy"):
        assert f"ok {name}" in lines, f"{name}: {lines.get(f'FAILED {name}', 'no line')}\n{output[-3000:]}"
    assert "release 13.0" in lines["ok nvcc"], lines["ok nvcc"]
    assert "built and loaded twice (run: True)" in lines["ok extension"] and "cuda 13." in lines["ok extension"]
    assert "(ELF: True)" in lines["ok nvrtc"] and "'twice': 'twice'" in lines["ok nvrtc"], lines["ok nvrtc"]


@pytest.mark.gpu
@pytest.mark.docker_gpu
@pytest.mark.parametrize("case", ["honest/relu_cuda_extension.py", "honest/relu_cupy_rawkernel.py"])
def test_cuda_candidates_run_in_the_gpu_image_with_only_the_hosts_driver(gpu_image, fast_options, case):
    """load_inline's CUDA build and CuPy's NVRTC kernels, judged on the GPU in a container."""
    from test_adversarial import CORPUS, check_verdict, parse_case, problem_path

    parsed = parse_case(CORPUS / case)
    result = evaluate(load_problem(problem_path(parsed.problem)), parsed.path.read_text(),
                      options(fast_options, device="cuda", image=gpu_image, timeout=parsed.timeout))
    assert check_verdict(parsed, result, 0.0) == [], result.message
