# problem: 5_GatherRows
# expect-status: correct
# expect-kind: pytorch
# family: honest multi-output with integer dtype
# why: index_select + argmax; the int64 argmax output must survive transport and comparison
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, table: torch.Tensor, indices: torch.Tensor):
        rows = torch.index_select(table, 0, indices)
        return rows, torch.argmax(rows, dim=1)
