"""Kernel backends (`--backend cuda|cupy|triton|cpp`): the registry and its usage errors, each
backend's prompt and expected format, the labels, and CuPy's compiles made by the host.

The NVRTC tests compile for real through libnvrtc (the CUDA toolkit, or the nvidia-cuda-nvrtc
wheel) and skip only where no libnvrtc is found. The worker-side hook needs CuPy importable (it
imports without a GPU: the modules are loaded from the host's cubin lazily); those tests skip
without it. Running the kernels needs a GPU: the honest CuPy and Triton ReLU candidates and the
side-stream hack are in tests/adversarial/ (markers gpu, cupy, triton).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import re
import secrets
import shutil
import time
from pathlib import Path

import pytest

from conftest import EXAMPLES, REPO
from kernelopt.agent.prompting import PromptContext
from kernelopt.cli import main as cli_main
from kernelopt.kernelbench import load_problem
from kernelopt.kernelbench.backends import BACKEND_CHOICES, BACKENDS, BackendError, resolve_backend
from kernelopt.kernelbench.completion import FormatError, extract_code
from kernelopt.sandbox import EvalOptions, nvrtc
from kernelopt.sandbox.batch import Evaluator
from kernelopt.sandbox.builds import BuildCache
from kernelopt.sandbox.isolation import Backend, kernel_cache_environment
from kernelopt.sandbox.kinds import optimization_kinds

NONE = Backend("none", False, False, False)
TEMPLATES = REPO / "tests" / "adversarial" / "templates"
RELU = EXAMPLES / "1_ReLU.py"
HAS_CUPY = importlib.util.find_spec("cupy") is not None
LIBNVRTC, NVRTC_VERSION = nvrtc.nvrtc_available()
needs_nvrtc = pytest.mark.skipif(LIBNVRTC is None, reason=f"no NVRTC here: {NVRTC_VERSION}")
needs_cupy = pytest.mark.skipif(not HAS_CUPY, reason="needs cupy (pip install 'kernelopt[cupy]')")

TEMPLATE_KERNEL = r"""
template <typename T>
__global__ void scale(const T* x, T* y, T factor, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * factor;
}
extern "C" __global__ void relu(const float* x, float* y, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
"""


# the registry and its usage errors ------------------------------------------------------------------

def test_the_choices_are_the_registry_and_auto_follows_the_device():
    assert BACKEND_CHOICES == ("auto", "cuda", "cupy", "triton", "cpp")
    assert resolve_backend(None, "cuda:0") == resolve_backend("auto", "cuda:1") == "cuda"
    assert resolve_backend(None, "cpu") == "cpp"
    assert resolve_backend("cpp", "cpu") == "cpp"
    assert {b.kind for b in BACKENDS.values()} == {"cuda_extension", "nvrtc_kernel", "triton", "cpp_extension"}


@pytest.mark.parametrize("backend", ["cupy", "triton", "cuda"])
def test_a_gpu_backend_on_the_cpu_is_a_usage_error(backend):
    with pytest.raises(BackendError, match=f"backend '{backend}' runs on a CUDA GPU, not on cpu"):
        resolve_backend(backend, "cpu")
    with pytest.raises(BackendError, match="runs on the CPU, not on cuda:0"):
        resolve_backend("cpp", "cuda:0")
    with pytest.raises(BackendError, match="unknown backend 'opencl'"):
        resolve_backend("opencl", "cuda:0")


def test_a_missing_package_names_the_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "triton" else real(name, *a))
    with pytest.raises(BackendError, match=r"pip install 'kernelopt\[triton\]'"):
        resolve_backend("triton", "cuda:0")
    assert resolve_backend("triton", "cuda:0", check_installed=False) == "triton"


def _usage_error(capsys, argv) -> str:
    assert cli_main(argv) == 2
    return capsys.readouterr().err


def test_the_commands_refuse_a_backend_the_device_cannot_run(capsys, tmp_path):
    endpoint = ["--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--device", "cpu"]
    err = _usage_error(capsys, ["optimize", str(RELU), "--backend", "cupy", "--store", str(tmp_path / "s.sqlite"),
                                *endpoint])
    assert "backend 'cupy' runs on a CUDA GPU, not on cpu" in err and "--backend cpp" in err
    err = _usage_error(capsys, ["bench", "--kernelbench", str(EXAMPLES.parent), "--level", "1", "--problems", "1",
                                "--backend", "triton", "--out", str(tmp_path / "b"), *endpoint])
    assert "backend 'triton' runs on a CUDA GPU" in err
    err = _usage_error(capsys, ["generate", "--problems", str(EXAMPLES.parent), "--level", "1", "--ids", "1",
                                "--samples", "1", "--backend", "cupy", "--out", str(tmp_path / "g"), *endpoint])
    assert "backend 'cupy' runs on a CUDA GPU" in err
    assert cli_main(["optimize", str(RELU), "--backend", "opencl", *endpoint]) == 2  # argparse: not a choice
    assert "invalid choice: 'opencl'" in capsys.readouterr().err


def test_the_session_api_refuses_it_too(tmp_path):
    from kernelopt.agent.session import Session, SessionError

    with pytest.raises(SessionError, match="backend 'triton' runs on a CUDA GPU"):
        Session.open(RELU, model="m", base_url="http://127.0.0.1:9/v1", device="cpu", backend="triton",
                     store=tmp_path / "s.sqlite", check=False)


def test_a_run_records_the_backend_it_asked_for(tmp_path):
    """The resolved backend is in the run's stored settings, so a resume asks for the same."""
    from kernelopt.agent.session import Session

    session = Session.open(RELU, model="m", base_url="http://127.0.0.1:9/v1", device="cpu",
                           store=tmp_path / "s.sqlite", check=False)
    try:
        assert session.config.backend == "cpp"
        assert session.store.run(session.run_id)["config"]["backend"] == "cpp"
        assert session.pipeline.prompts.backend == "cpp"
    finally:
        session.close()


# prompts ----------------------------------------------------------------------------------------------

RULES = {
    "cuda": ["torch.utils.cpp_extension.load_inline", "custom CUDA kernels"],
    "cpp": ["torch.utils.cpp_extension.load_inline", "custom C++ code"],
    "cupy": ["cupy.RawKernel", "cupy.RawModule", "cupy.from_dlpack(tensor)",
             "cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)", "NVRTC",
             "name_expressions", "No host synchronisation"],
    "triton": ["@triton.jit", "tl.constexpr", "torch's current stream", "no host synchronisation"],
}
EXAMPLE_MARKS = {
    "cuda": ["__global__ void mul_add_kernel", "load_inline("],
    "cpp": ["at::parallel_for", "load_inline("],
    "cupy": ['cupy.RawKernel(mul_add_source, "mul_add_kernel")', "cupy.from_dlpack(a)",
             "ExternalStream(torch.cuda.current_stream().cuda_stream)"],
    "triton": ["@triton.jit", "mul_add_kernel[grid](a, b, out, n, BLOCK=1024)"],
}


def _context(backend: str) -> PromptContext:
    return PromptContext(reference_source=RELU.read_text(), problem_name="1_ReLU", backend=backend,
                         device_desc="the CPU" if backend == "cpp" else "an NVIDIA H100")


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_each_backend_has_its_rules_and_its_worked_example(backend):
    system, user = (m["content"] for m in _context(backend).messages("first_attempt.j2"))
    assert BACKENDS[backend].writes in system.splitlines()[0]
    for rule in RULES[backend]:
        assert rule in system, (backend, rule)
    for mark in EXAMPLE_MARKS[backend]:
        assert mark in user, (backend, mark)
    others = [m for name, marks in EXAMPLE_MARKS.items() if name != backend for m in marks
              if m not in EXAMPLE_MARKS[backend]]
    assert not [m for m in others if m in user], backend
    if backend in ("cupy", "triton"):
        assert "load_inline" not in user and "load_inline` call" not in system
    # the worked example is a program the parser takes, and it parses
    example = user[:user.index("Now the reference program")]
    extracted = extract_code(example, backend)
    ast.parse(extracted.code)
    assert "class ModelNew" in extracted.code


@needs_nvrtc
def test_the_cupy_example_kernel_compiles_with_nvrtc(tmp_path):
    """The CUDA C of the worked example compiles as the host compiles a candidate's."""
    user = _context("cupy").render("first_attempt.j2")
    code = extract_code(user[:user.index("Now the reference program")], "cupy").code
    source = re.search(r'mul_add_source = r"""(.*?)"""', code, re.S).group(1)
    service = nvrtc.NvrtcService(BuildCache(tmp_path / "cache"), NONE)
    build = service.compile(nvrtc.parse_request({"builder": "nvrtc", "source": source}), "cpu",
                            time.monotonic() + 120)
    assert build.ok, build.log
    assert Path(build.library).read_bytes()[:4] == b"\x7fELF"


@pytest.mark.parametrize("backend,words", [("cupy", "cupy.RawKernel/RawModule"), ("triton", "@triton.jit"),
                                           ("cpp", "the C++ source strings"), (None, "the load_inline call")])
def test_the_format_error_names_the_backends_format(backend, words):
    with pytest.raises(FormatError) as caught:
        extract_code("I would write a kernel, but here is only prose.", backend)
    assert words in str(caught.value)


def test_labels_name_the_backends_kernels():
    cupy_source = "import cupy as cp\nk = cp.RawKernel('...', 'relu')\n"
    module_source = "from cupy import RawModule\nm = RawModule(code='...')\n"
    triton_source = "import triton\nimport triton.language as tl\n@triton.jit\ndef k(x): pass\n"
    nvrtc_build = [{"builder": "nvrtc", "name": "relu", "cuda": True, "ok": True}]
    for source in (cupy_source, module_source):
        kinds, flags = optimization_kinds(source, nvrtc_build, 0, [])
        assert kinds == ["nvrtc_kernel"] and flags == []  # a CuPy kernel is no unused extension
    assert optimization_kinds(triton_source, [], 0, [])[0] == ["triton"]
    assert optimization_kinds("import torch\n", [], 0, [])[0] == ["pytorch"]


# the host's NVRTC compiles -------------------------------------------------------------------------------

def _request(source: str = TEMPLATE_KERNEL, **extra) -> nvrtc.NvrtcRequest:
    return nvrtc.parse_request({"builder": "nvrtc", "source": source, **extra})


def test_every_part_of_a_compile_changes_its_key():
    base = dict(request=_request(), arch="sm_90", library="/lib/libnvrtc.so.13", version="13.0",
                includes=["/usr/local/cuda/include"])

    def key(**change):
        values = {**base, **change}
        return nvrtc.compile_key(values["request"], values["arch"], values["library"], values["version"],
                                 values["includes"])

    keys = [key(), key(request=_request(TEMPLATE_KERNEL + "\n")), key(request=_request(options=["-DX=1"])),
            key(request=_request(name_expressions=["scale<float>"])),
            key(request=_request(name_expressions=["scale<double>"])), key(arch="sm_80"),
            key(library="/other/libnvrtc.so.12"), key(version="13.1"), key(includes=[])]
    assert len(set(keys)) == len(keys)
    assert key() == key()  # and the same compile, the same key
    assert key(request=_request(kernel="relu")) == key()  # the kernel's name is a record, not an input


def test_compile_requests_are_validated():
    for bad, message in [({"builder": "nvrtc", "source": "x", "options": ["-arch=sm_50"]}, "the host's to choose"),
                         ({"builder": "nvrtc", "source": "x", "options": ["--gpu-architecture=compute_90"]},
                          "the host's to choose"),
                         ({"builder": "nvrtc", "source": "x", "path": "/etc/passwd"}, "malformed"),
                         ({"builder": "nvrtc"}, "malformed")]:
        with pytest.raises(ValueError, match=message):
            nvrtc.parse_request(bad)
    assert nvrtc.is_request({"builder": "nvrtc"}) and not nvrtc.is_request({"builder": "load_inline"})
    assert nvrtc.nvrtc_arch("9.0") == "sm_90" and nvrtc.nvrtc_arch("8.0;9.0+PTX") == "sm_80"
    # Hopper images set TORCH_CUDA_ARCH_LIST=9.0a: every CuPy kernel failed to compile there (H200)
    assert nvrtc.nvrtc_arch("9.0a") == "sm_90a" and nvrtc.nvrtc_arch("10.0f;12.0") == "sm_100f"
    with pytest.raises(ValueError, match="not an architecture"):
        nvrtc.nvrtc_arch("hopper")


class CountingCompiler:
    def __init__(self):
        self.calls = 0

    def __call__(self, spec, scratch, backend, deadline):
        self.calls += 1
        return nvrtc.run_compiler(spec, scratch, backend, deadline)


@needs_nvrtc
def test_the_host_compiles_a_cupy_kernel_to_a_cubin_and_reuses_it(tmp_path):
    compiler = CountingCompiler()
    service = nvrtc.NvrtcService(BuildCache(tmp_path / "cache"), NONE, compiler=compiler)
    request = _request(name_expressions=["scale<float>", "scale<double>"], kernel=None)
    first = service.compile(request, "cpu", time.monotonic() + 120)
    assert first.ok and not first.cached and first.mode == "nvrtc", first.log
    cubin = Path(first.library).read_bytes()
    assert cubin[:4] == b"\x7fELF"  # a cubin (SASS for the target), not PTX text
    assert first.lowered == {"scale<float>": "_Z5scaleIfEvPKT_PS0_S0_x",
                             "scale<double>": "_Z5scaleIdEvPKT_PS0_S0_x"}
    for name in [*first.lowered.values(), "relu"]:
        assert name.encode() in cubin
    second = service.compile(request, "cpu", time.monotonic() + 120)
    assert second.cached and second.key == first.key and second.lowered == first.lowered
    assert compiler.calls == 1
    delivered = Path(service.deliver(second, tmp_path / "worker"))
    assert delivered.read_bytes() == cubin and delivered.is_relative_to(tmp_path / "worker")


@needs_nvrtc
def test_a_compile_error_is_reported_with_nvrtcs_log_and_cached(tmp_path):
    compiler = CountingCompiler()
    service = nvrtc.NvrtcService(BuildCache(tmp_path / "cache"), NONE, compiler=compiler)
    broken = _request('extern "C" __global__ void f(float* x) { x[0] = undefined_name; }')
    for _ in range(2):
        build = service.compile(broken, "cpu", time.monotonic() + 120)
        assert not build.ok and "undefined_name" in build.log and "is undefined" in build.log
    assert compiler.calls == 1


@needs_nvrtc
def test_a_forged_entry_is_not_served(tmp_path):
    """An entry whose cubin does not match its recorded hash is removed and compiled again."""
    service = nvrtc.NvrtcService(BuildCache(tmp_path / "cache"), NONE)
    build = service.compile(_request(), "cpu", time.monotonic() + 120)
    Path(build.library).write_bytes(b"\x7fELF forged")
    again = service.compile(_request(), "cpu", time.monotonic() + 120)
    assert not again.cached and Path(again.library).read_bytes() != b"\x7fELF forged"


# the worker's hook and the private caches -----------------------------------------------------------------

CUPY_CANDIDATE = '''
import os
import cupy
import torch
import torch.nn as nn

SOURCE = r"""{source}"""
module = cupy.RawModule(code=SOURCE, name_expressions=["scale<float>"])
if not os.path.isfile(module.file_path) or not module.file_path.startswith(os.environ["HOME"]):
    raise RuntimeError("not loaded from the host's cubin: " + repr(module.file_path))
if type(module).__name__ != "CompiledModule" or not isinstance(module, cupy._core.raw.RawModule):
    raise RuntimeError("the hook did not make this module: " + repr(type(module)))


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
'''


@needs_nvrtc
@needs_cupy
def test_a_candidates_cupy_module_is_compiled_by_the_host_and_cached(tmp_path):
    options = EvalOptions(device="cpu", timing_budget=0.3, min_timed_calls=3, build_cache=str(tmp_path / "cache"))
    source = CUPY_CANDIDATE.replace("{source}", TEMPLATE_KERNEL)
    with Evaluator(load_problem(RELU), options) as evaluator:
        first, second = evaluator.evaluate(source), evaluator.evaluate(source)
    for result in (first, second):
        assert result.status == "correct", (result.message, result.compile_log)
        assert [(b.mode, b.ok) for b in result.builds] == [("nvrtc", True)]
        assert "nvrtc_kernel" in result.optimization_kinds and "custom_kernel_unused" not in result.flags
    assert not first.builds[0].cached and second.builds[0].cached
    entries = BuildCache(tmp_path / "cache").entries()
    assert len(entries) == 1 and entries[0]["mode"] == "nvrtc"


@needs_nvrtc
@needs_cupy
def test_a_cupy_compile_error_is_a_compile_error_with_the_log(tmp_path):
    options = EvalOptions(device="cpu", timing_budget=0.3, min_timed_calls=3, build_cache=str(tmp_path / "cache"))
    source = CUPY_CANDIDATE.replace("{source}", 'extern "C" __global__ void f(float* x) { x[0] = nope; }')
    with Evaluator(load_problem(RELU), options) as evaluator:
        result = evaluator.evaluate(source)
    assert result.status == "compile_error", result.message
    assert "nope" in result.compile_log and "is undefined" in result.compile_log


def test_every_worker_gets_its_own_kernel_caches(tmp_path):
    env = kernel_cache_environment(tmp_path / "worker")
    assert env["CUPY_CACHE_IN_MEMORY"] == "1"
    for name in ("CUPY_CACHE_DIR", "TRITON_CACHE_DIR", "TRITON_HOME", "TRITON_DUMP_DIR", "TRITON_OVERRIDE_DIR",
                 "TORCHINDUCTOR_CACHE_DIR"):
        assert Path(env[name]).is_relative_to(tmp_path / "worker"), name


def _planted_pair(tmp_path, host_entry: Path, compile_kernel: bool) -> tuple[str, str, bytes]:
    marker = f"kernelopt_planted_{secrets.token_hex(6)}"
    forged = b"\x7fELF" + secrets.token_bytes(64)
    values = {"MARKER": marker, "FORGED": forged.hex(), "HOST_ENTRY": str(host_entry),
              "COMPILE": "1" if compile_kernel else "0"}
    sources = []
    for template in ("kernel_cache_plant.py", "kernel_cache_probe.py"):
        text = (TEMPLATES / template).read_text(encoding="utf-8")
        for key, value in values.items():
            text = text.replace("{" + key + "}", value)
        sources.append(text)
    return sources[0], sources[1], forged


def _probe_key(cache: Path) -> str:
    """The key the probe's RawModule compile gets on this machine (device cpu: the default target)."""
    probe = (TEMPLATES / "kernel_cache_probe.py").read_text(encoding="utf-8")
    source = re.search(r'SOURCE = r"""(.*?)"""', probe, re.S).group(1)
    library, version = nvrtc.nvrtc_available()
    arch = nvrtc.nvrtc_arch(nvrtc.target_architectures("cpu"))
    return nvrtc.compile_key(_request(source), arch, library, version, nvrtc.include_dirs())


def test_a_kernel_planted_in_a_workers_caches_is_never_seen_by_the_next(tmp_path):
    """The planter writes a forged cubin into every cache directory its worker is given (and
    its home); the candidate judged after it, in the same Evaluator, finds its own caches fresh."""
    options = EvalOptions(device="cpu", timing_budget=0.3, min_timed_calls=3, build_cache=str(tmp_path / "cache"))
    planter, probe, _ = _planted_pair(tmp_path, tmp_path / "not-the-cache" / "entry", compile_kernel=False)
    with Evaluator(load_problem(RELU), options) as evaluator:
        planted, probed = evaluator.evaluate(planter), evaluator.evaluate(probe)
    assert planted.status == "correct", planted.message
    assert probed.status == "correct", (probed.message, probed.candidate_output)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap (the host's cache is outside the sandbox)")
@needs_nvrtc
@needs_cupy
def test_a_cubin_planted_under_the_next_candidates_key_is_not_served(tmp_path):
    """The planter writes a complete, self-consistent cache entry (cubin and meta.json with its
    hash) where the host would look for the probe's kernel; under bubblewrap the host's cache
    is out of its reach, and the probe's module is the host's own compile."""
    cache = tmp_path / "cache"
    options = EvalOptions(device="cpu", timing_budget=0.3, min_timed_calls=3, build_cache=str(cache),
                          isolation="bubblewrap")
    entry = cache / "entries" / _probe_key(cache)
    planter, probe, forged = _planted_pair(tmp_path, entry, compile_kernel=True)
    with Evaluator(load_problem(RELU), options) as evaluator:
        planted, probed = evaluator.evaluate(planter), evaluator.evaluate(probe)
    assert planted.status == "correct", planted.message
    assert probed.status == "correct", (probed.message, probed.compile_log)
    assert [(b.mode, b.cached, b.key) for b in probed.builds] == [("nvrtc", False, entry.name)]
    stored = entry / "kernel.cubin"
    assert stored.read_bytes() != forged
    assert hashlib.sha256(stored.read_bytes()).hexdigest() != hashlib.sha256(forged).hexdigest()


# kernelopt doctor -----------------------------------------------------------------------------------------

def test_doctor_reports_nvrtc_cupy_and_triton_as_available_or_not(monkeypatch, tmp_path):
    from kernelopt.sandbox import doctor

    report = doctor.Report()
    checks = {c.name: c for c in doctor._check_kernel_languages(report, {"build": None, "available": False})}
    assert set(checks) == {"nvrtc", "cupy", "triton"} and not any(c.required for c in checks.values())
    assert checks["cupy"].ok == HAS_CUPY
    if HAS_CUPY:  # availability, with what it needs, not an error
        assert "--backend cupy can run (its kernels need a GPU; none here)" in checks["cupy"].detail
        assert report.versions["cupy"]
    else:
        assert "cupy-cuda13x" in checks["cupy"].fix
    assert checks["triton"].ok == (importlib.util.find_spec("triton") is not None)
    assert checks["triton"].ok or "kernelopt[triton]" in checks["triton"].fix
    assert checks["nvrtc"].ok == (LIBNVRTC is not None)
    if LIBNVRTC:
        assert report.versions["nvrtc"] == NVRTC_VERSION and LIBNVRTC in checks["nvrtc"].detail
    monkeypatch.setenv("KERNELOPT_NVRTC", str(tmp_path / "libnvrtc.so.0"))
    nvrtc.find_libnvrtc.cache_clear()
    try:
        missing = doctor._check_kernel_languages(doctor.Report(), {"build": "12.8", "available": False})
        by_name = {c.name: c for c in missing}
        assert not by_name["nvrtc"].ok and "cannot be loaded" in by_name["nvrtc"].detail
        assert "nvidia-cuda-nvrtc" in by_name["nvrtc"].fix
        if not HAS_CUPY:
            assert "cupy-cuda12x" in by_name["cupy"].fix  # the wheel for torch's CUDA
    finally:
        monkeypatch.delenv("KERNELOPT_NVRTC")
        nvrtc.find_libnvrtc.cache_clear()


# on a GPU: a correct ReLU in each GPU backend, compile times side by side ---------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("candidate,kind,package", [
    ("relu_cupy_rawkernel.py", "nvrtc_kernel", "cupy"), ("relu_triton.py", "triton", "triton"),
    ("relu_cuda_extension.py", "cuda_extension", None)])
def test_each_gpu_backends_relu_is_correct_on_the_gpu(tmp_path, candidate, kind, package):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    if package and importlib.util.find_spec(package) is None:
        pytest.skip(f"needs {package}")
    source = (REPO / "tests" / "adversarial" / "honest" / candidate).read_text(encoding="utf-8")
    options = EvalOptions(device="cuda", timeout=600, timing_budget=1.0, build_cache=str(tmp_path / "cache"))
    with Evaluator(load_problem(RELU), options) as evaluator:
        cold, warm = evaluator.evaluate(source), evaluator.evaluate(source)
    for result in (cold, warm):
        assert result.status == "correct", (result.message, result.compile_log)
        assert kind in result.optimization_kinds and "custom_kernel_unused" not in result.flags
    print(f"{candidate}: load {cold.durations.get('load', 0):.2f} s cold, {warm.durations.get('load', 0):.2f} s "
          f"again; builds {[(b.mode, b.cached, b.build_seconds) for b in cold.builds]}")
    if package != "triton":  # CuPy's and load_inline's compiles are the host's, cached
        assert cold.builds and not cold.builds[0].cached and warm.builds[0].cached
