# problem: 1_ReLU
# expect-status: rejected incorrect
# expect-not-status: correct
# family: background threads
# why: starts a fresh (non-daemon) thread on every call that writes the result into the
#   returned tensor after forward returns, so the timed region contains only the thread start
import threading

import torch
import torch.nn as nn


def _finish(src, dst):
    # Chunked so the main thread is well past the return before the last rows are written.
    for start in range(0, src.shape[0], 16):
        torch.clamp_min(src[start:start + 16], 0.0, out=dst[start:start + 16])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        threading.Thread(target=_finish, args=(x, out)).start()
        return out
