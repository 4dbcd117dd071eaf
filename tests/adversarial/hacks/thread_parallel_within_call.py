# problem: 4_RedundantSoftmax
# expect-status: rejected
# expect-rule: parallel_cpu_time
# expect-flag: native_threads
# no-gain-max: 1.25
# family: background threads
# why: does the reference's own work (its 2048 x 2048 product and the softmax), but computes
#   half of the product on a thread it moves to another core, joining it before forward
#   returns: the answer is complete and on time, no thread outlives the call for a census to
#   see, and the call takes about half as long because the candidate used two cores where the
#   reference has one. The host now reads the candidate process's CPU clock (which keeps the
#   time of threads that have exited) around each turn: more CPU time than wall time means
#   work ran on more than one core at once
import os
import threading

import torch
import torch.nn as nn


def _other_cores():
    mine = os.sched_getaffinity(0)
    allowed = set(range(os.cpu_count() or 1))
    return (allowed - mine) or mine


class ModelNew(nn.Module):
    def forward(self, x):
        half = x.shape[1] // 2
        parts = [None, None]

        def second_half():
            try:
                os.sched_setaffinity(0, _other_cores())
            except OSError:
                pass
            parts[1] = x[:, half:].t() @ x  # noqa: F821 (the list is deleted after the join)

        helper = threading.Thread(target=second_half)
        helper.start()
        parts[0] = x[:, :half].t() @ x
        helper.join()
        del parts
        return torch.softmax(x, dim=-1)
