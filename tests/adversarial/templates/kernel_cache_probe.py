# Template (not collected as a case): the candidate judged after kernel_cache_plant.py in the same
# Evaluator. tests/test_backends.py fills in {MARKER}, {FORGED} and {COMPILE} ("1": also make the
# CuPy module whose key the planter aimed at, "0": CuPy is not installed). It fails to load when
# anything the planter wrote is visible to it, or when its caches are not its own fresh ones.
# family: kernel cache planting
# why: the victim of kernel_cache_plant.py
import os

import torch
import torch.nn as nn

_FORGED = bytes.fromhex("{FORGED}")
SOURCE = r"""
extern "C" __global__ void probe_relu(const float* x, float* y, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
"""


def _look():
    home = os.environ.get("HOME", "")
    if os.environ.get("CUPY_CACHE_IN_MEMORY") != "1":
        raise RuntimeError("CuPy may write its disk cache (CUPY_CACHE_IN_MEMORY is not 1)")
    for name in ("CUPY_CACHE_DIR", "TRITON_CACHE_DIR", "TRITON_HOME", "TORCHINDUCTOR_CACHE_DIR"):
        value = os.environ.get(name, "")
        if not value or not value.startswith(home):
            raise RuntimeError(f"{name}={value!r} is not inside this worker's own directory {home!r}")
    for root in {home, os.path.expanduser("~")}:
        for folder, _, files in os.walk(root):
            for name in files:
                if name.startswith("{MARKER}"):
                    raise RuntimeError(f"planted file visible: {os.path.join(folder, name)}")


_look()
if "{COMPILE}" == "1":
    import cupy

    module = cupy.RawModule(code=SOURCE)
    path = module.file_path  # the host's cubin, copied into this worker's scratch
    if path is None or not os.path.isfile(path):
        raise RuntimeError(f"the CuPy module was not loaded from the host's cubin ({path!r})")
    with open(path, "rb") as handle:
        if handle.read() == _FORGED:
            raise RuntimeError("the host served the planted cubin")


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
