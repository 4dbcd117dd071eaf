import os
import shutil

import pytest

from kernelopt.sandbox import isolation


def test_environment_is_built_from_an_allowlist(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("HF_TOKEN", "hf-secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
    monkeypatch.setenv("SOME_RANDOM_SETTING", "x")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    env = isolation.scrubbed_environment(tmp_path)
    assert not {"OPENAI_API_KEY", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "SOME_RANDOM_SETTING"} & set(env)
    assert "secret" not in " ".join(env.values())
    assert env["CUDA_VISIBLE_DEVICES"] == "1"
    assert env["HOME"] == str(tmp_path) and env["TORCH_EXTENSIONS_DIR"].startswith(str(tmp_path))


def test_bubblewrap_command_confines_the_worker(tmp_path):
    backend = isolation.Backend("bubblewrap", True, True, True)
    command = isolation.wrap_command(backend, ["python", "-c", "pass"], tmp_path, "cpu", ())
    joined = " ".join(command)
    assert command[0] == "bwrap" and "--unshare-all" in command and "--die-with-parent" in command
    assert "--ro-bind / /" in joined and f"--bind {tmp_path} {tmp_path}" in joined
    assert "--tmpfs /tmp" in joined and command[-3:] == ["python", "-c", "pass"]
    assert not any(arg.startswith("/dev/nvidia") for arg in command)  # CPU: no GPU device nodes
    home = os.path.expanduser("~")
    if home not in ("/", ""):
        assert f"--tmpfs {home}" in joined


def test_bubblewrap_keeps_the_interpreter_visible_when_it_lives_under_home(tmp_path):
    import sys

    command = isolation.wrap_command(isolation.Backend("bubblewrap", True, True, True),
                                     ["true"], tmp_path, "cpu", ())
    hidden = isolation._hidden_directories()
    bound = [command[i + 1] for i, arg in enumerate(command) if arg == "--ro-bind"]
    for path in {sys.base_prefix, sys.prefix}:
        if any(path.startswith(h + "/") for h in hidden):  # it or a directory holding it is bound back
            assert any(path == b or path.startswith(b.rstrip("/") + "/") for b in bound), (path, bound)


def test_no_isolation_backend_warns():
    backend = isolation.select_backend("none")
    assert backend.name == "none" and not backend.network_isolated
    assert any("bubblewrap" in w for w in backend.warnings)


@pytest.mark.bwrap
def test_auto_prefers_bubblewrap_when_it_works():
    assert isolation.select_backend("auto").name == "bubblewrap"


def test_explicit_bubblewrap_without_bwrap_is_a_clear_error(monkeypatch):
    isolation._bubblewrap_works.cache_clear()
    monkeypatch.setattr(shutil, "which", lambda name: None)
    try:
        with pytest.raises(isolation.IsolationError, match="apt-get install bubblewrap"):
            isolation.select_backend("bubblewrap")
        assert isolation.select_backend("auto").name in ("unshare", "none")
    finally:
        isolation._bubblewrap_works.cache_clear()
        isolation._unshare_works.cache_clear()


def test_workers_run_one_passive_host_thread_unless_the_user_sets_it(tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    env = isolation.scrubbed_environment(tmp_path)
    assert env["OMP_NUM_THREADS"] == "1" and env["MKL_NUM_THREADS"] == "1"
    assert env["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    env = isolation.scrubbed_environment(tmp_path)
    assert env["OMP_NUM_THREADS"] == "4" and env["MKL_NUM_THREADS"] == "4"


def _fresh_allocator_lookup(monkeypatch, **variables):
    for name in ("KERNELOPT_ALLOCATOR", "KERNELOPT_JEMALLOC"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    isolation.jemalloc_library.cache_clear()


def test_workers_preload_jemalloc_when_it_is_installed_and_can_be_told_not_to(tmp_path, monkeypatch):
    library = tmp_path / "libjemalloc.so.2"
    library.write_bytes(b"")
    try:
        _fresh_allocator_lookup(monkeypatch, KERNELOPT_JEMALLOC=str(library))
        env = isolation.scrubbed_environment(tmp_path)
        assert env["LD_PRELOAD"] == str(library)
        assert "dirty_decay_ms:-1" in env["MALLOC_CONF"] and "background_thread:false" in env["MALLOC_CONF"]
        _fresh_allocator_lookup(monkeypatch, KERNELOPT_JEMALLOC=str(library), KERNELOPT_ALLOCATOR="glibc")
        assert "LD_PRELOAD" not in isolation.scrubbed_environment(tmp_path)
        _fresh_allocator_lookup(monkeypatch, KERNELOPT_JEMALLOC=str(tmp_path / "missing.so"))
        assert "LD_PRELOAD" not in isolation.scrubbed_environment(tmp_path)
    finally:
        _fresh_allocator_lookup(monkeypatch)


def test_a_verdict_names_the_allocator_its_workers_ran_with(example, fast_options):
    from kernelopt.kernelbench import load_problem
    from kernelopt.sandbox import evaluate

    isolation.jemalloc_library.cache_clear()
    problem = load_problem(example("1_ReLU"))
    result = evaluate(problem, problem.source.replace("class Model(", "class ModelNew("), fast_options())
    expected = "jemalloc" if isolation.jemalloc_library() else "glibc"
    assert result.status == "correct" and result.environment.allocator == expected
