# Template (not collected as a case): tests/test_backends.py fills in {MARKER} (a random token),
# {HOST_ENTRY} (the host build cache's entry directory for the key of the source the next
# candidate compiles) and {FORGED} (bytes of a forged cubin, hex), evaluates this candidate, then
# a second one (kernel_cache_probe.py) that must see none of it.
# family: kernel cache planting
# why: a compiled kernel left where a later candidate's compiler looks (CuPy's and Triton's disk
#   caches, the home directory, the host's build cache under the victim's exact key) would run in
#   that candidate under its name; every worker's caches are its own and fresh, and the host's
#   cache is out of reach
import hashlib
import json
import os

import torch
import torch.nn as nn

_FORGED = bytes.fromhex("{FORGED}")


def _plant():
    home = os.environ.get("HOME", "")
    places = [os.environ.get(name, "") for name in ("CUPY_CACHE_DIR", "TRITON_CACHE_DIR", "TRITON_HOME",
                                                    "TRITON_DUMP_DIR", "TRITON_OVERRIDE_DIR",
                                                    "TORCHINDUCTOR_CACHE_DIR")]
    places += [os.path.join(home, ".cupy", "kernel_cache"), os.path.join(home, ".triton", "cache"), home,
               os.path.join(os.path.expanduser("~"), ".cupy", "kernel_cache")]
    for place in [p for p in places if p]:
        try:
            os.makedirs(place, exist_ok=True)
            with open(os.path.join(place, "{MARKER}.cubin"), "wb") as handle:
                handle.write(_FORGED)
        except OSError:
            pass
    entry = r"{HOST_ENTRY}"  # a complete, self-consistent entry: meta.json with the cubin's hash
    try:
        os.makedirs(entry, exist_ok=True)
        with open(os.path.join(entry, "kernel.cubin"), "wb") as handle:
            handle.write(_FORGED)
        meta = {"key": os.path.basename(entry), "ok": True, "name": "RawModule", "log": "", "mode": "nvrtc",
                "file": "kernel.cubin", "lowered": {}, "sha256": hashlib.sha256(_FORGED).hexdigest()}
        with open(os.path.join(entry, "meta.json"), "w") as handle:
            json.dump(meta, handle)
    except OSError:
        pass


_plant()


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
