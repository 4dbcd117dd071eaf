"""sandbox/device.device_model: what baselines are stored under and a cluster's verdicts grouped
by. nvidia-smi is external: a stand-in on PATH answers with the physical index it was asked for."""

from __future__ import annotations

import os

from kernelopt.sandbox.device import device_model


def stand_in_nvidia_smi(folder):
    script = folder / "nvidia-smi"
    script.write_text('#!/bin/sh\nwhile [ "$1" != "-i" ]; do shift; done\necho "Stand-in GPU $2"\n')
    script.chmod(0o755)
    return folder


def test_a_gpu_is_named_by_its_physical_index_within_the_visible_devices(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{stand_in_nvidia_smi(tmp_path)}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert device_model("cuda:1") == "Stand-in GPU 1"
    assert device_model("cuda") == "Stand-in GPU 0"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")  # as Ray sets it for an actor
    assert device_model("cuda:0") == "Stand-in GPU 3"
    assert device_model("cuda:1") == "Stand-in GPU 5"


def test_without_nvidia_smi_the_gpu_model_is_unknown_and_a_cpu_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert device_model("cuda:2") == "cuda:2 (model unknown)"
    assert device_model("cpu").startswith("cpu ") and len(device_model("cpu")) > 4
