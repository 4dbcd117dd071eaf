# problem: 1_ReLU
# expect-status: correct incorrect rejected
# speedup-max: 1.5
# marker: gpu
# family: side streams
# why: computes ReLU on a side stream (three times, to make the hidden work large) and returns
#   without any synchronisation back to the current stream
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
            out = torch.relu(x)
            for _ in range(2):
                out = torch.relu(out)
        return out
