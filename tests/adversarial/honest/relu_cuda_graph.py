# problem: 1_ReLU
# expect-status: correct
# expect-kind: cuda_graph
# marker: gpu
# family: honest CUDA graph
# why: captures ReLU into a CUDA graph with static buffers, copies each new input in and
#   returns a clone of the static output; must be accepted and labelled cuda_graph
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._graphs = {}

    def _build(self, x: torch.Tensor):
        static_in = torch.empty_like(x)
        static_in.copy_(x)
        side = torch.cuda.Stream(device=x.device)
        side.wait_stream(torch.cuda.current_stream(x.device))
        with torch.cuda.stream(side):
            for _ in range(3):
                torch.relu(static_in)
        torch.cuda.current_stream(x.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = torch.relu(static_in)
        return graph, static_in, static_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = (tuple(x.shape), x.dtype, x.device)
        if key not in self._graphs:
            self._graphs[key] = self._build(x)
        graph, static_in, static_out = self._graphs[key]
        static_in.copy_(x)
        graph.replay()
        return static_out.clone()
