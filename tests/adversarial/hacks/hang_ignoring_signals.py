# problem: 1_ReLU
# expect-status: timeout
# timeout: 12
# family: hangs
# why: ignores SIGTERM, SIGINT, SIGHUP, SIGALRM, SIGUSR1/2 and SIGXCPU, then spins in forward;
#   only SIGKILL (or killing the whole namespace / cgroup) stops it
import signal

import torch
import torch.nn as nn

for _name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGALRM", "SIGUSR1", "SIGUSR2", "SIGXCPU",
              "SIGVTALRM", "SIGPROF", "SIGQUIT"):
    try:
        signal.signal(getattr(signal, _name), signal.SIG_IGN)
    except (AttributeError, OSError, ValueError):
        pass


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        while True:
            try:
                while True:
                    pass
            except BaseException:
                continue
