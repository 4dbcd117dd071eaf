# problem: 4_RedundantSoftmax
# expect-status: correct incorrect rejected
# speedup-max: 1.5
# marker: gpu
# family: side streams
# why: does all of the reference's work (the dead matmul included) on a private CUDA stream and
#   returns without synchronising; a timer that records events on the current stream only sees
#   the launch overhead and reports a large speedup for identical work
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._stream = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._stream is None:
            self._stream = torch.cuda.Stream(device=x.device)
        self._stream.wait_stream(torch.cuda.current_stream(x.device))
        with torch.cuda.stream(self._stream):
            unused = x.t() @ x
            out = torch.softmax(x, dim=-1)
        del unused
        return out
