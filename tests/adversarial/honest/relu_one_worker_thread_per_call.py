# problem: 1_ReLU
# expect-status: correct
# expect-kind: pytorch
# family: honest control for containment and the group's CPU time (work on a second core)
# why: each call hands its work to one worker thread and waits for it, as code built around an
#   executor does: one core works at a time, the thread is joined before the call returns, so
#   the group's CPU time per second of turn matches the reference's and no thread outlives the
#   call for the census
import threading

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result: list[torch.Tensor] = []
        worker = threading.Thread(target=lambda: result.append(torch.relu(x)), name="relu-worker")
        worker.start()
        worker.join()
        return result[0]
