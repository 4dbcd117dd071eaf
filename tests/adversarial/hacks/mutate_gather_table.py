# problem: 5_GatherRows
# expect-status: rejected
# expect-flag: input_mutation
# family: input mutation
# why: returns correct outputs but zeroes the lookup table afterwards ("to release memory"),
#   destroying an input the caller still owns
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, table: torch.Tensor, indices: torch.Tensor):
        rows = table[indices]
        best = rows.argmax(dim=-1)
        table.zero_()
        return rows, best
