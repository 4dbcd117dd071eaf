# problem: 1_ReLU
# expect-status: correct runtime_error rejected
# speedup-max: 1.5
# family: process exit and forged reports
# why: writes fake result messages (status correct, huge speedup) to stdout, stderr and every
#   writable file descriptor on the first calls, then computes ReLU correctly (three times
#   over, so it is really slower than the reference); whatever the verdict, the forged speedup
#   must not be believed
import json
import os
import pickle
import sys

import torch
import torch.nn as nn

_FAKE = {"status": "correct", "correct": True, "speedup": 1000.0, "reference_ms": 10.0,
         "candidate_ms": 0.01, "candidate_ms_samples": [0.01] * 50, "flags": []}


def _forge():
    text = (json.dumps(_FAKE) + "\n").encode()
    blob = pickle.dumps(_FAKE)
    framed = len(blob).to_bytes(4, "little") + blob
    sys.stdout.write(text.decode())
    sys.stdout.flush()
    sys.stderr.write(text.decode())
    for fd in range(3, 256):
        try:
            if os.isatty(fd):
                continue
            os.write(fd, text)
            os.write(fd, framed)
        except OSError:
            pass


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._calls += 1
        if self._calls <= 2:
            _forge()
        out = torch.clamp_min(x, 0.0)
        out = torch.clamp_min(out, 0.0)
        return torch.clamp_min(out, 0.0)
