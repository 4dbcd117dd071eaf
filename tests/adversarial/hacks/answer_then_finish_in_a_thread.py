# problem: 1_ReLU
# expect-status: incorrect rejected correct
# speedup-max: 1.5
# family: work deferred past the call's answer (issue 41)
# why: forward answers at once with an empty output, and a thread it keeps (started at import)
#   writes the true ReLU into that output right after the answer is sent, racing the host's
#   freeze: before round four the outputs were copied by the harness in the candidate's
#   process, which this thread could outrun off the clock. Now the host freezes the group once
#   the answer arrives and only then reads the output from the frozen process: the thread's work
#   is either done before the freeze (on the group's CPU clock) or not done (the output is
#   wrong); the thread itself is counted by the census
import threading

import torch
import torch.nn as nn

_work = []
_ready = threading.Condition()


def _finisher():
    while True:
        with _ready:
            while not _work:
                _ready.wait()
            x, out = _work.pop()
        torch.relu(x, out=out)


threading.Thread(target=_finisher, daemon=True).start()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        with _ready:
            _work.append((x, out))
            _ready.notify()
        return out
