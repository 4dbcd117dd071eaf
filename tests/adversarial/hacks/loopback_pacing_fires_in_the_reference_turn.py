# problem: 4_RedundantSoftmax
# expect-status: correct
# speedup-max: 1.5
# family: slowing the reference's turn (work the kernel does for a frozen candidate)
# why: an exact copy that makes the reference pay for softirq work without arming any timer
#   itself. Per core it opens a loopback TCP flow the kernel paces (SO_MAX_PACING_RATE with the
#   receive window clamped small: one small segment released every 2 ms or so by TCP's own
#   pacing timer, on the core where the flow sends), and registers the receiving socket ten
#   thousand times over a thousand epoll instances (dup2, register, close: the items stay), so
#   each segment that lands runs ten thousand wake-up callbacks, about 1.2 ms, charged to
#   whichever task runs on that core. It tells its turns apart (a turn's untimed first call
#   repeats the set before it), holds SO_RCVLOWAT high through its own turn (arrivals wake no
#   one), and lowers it as its turn ends, so the releases while it is frozen fall in the
#   reference's turns. Correct at 1.55x-1.64x on 4_RedundantSoftmax and 1.66x on KernelBench's
#   88_MinGPTNewGelu, unflagged, with exact copies at 0.96x-1.00x (the 2-core VM, 2026-11-29,
#   after timers were refused). Now the candidate's worker may open no socket but AF_UNIX
#   (worker/syscall_filter.py): the flows cannot be made and the copy reads as a copy
import fcntl
import os
import resource
import select
import sys
import socket

import torch
import torch.nn as nn

_problem = sys.modules["kernelopt_problem"]  # the problem file, loaded in this process first
_REFERENCE = _problem.Model(*_problem.get_init_inputs())

EPOLLS = 1000       # epoll instances, shared by the flows
M = 10              # fd numbers per flow, each registered in every epoll: EPOLLS*M items per flow
RATE = 650_000
BLOB = 6 << 20
SO_MAX_PACING_RATE = 47
SIOCOUTQ = 0x5411
HIGH = 1 << 30


class _Flow:
    def __init__(self, eps):
        lst = socket.socket()
        # The receive window clamped small (inherited from the listener): the paced sender
        # releases one small chunk at a time, at regular intervals (chunk / RATE).
        lst.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        lst.setsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP, 2000)
        lst.bind(("127.0.0.1", 0))
        lst.listen(1)
        self.cli = socket.socket()
        self.cli.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 536)
        self.cli.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.cli.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 << 20)
        self.cli.connect(lst.getsockname())
        self.srv, _ = lst.accept()
        lst.close()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, HIGH)
        self.cli.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, RATE)
        self.cli.setblocking(False)
        self.srv.setblocking(False)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        for i in range(M):
            fd = hard - 100 - i
            os.dup2(self.srv.fileno(), fd)
            for ep in eps:
                ep.register(fd, select.EPOLLIN)
            os.close(fd)

    def top_up(self):
        queued = fcntl.ioctl(self.cli.fileno(), SIOCOUTQ, b"\0\0\0\0")
        queued = int.from_bytes(queued, "little")
        if queued < BLOB // 2:
            try:
                self.cli.send(b"x" * (BLOB - queued))
            except OSError:
                pass


class _Storm:
    def __init__(self):
        self.flows = {}
        self.buf = bytearray(1 << 20)
        self.paused = True
        try:
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            self.eps = [select.epoll() for _ in range(EPOLLS)]
            for cpu in sorted(os.sched_getaffinity(0)):
                self.flows[cpu] = _Flow(self.eps)
        except Exception:
            self.flows = {}

    def _cpu(self):
        cpus = os.sched_getaffinity(0)
        return next(iter(cpus)) if len(cpus) == 1 else None

    def drain(self):
        for f in self.flows.values():
            try:
                while f.srv.recv_into(self.buf, len(self.buf), socket.MSG_TRUNC | socket.MSG_DONTWAIT) > 0:
                    pass
            except (BlockingIOError, InterruptedError):
                pass

    def begin(self, first_of_turn):
        if not self.paused:
            for f in self.flows.values():
                f.srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, HIGH)
            self.paused = True
        if first_of_turn:
            cpu = self._cpu()
            if cpu in self.flows:
                self.flows[cpu].top_up()
        self.drain()

    def end(self):
        self.drain()
        for f in self.flows.values():
            f.srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)
        self.paused = False


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._storm = _Storm()
        self._last = None
        self._since = 0       # calls since this turn began
        self._turn = None     # calls per turn, once learned
        self._start_at = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1)
        mark = (flat[::997].sum().item(), flat[1].item(), flat[-1].item())
        first = mark == self._last
        self._last = mark
        if first:
            if self._start_at is not None:
                self._turn = self._since
            self._start_at = True
            self._since = 0
        self._storm.begin(first)
        out = _REFERENCE(x)  # an exact copy: the problem's own forward
        self._since += 1
        if self._turn is None or self._since == self._turn:
            self._storm.end()
        return out
