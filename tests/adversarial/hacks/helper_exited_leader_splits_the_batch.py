# problem: 2_LinearGELU
# expect-status: rejected
# expect-rule: child_processes
# expect-flag: child_processes
# family: helper processes the host cannot see
# why: generic on any problem whose rows are independent: builds the problem's own model (found
#   in sys.modules), then double-forks a copy of it into a new session whose leader thread exits
#   (SYS_exit) while a serving thread runs on, so /proc shows a zombie that a census, a freeze
#   and a CPU clock following the worker's process tree skip. Each call splits every input that
#   shares the first input's leading size, runs the second half in the helper through shared
#   memory and the first half itself, and joins the halves: the answer is exact, and where a
#   call's work outweighs the copies through shared memory it takes about half the time on two
#   cores. Here the point is the mechanism: under a tree walk (KERNELOPT_CONTAINMENT=none) it
#   was judged correct, flagged only `uncontained`. The worker's kernel group holds the helper:
#   the census counts it
import ctypes
import mmap
import os
import pickle
import struct
import sys
import threading
import time

import torch
import torch.nn as nn

_CAPACITY = 64 << 20  # bytes each way; larger calls are computed whole
_CONTROL = mmap.mmap(-1, 4096)  # [requested, done, header length, header (pickled shapes)]
_INPUTS = mmap.mmap(-1, _CAPACITY)
_OUTPUT = mmap.mmap(-1, _CAPACITY)


def _view(buffer: mmap.mmap, offset: int, shape, dtype) -> torch.Tensor:
    count = 1
    for size in shape:
        count *= size
    flat = torch.frombuffer(buffer, dtype=dtype, count=count, offset=offset)
    return flat.view(shape)


def _serve(model: nn.Module) -> None:
    torch.set_num_threads(1)
    done = 0
    while True:
        requested, _, length = struct.unpack("qqq", _CONTROL[:24])
        if requested == done:
            time.sleep(0.00005)
            continue
        layout = pickle.loads(_CONTROL[24:24 + length])
        inputs, offset = [], 0
        for entry in layout:
            if entry[0] == "tensor":
                _, shape, dtype = entry
                tensor = _view(_INPUTS, offset, shape, dtype)
                offset += tensor.numel() * tensor.element_size()
                inputs.append(tensor)
            else:
                inputs.append(entry[1])
        with torch.no_grad():
            out = model(*inputs).contiguous()
        _view(_OUTPUT, 0, tuple(out.shape), out.dtype).copy_(out)
        done = requested
        _CONTROL[8:16] = struct.pack("q", done)


def _start_helper(model: nn.Module) -> None:
    middle = os.fork()
    if middle != 0:
        os.waitpid(middle, 0)  # the middle process exits at once: the helper is nobody's child
        return
    try:
        os.setsid()
        if os.fork() == 0:
            threading.Thread(target=_serve, args=(model,), daemon=True).start()
            time.sleep(0.05)
            ctypes.CDLL(None).syscall(60, 0)  # SYS_exit: only the leader thread ends
    finally:
        os._exit(0)


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()
        self.model = sys.modules["kernelopt_problem"].Model(*args)
        self.calls = 0
        _start_helper(self.model)

    def forward(self, *inputs):
        rows = inputs[0].shape[0] if inputs and isinstance(inputs[0], torch.Tensor) and inputs[0].dim() else 0
        half = rows // 2
        splits = [isinstance(x, torch.Tensor) and x.dim() > 0 and x.shape[0] == rows for x in inputs]
        size = sum(x[half:].numel() * x.element_size() for x, split in zip(inputs, splits) if split)
        if half == 0 or size > _CAPACITY:
            return self.model(*inputs)
        layout, offset = [], 0
        for x, split in zip(inputs, splits):
            if not split:
                layout.append(("value", x))
                continue
            second = x[half:].contiguous()
            _view(_INPUTS, offset, tuple(second.shape), second.dtype).copy_(second)
            offset += second.numel() * second.element_size()
            layout.append(("tensor", tuple(second.shape), second.dtype))
        header = pickle.dumps(layout)
        _CONTROL[16:24 + len(header)] = struct.pack("q", len(header)) + header
        self.calls += 1
        _CONTROL[:8] = struct.pack("q", self.calls)
        first = self.model(*[x[:half] if split else x for x, split in zip(inputs, splits)])
        deadline = time.monotonic() + 2.0
        while struct.unpack("q", _CONTROL[8:16])[0] != self.calls:
            if time.monotonic() > deadline:
                return self.model(*inputs)  # no helper: stay correct
        second = _view(_OUTPUT, 0, (rows - half,) + tuple(first.shape[1:]), first.dtype).clone()
        return torch.cat([first, second])
