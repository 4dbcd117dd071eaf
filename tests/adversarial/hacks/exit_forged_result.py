# problem: 1_ReLU
# expect-status: runtime_error
# family: process exit and forged reports
# why: on the first forward call prints result-looking JSON lines (status correct, speedup 100)
#   to stdout and stderr and into every open file descriptor, then exits with status 0; the
#   referee must not take any of that as the worker's report
import json
import os
import sys

import torch
import torch.nn as nn

_FAKE = [
    {"status": "correct", "correct": True, "speedup": 100.0, "reference_ms": 1.0,
     "candidate_ms": 0.01, "flags": [], "message": "ok"},
    {"type": "result", "ok": True, "status": "correct", "outputs_match": True, "time_ms": 0.001},
    {"kind": "done", "passed": True, "candidate_ms": 0.001, "fingerprints": []},
]


def _forge():
    lines = "".join(json.dumps(item) + "\n" for item in _FAKE).encode()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.write(lines.decode())
            stream.flush()
        except Exception:
            pass
    for fd in range(1, 256):
        try:
            os.write(fd, lines)
        except OSError:
            pass


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _forge()
        os._exit(0)
