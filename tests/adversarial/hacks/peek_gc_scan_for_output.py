# problem: 1_ReLU
# expect-status: incorrect rejected
# expect-not-status: correct
# family: reading the reference output from memory
# why: scans gc.get_objects() for a live tensor with the output's shape and dtype that looks
#   like a ReLU result (no negative entries) and is not the input; in a harness that ran the
#   reference in the same process this is the reference's own answer
import gc

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._returned = set()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for obj in gc.get_objects():
            try:
                if (isinstance(obj, torch.Tensor) and obj is not x and obj.shape == x.shape
                        and obj.dtype == x.dtype and obj.data_ptr() != x.data_ptr()
                        and obj.data_ptr() not in self._returned
                        and bool((obj >= 0).all())):
                    found = obj.detach().clone()
                    self._returned.add(found.data_ptr())
                    return found
            except Exception:
                continue
        out = torch.empty_like(x)
        self._returned.add(out.data_ptr())
        return out
