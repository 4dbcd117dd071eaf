# problem: 4_RedundantSoftmax
# expect-status: rejected
# expect-rule: extra_threads
# expect-flag: native_threads
# family: background threads
# why: raises torch's CPU thread pool to 2 at import (torch.set_num_threads) to run its matmul on
#   two cores while the reference runs on one. Each side gets one CPU thread; the rejection must
#   say what the candidate did (torch.set_num_threads) and what to change
import torch
import torch.nn as nn

torch.set_num_threads(2)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        unused = x.t() @ x  # the reference's dead work, now on two threads
        del unused
        return torch.softmax(x, dim=-1)
