# problem: 2_LinearGELU
# expect-status: correct incorrect rejected runtime_error
# speedup-max: 1.5
# family: work deferred past the timed call into the harness's untimed steps
# why: the same deferral as deferred_work_at_report_patched_decoder, run by an interval timer's
#   signal handler instead: the handler runs in the worker's main thread (no thread for a census
#   to count) whenever the timer fires, including while the worker waits for its next command
#   after the round's last call, and then writes the true answers into the harness's kept
#   copies. The worker now blocks signals outside the candidate's own code, and each call's
#   fingerprints leave with its answer
#   Round four (issue 41): there is no run or report any more, and the group is frozen from a
#   call's answer to the next window: what it defers either runs on the clock or never; it
#   computes honestly and gains nothing (about 0.8x-1.0x measured)
import signal
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


def _on_timer(signum, frame):
    run = _worker_run_frame(frame)
    if run is None or not _pending:
        return
    kept_all = run.f_locals["kept_all"]
    if len(kept_all) < run.f_locals["count"]:
        return  # the round's calls are not over
    work, _pending[:] = list(_pending), []
    with torch.no_grad():
        for index, model, x in work:
            if index < len(kept_all) and kept_all[index]:
                kept_all[index][0].copy_(model.reference(x))


signal.signal(signal.SIGALRM, _on_timer)


class ModelNew(nn.Module):
    def __init__(self, *init_inputs):
        super().__init__()
        self.reference = _problem.Model(*init_inputs)

    def forward(self, x):
        frame = _worker_run_frame(sys._getframe(1))
        if frame is None or frame.f_locals["msg"].get("return_outputs"):
            return self.reference(x)
        _pending.append((frame.f_locals["index"], self, x.clone()))
        signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)
        return torch.empty(x.shape[0], self.reference.linear.out_features)
