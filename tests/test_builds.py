"""The extension build cache and the host's build service.

Most tests drive BuildService with a stand-in for the compiler run (a function that writes a
library file and counts its calls) to check the cache's own logic: hits, one build per key
under concurrency, corrupted entries rebuilt, eviction. The tests marked `slow` compile a real
C++ extension through the sandboxed builder and the referee.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from conftest import REPO
from kernelopt.cli import main as cli_main
from kernelopt.kernelbench import load_problem
from kernelopt.sandbox import evaluate
from kernelopt.sandbox.builds import BuildCache, BuildService, build_key, parse_request
from kernelopt.sandbox.isolation import Backend
from kernelopt.sandbox.worker import build_runner

NONE = Backend("none", False, False, False)


def _request(source: str = "int f() { return 1; }", name: str = "ext", **extra):
    return parse_request({"builder": "load_inline", "name": name, "cpp_sources": [source], **extra})


class CountingBuilder:
    """Stands in for the compiler run: writes a library whose bytes name the request."""

    def __init__(self, delay: float = 0.0, ok: bool = True):
        self.calls = 0
        self.delay, self.ok = delay, ok
        self.lock = threading.Lock()

    def __call__(self, request, build_dir, mode, key, arch_list, backend, deadline, pch_root=None):
        with self.lock:
            self.calls += 1
        time.sleep(self.delay)
        if not self.ok:
            return {"ok": False, "error": "g++ exited with code 1", "log": "main.cpp:1: error: nope"}
        library = Path(build_dir) / f"{request.name}.so"
        library.write_bytes(b"\x7fELF" + json.dumps(request.cpp_sources).encode() * 50)
        return {"ok": True, "so": str(library), "lean": False, "log": "built", "seconds": 0.1}


def _service(tmp_path, builder, max_bytes=1 << 30, mode="fast"):
    return BuildService(BuildCache(tmp_path / "cache", max_bytes), NONE, mode, builder=builder)


def test_a_second_request_is_a_cache_hit(tmp_path):
    builder = CountingBuilder()
    service = _service(tmp_path, builder)
    first = service.build(_request(), "cpu", time.monotonic() + 60)
    second = service.build(_request(), "cpu", time.monotonic() + 60)
    assert builder.calls == 1
    assert (first.cached, second.cached) == (False, True)
    assert first.key == second.key and Path(second.library).read_bytes().startswith(b"\x7fELF")


def test_the_key_covers_sources_flags_name_mode_and_architectures():
    base = _request()
    keys = {
        build_key(base, "fast", "9.0"),
        build_key(_request("int f() { return 2; }"), "fast", "9.0"),
        build_key(_request(extra_cflags=["-O3"]), "fast", "9.0"),
        build_key(_request(name="other"), "fast", "9.0"),
        build_key(base, "stock", "9.0"),
        build_key(base, "fast", "8.0"),
    }
    assert len(keys) == 6
    assert build_key(base, "fast", "9.0") == build_key(_request(), "fast", "9.0")


def test_concurrent_requests_for_one_key_build_once(tmp_path):
    builder = CountingBuilder(delay=1.0)
    service = _service(tmp_path, builder)
    results = []

    def ask():
        results.append(service.build(_request(), "cpu", time.monotonic() + 60))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert builder.calls == 1
    assert len({r.library for r in results}) == 1
    assert sorted(r.cached for r in results) == [False, True, True, True]


def test_a_corrupted_library_is_removed_and_rebuilt(tmp_path):
    builder = CountingBuilder()
    service = _service(tmp_path, builder)
    first = service.build(_request(), "cpu", time.monotonic() + 60)
    Path(first.library).write_bytes(b"truncated")
    assert service.cache.lookup(first.key) is None  # removed, not served
    again = service.build(_request(), "cpu", time.monotonic() + 60)
    assert builder.calls == 2 and not again.cached
    assert Path(again.library).read_bytes().startswith(b"\x7fELF")


def test_an_entry_without_its_metadata_is_rebuilt(tmp_path):
    builder = CountingBuilder()
    service = _service(tmp_path, builder)
    first = service.build(_request(), "cpu", time.monotonic() + 60)
    (Path(first.library).parent / "meta.json").write_text("{not json")
    assert service.build(_request(), "cpu", time.monotonic() + 60).cached is False
    assert builder.calls == 2


def test_least_recently_used_entries_are_evicted_past_the_bound(tmp_path):
    builder = CountingBuilder()
    service = _service(tmp_path, builder, max_bytes=10_000)
    a = service.build(_request("int a();"), "cpu", time.monotonic() + 60)
    b = service.build(_request("int b();"), "cpu", time.monotonic() + 60)
    time.sleep(0.05)
    service.build(_request("int a();"), "cpu", time.monotonic() + 60)  # a is now the most recent
    entry_bytes = sum(e["bytes"] for e in service.cache.entries()) // 2
    service.cache.max_bytes = entry_bytes * 2 + entry_bytes // 2  # room for two entries
    c = service.build(_request("int c();"), "cpu", time.monotonic() + 60)
    keys = {e["key"] for e in service.cache.entries()}
    assert keys == {a.key, c.key}, "b was the least recently used"
    assert b.key not in keys


def test_a_failed_compile_is_cached_with_its_log(tmp_path):
    builder = CountingBuilder(ok=False)
    service = _service(tmp_path, builder)
    first = service.build(_request(), "cpu", time.monotonic() + 60)
    second = service.build(_request(), "cpu", time.monotonic() + 60)
    assert not first.ok and not second.ok and second.cached
    assert "error: nope" in second.log and builder.calls == 1


@pytest.mark.parametrize("raw, message", [
    ({"builder": "load_inline", "name": "bad name"}, "not a Python identifier"),
    ({"builder": "load", "name": "x", "sources": {"../up.cpp": ""}}, "plain C\\+\\+/CUDA file name"),
    ({"builder": "load_inline", "name": "x", "surprise": 1}, "Extra inputs"),
    ({"builder": "make", "name": "x"}, "Input should be"),
    ("not a dict", "JSON object"),
])
def test_malformed_build_requests_are_refused(raw, message):
    with pytest.raises(ValueError, match=message):
        parse_request(raw)


def test_cache_info_and_clear_commands(tmp_path, capsys):
    service = _service(tmp_path, CountingBuilder())
    service.build(_request("int a();"), "cpu", time.monotonic() + 60)
    service.build(_request("int b();"), "cpu", time.monotonic() + 60)
    directory = str(tmp_path / "cache")
    assert cli_main(["cache", "info", "--dir", directory, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["entries"] == 2 and info["bytes"] > 0 and info["root"] == directory
    assert cli_main(["cache", "clear", "--dir", directory]) == 0
    assert "removed 2 entries" in capsys.readouterr().out
    assert BuildCache(directory).info()["entries"] == 0


# -- real builds through the sandboxed builder ------------------------------------------------

CPP_CANDIDATE = REPO / "tests" / "adversarial" / "honest" / "relu_cpp_extension.py"

BROKEN_CPP = '''
import torch
from torch.utils.cpp_extension import load_inline

_ext = load_inline(name="broken_ext", cpp_sources="this is not C++;", functions=None,
                   no_implicit_headers=True)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)
'''


@pytest.mark.slow
def test_a_real_extension_is_built_once_then_loaded_from_the_cache(example, fast_options, tmp_path):
    """With the header precompiled (`kernelopt cache warm`, for the candidate's -O3), the first
    evaluation builds with it, the second loads the cached library."""
    directory = str(tmp_path / "cache")
    assert cli_main(["cache", "warm", "--dir", directory, "--cflag=-O3", "--skip-cuda"]) == 0
    assert BuildCache(directory).info()["precompiled_headers"] == 1
    options = fast_options(timeout=600, correctness_trials=2, build_cache=directory)
    problem = load_problem(example("1_ReLU"))
    first = evaluate(problem, CPP_CANDIDATE.read_text(), options)
    second = evaluate(problem, CPP_CANDIDATE.read_text(), options)
    assert first.status == second.status == "correct", (first.message, second.message)
    assert "cpp_extension" in second.optimization_kinds
    assert [b.cached for b in first.builds + second.builds] == [False, True]
    assert second.builds[0].wait_seconds < 2.0  # a cached build loads in well under 2 s
    assert second.durations["load"] < first.durations["load"] / 5
    entry = BuildCache(directory).entry_dir(first.builds[0].key)
    log = json.loads((entry / "meta.json").read_text())["log"]
    assert "uses the precompiled torch/extension.h" in log and "without" not in log


def test_a_compile_error_reports_the_compiler_log_and_is_cached(example, fast_options, tmp_path):
    options = fast_options(correctness_trials=1, build_cache=str(tmp_path / "cache"))
    problem = load_problem(example("1_ReLU"))
    first = evaluate(problem, BROKEN_CPP, options)
    second = evaluate(problem, BROKEN_CPP, options)
    assert first.status == second.status == "compile_error", first.message
    assert "error" in first.compile_log and "this is not C++" in second.compile_log
    assert [b.cached for b in first.builds + second.builds] == [False, True]


def test_build_mode_off_builds_inside_the_sandbox(example, fast_options, tmp_path):
    options = fast_options(correctness_trials=1, build_mode="off", build_cache=str(tmp_path / "cache"))
    result = evaluate(load_problem(example("1_ReLU")), BROKEN_CPP, options)
    assert result.status == "compile_error" and result.builds == []
    assert BuildCache(tmp_path / "cache").info()["entries"] == 0


# -- the precompiled host prefix of CUDA sources (pure parts; the real build: test_cuda_build) --

HOST_COMPILE = ('gcc -std=c++20 -D__CUDA_ARCH__=900 -c -x c++  -fPIC "-I/usr/local/cuda/include" -m64 '
                '"/b1/nvcc-cuda.cuda.o/cuda.cudafe1.cpp" -o "/b1/cuda.cuda.o"')


def _plan(final: str, build: str = "/b1") -> build_runner.NvccPlan:
    host = [f'cudafe++ --m64 --gen_c_file_name "{build}/nvcc-cuda.cuda.o/cuda.cudafe1.cpp" x.ii']
    return build_runner.NvccPlan({}, f"{build}/nvcc-cuda.cuda.o/cuda.module_id", host, ["cicc x"],
                                 final.replace("/b1", build))


def test_the_host_prefix_fits_compiles_that_differ_only_in_their_paths():
    first, moved = _plan(HOST_COMPILE), _plan(HOST_COMPILE, "/elsewhere/b2")
    assert build_runner.host_prefix_identity(first, "tc") == build_runner.host_prefix_identity(moved, "tc")
    assert build_runner.host_prefix_identity(first, "tc") != build_runner.host_prefix_identity(first, "other")
    optimized = _plan(HOST_COMPILE.replace("-fPIC", "-fPIC -O3"))
    assert build_runner.host_prefix_identity(optimized, "tc") != build_runner.host_prefix_identity(first, "tc")
    # Debug info would name the prefix's file; -Werror might see its diagnostic pragmas differ.
    for flag in ("-g", "-ggdb", "-Werror"):
        assert build_runner.host_prefix_identity(_plan(HOST_COMPILE.replace("-fPIC", f"-fPIC {flag}")), "tc") is None


PREFIX = '# 1 "/warm/lean/cuda.cu"\n#pragma GCC diagnostic push\nnamespace at { int f(); }\n'


@pytest.mark.parametrize("text, rest", [
    ('# 1 "/b1/lean/cuda.cu"\n#pragma GCC diagnostic push\nnamespace at { int f(); }\n# 8 "/b1/lean/cuda.cu"\nint k;\n',
     '# 8 "/b1/lean/cuda.cu"\nint k;\n'),
    # Not the same header text, or the prefix ends inside a line, or no line marker follows.
    ('# 1 "/b1/lean/cuda.cu"\n#pragma GCC diagnostic push\nnamespace at { int g(); }\n# 8 "x"\n', None),
    ('# 1 "/b1/lean/cuda.cu"\n#pragma GCC diagnostic push\nnamespace at { int f(); }  int k;\n', None),
    ('# 1 "/b1/lean/cuda.cu"\n#pragma GCC diagnostic push\nnamespace at { int f(); }\nint k;\n', None),
    ('#pragma GCC diagnostic push\nnamespace at { int f(); }\n# 8 "x"\n', None),
])
def test_only_an_output_that_starts_with_the_whole_prefix_is_compiled_from_it(text, rest):
    assert build_runner.remainder_after_prefix(text, PREFIX) == rest


def test_the_first_line_and_nothing_else_may_differ():
    assert build_runner.remainder_after_prefix(PREFIX + '# 2 "y"\n', PREFIX) == '# 2 "y"\n'
    assert build_runner.remainder_after_prefix(PREFIX, PREFIX) is None  # nothing after it
