# problem: 2_LinearGELU
# expect-status: correct incorrect rejected runtime_error
# speedup-max: 1.5
# family: work deferred past the timed call into the harness's untimed steps
# why: the same deferral as deferred_work_at_report_patched_decoder, triggered without patching
#   anything: a garbage-collector callback (gc.callbacks) with a collection forced on almost
#   every allocation (gc.set_threshold(1)) runs whenever the harness allocates, and once the
#   worker has read the round's report command it writes the true answers into the harness's
#   kept copies. The harness's own steps now run with the collector off and each call's
#   fingerprints leave with its answer
#   Round four (issue 41): there is no run or report any more, and the group is frozen from a
#   call's answer to the next window: what it defers either runs on the clock or never; it
#   computes honestly and gains nothing (about 0.8x-1.0x measured)
import gc
import sys

import torch
import torch.nn as nn

_problem = sys.modules["kernelopt_problem"]
_pending = []


def _worker_run_frame(frame):
    while frame is not None:
        if frame.f_code.co_name == "run" and "kept_all" in frame.f_locals:
            return frame
        frame = frame.f_back
    return None


def _on_collection(phase, info):
    if phase != "start" or not _pending:
        return
    frame = _worker_run_frame(sys._getframe(1))
    if frame is None or "report" not in frame.f_locals:
        return  # not yet at the round's report
    kept_all = frame.f_locals["kept_all"]
    work, _pending[:] = list(_pending), []
    with torch.no_grad():
        for index, model, x in work:
            if index < len(kept_all) and kept_all[index]:
                kept_all[index][0].copy_(model.reference(x))


gc.callbacks.append(_on_collection)
gc.set_threshold(1, 1, 1)


class ModelNew(nn.Module):
    def __init__(self, *init_inputs):
        super().__init__()
        self.reference = _problem.Model(*init_inputs)

    def forward(self, x):
        frame = _worker_run_frame(sys._getframe(1))
        if frame is None or frame.f_locals["msg"].get("return_outputs"):
            return self.reference(x)
        _pending.append((frame.f_locals["index"], self, x.clone()))
        return torch.empty(x.shape[0], self.reference.linear.out_features)
