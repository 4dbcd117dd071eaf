"""`kernelopt doctor`: real probes of this machine, and clear advice when something is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kernelopt.sandbox import doctor, isolation


def run_doctor(env: dict | None = None, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelopt", "doctor", *args],
                          capture_output=True, text=True, env=env, timeout=300)


def checks_by_name(report: dict) -> dict:
    return {c["name"]: c for c in report["checks"]}


def test_json_report_names_every_check_and_the_default_backend():
    done = run_doctor(None, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    checks = checks_by_name(report)
    assert {"torch", "gpus", "driver", "nvcc", "ninja", "c++", "sandbox:bubblewrap", "sandbox:unshare",
            "sandbox:docker", "sandbox:default", "build-cache"} <= set(checks)
    assert report["default_backend"] == isolation.select_backend("auto").name
    assert checks["torch"]["ok"] and checks["torch"]["required"]
    assert all(c["fix"] for c in report["checks"] if not c["ok"]), "every failed check says how to fix it"


def test_missing_tools_are_reported_with_a_fix(tmp_path):
    """PATH holds only python: no ninja, no bubblewrap, no unshare, no nvidia-smi."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path), "CUDA_HOME": str(tmp_path / "no-cuda")}
    if "PYTHONPATH" in os.environ:  # where kernelopt's dependencies were put by hand
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    done = run_doctor(env, "--json")
    assert done.returncode == 0, done.stderr  # torch works: nothing required is missing
    checks = checks_by_name(json.loads(done.stdout))
    assert not checks["ninja"]["ok"] and "pip install ninja" in checks["ninja"]["fix"]
    assert not checks["sandbox:bubblewrap"]["ok"] and "bubblewrap" in checks["sandbox:bubblewrap"]["fix"]
    assert not checks["sandbox:default"]["ok"] and "unconfined" in checks["sandbox:default"]["detail"]
    assert not checks["gpus"]["ok"] and "nvidia-smi" in checks["gpus"]["detail"]
    assert not checks["nvcc"]["ok"] and "CUDA_HOME" in checks["nvcc"]["fix"]
    text = run_doctor(env).stdout
    assert "fix: pip install ninja" in text and "default sandbox: none" in text


def test_gpus_are_read_from_nvidia_smi(tmp_path, monkeypatch):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho '0, NVIDIA H100 80GB HBM3, 81559, 580.159.04'\n"
                    "echo '1, NVIDIA H100 80GB HBM3, 81559, 580.159.04'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    report = doctor.Report()
    check = doctor._check_gpus(report)
    assert check.ok and "1: NVIDIA H100 80GB HBM3 (81559 MiB)" in check.detail
    assert [g["index"] for g in report.gpus] == [0, 1] and report.gpus[0]["driver"] == "580.159.04"


def test_a_failing_nvidia_smi_is_an_error_with_advice(tmp_path, monkeypatch):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the driver' >&2\nexit 9\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    check = doctor._check_gpus(doctor.Report())
    assert not check.ok and "could not communicate" in check.detail and check.fix


@pytest.mark.skipif(isolation.detect_cuda_home() is None, reason="needs the CUDA toolkit (nvcc)")
def test_an_nvcc_that_does_not_match_torchs_cuda_is_flagged():
    report = doctor.Report()
    check = doctor._check_nvcc(report, {"build": "9.2"})
    assert not check.ok and "torch was built with CUDA 9.2" in check.detail
    assert "CUDA_HOME" in check.fix
    matching = doctor._check_nvcc(report, {"build": report.versions["nvcc"]})
    assert matching.ok


@pytest.mark.gpu
def test_a_cuda_kernel_runs_inside_the_namespace_backend():
    if not isolation.backend_works("bubblewrap"):
        pytest.skip("needs bubblewrap")
    report = doctor.diagnose()
    checks = {c.name: c for c in report.checks}
    assert report.gpus and report.default_device == "cuda:0"
    assert checks["sandbox:bubblewrap+cuda"].ok, checks["sandbox:bubblewrap+cuda"].detail


def test_an_unwarmed_build_cache_is_reported_with_the_command_that_warms_it(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELOPT_BUILD_CACHE", str(tmp_path / "cache"))
    cold = doctor._check_build_cache({"build": "13.0"})
    assert not cold.ok and not cold.required and "kernelopt cache warm" in cold.fix
    (tmp_path / "cache" / "pch" / "0123abcd").mkdir(parents=True)  # torch/extension.h only
    assert doctor._check_build_cache({"build": None}).ok  # enough for a CPU build of torch
    assert not doctor._check_build_cache({"build": "13.0"}).ok  # CUDA sources would parse in full
    (tmp_path / "cache" / "pch" / "cuda-4567ef01").mkdir()
    warm = doctor._check_build_cache({"build": "13.0"})
    assert warm.ok and "1 precompiled torch/extension.h, 1 CUDA host prefix" in warm.detail
