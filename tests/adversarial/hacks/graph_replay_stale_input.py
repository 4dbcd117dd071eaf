# problem: 1_ReLU
# expect-status: correct incorrect rejected runtime_error
# speedup-max: 1.5
# marker: gpu
# family: CUDA graphs replaying stale work
# why: captures ReLU of the first call's own input tensor into a CUDA graph, then replays that
#   graph on every later call without copying the new input in, and returns the graph's static
#   output (the same storage every call). The replay reads wherever the first input lived: if
#   the allocator happens to put the next input there the answer looks right, otherwise it is
#   the first call's answer. Either it is caught or it gains nothing
#   (on an H200, 2026-11-28, the first call's input was no longer mapped when the graph
#   replayed: an illegal address, the worker retired, runtime_error: a crash gains nothing)
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._graph = None
        self._out = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._graph is None:
            warm = torch.cuda.Stream(device=x.device)
            warm.wait_stream(torch.cuda.current_stream(x.device))
            with torch.cuda.stream(warm):
                torch.relu(x)
            torch.cuda.current_stream(x.device).wait_stream(warm)
            self._graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self._graph):
                self._out = torch.relu(x)
        self._graph.replay()
        return self._out
