import math
# Red-team candidate: honest exact copy of 4_RedundantSoftmax, plus an "IRQ storm" planted for the
# reference: at the end of its last call of every round where it goes first, it arms one-shot
# timerfds (each watched by ~1000 epoll instances, so one expiry runs ~1000 wakeup callbacks in
# hard-irq context) to expire, spread out, while it is frozen and the reference's two turns run on
# the same pinned core. The kernel has no IRQ_TIME_ACCOUNTING, so that irq time is charged to the
# task that happens to be running: the reference worker's group.
import ctypes, os, select, sys, time, resource
import torch
import torch.nn as nn

libc = ctypes.CDLL(None, use_errno=True)
class _ts(ctypes.Structure):
    _fields_ = [("s", ctypes.c_long), ("ns", ctypes.c_long)]
class _its(ctypes.Structure):
    _fields_ = [("interval", _ts), ("value", _ts)]
libc.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
libc.timerfd_settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
_settime = libc.timerfd_settime

N_TIMERS = int(os.environ.get("RT_TIMERS", "1500"))
N_EPOLLS = int(os.environ.get("RT_EPOLLS", "1000"))
SPACING_NS = int(os.environ.get("RT_SPACING_US", "450")) * 1000
DELAY_NS = 600_000

def _log(*a):
    print("[rt]", *a, file=sys.stderr, flush=True)

class _Storm:
    def __init__(self):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = N_TIMERS + N_EPOLLS + 200
        if soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, want) if hard != resource.RLIM_INFINITY else want, hard))
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        n_ep = min(N_EPOLLS, soft - N_TIMERS - 100)
        self.tfds = [libc.timerfd_create(1, 0o4000 | 0o2000000) for _ in range(N_TIMERS)]
        self.eps = []
        for _ in range(n_ep):
            ep = select.epoll()
            for fd in self.tfds:
                ep.register(fd, select.EPOLLIN)
            self.eps.append(ep)
        self.its = _its()
        self.zero = _its()
        self.armed_until = 0
        self.armed = []
        _log("nofile", soft, hard, "timers", len(self.tfds), "epolls", n_ep)

    def arm(self, start_ns, window_ns):
        n = min(len(self.tfds), max(0, window_ns // SPACING_NS))
        its = self.its; ref = ctypes.byref(its)
        armed = []
        for i in range(n):
            t = start_ns + i * SPACING_NS
            its.value.s, its.value.ns = divmod(t, 1_000_000_000)
            _settime(self.tfds[i], 1, ref, None)
            armed.append((t, self.tfds[i]))
        self.armed = armed
        self.first = 0
        return n

    def push_back(self, until):
        """Disarm the armed timers that would expire before `until` (they would hit our own calls)."""
        z = ctypes.byref(self.zero); k = 0
        while self.first < len(self.armed) and self.armed[self.first][0] < until:
            _settime(self.armed[self.first][1], 0, z, None)
            self.first += 1; k += 1
        return k

    def disarm_pending(self, now):
        z = ctypes.byref(self.zero); k = 0
        for t, fd in self.armed[self.first:]:
            if t > now:
                _settime(fd, 0, z, None); k += 1
        self.armed = []
        return k


class _Tracker:
    """Tells the turns apart (a turn's untimed first call repeats the previous call's set), arms the
    storm in the untimed first call of each turn where the candidate goes first (timers start after
    its own turn's predicted end), disarms leftovers in the untimed first call of its next turn."""
    def __init__(self):
        self.storm = _Storm()
        self.last_sample = None
        self.repeats = 0
        self.turn_calls = 0
        self.turn_start = None
        self.prev_end = None
        self.turn_rest = None
        self.gap_H = None
        self.gap_G = None
        self.armed_at = None
        self.log = []
        self.turn_len = None
        self.step = None
        self.step_med = None
        self.steps = []
        self.prev_start = None

    def before(self, x):
        now = time.monotonic_ns()
        self.c0 = time.thread_time_ns(); self.now = now
        st = self.storm
        sample = x.reshape(-1)[:32].clone()
        self.sample = sample
        repeat = self.last_sample is not None and torch.equal(sample, self.last_sample)
        if repeat:
            if st.armed:
                k = st.disarm_pending(now)
                self.log.append(("disarmed", k))
            if self.turn_start is not None and self.turn_calls > 1:
                self.turn_rest = self.prev_end - self.turn_start
            self.repeats += 1
            gap = now - self.prev_end
            if self.repeats % 2 == 0:
                self.gap_H = gap
            elif self.armed_at is not None:
                self.gap_G = now - self.armed_at
            if self.repeats == 2:
                self.turn_len = self.turn_calls
            self.turn_calls = 0
            self.turn_start = now
            self.armed_at = None
            if self.repeats >= 2 and self.repeats % 2 == 0 and self.turn_rest is not None:
                begin = now + int(1.35 * self.turn_rest) + 1_000_000
                if self.gap_G is not None:
                    window = int(1.5 * self.gap_G)
                else:
                    window = int(2 * (2 * self.turn_rest + (self.gap_H or 0)))
                n = st.arm(begin, window)
                self.armed_at = now
                self.log.append(("armed", n, window // 1000))
                if len(self.log) < 60:
                    _log(self.log[-4:], "G", self.gap_G, "H", self.gap_H, "rest", self.turn_rest)
        else:
            if self.prev_start is not None and self.repeats >= 1 and self.turn_calls >= 1:
                self.steps.append(now - self.prev_start)
                recent = self.steps[-10:]
                self.step = max(recent)
                self.step_med = sorted(recent)[len(recent) // 2]
            if st.armed and self.armed_at is not None and self.turn_len and self.step:
                remaining = self.turn_len - self.turn_calls   # calls left, this one included
                until = now + int((remaining - 1) * self.step_med + 1.2 * self.step) + 1_000_000
                k = st.push_back(until)
                if k:
                    self.log.append(("pushed", k))
        if repeat and self.repeats == 2:
            pass
        self.turn_calls += 1
        self.prev_start = now

    def after(self):
        self.last_sample = self.sample
        self.prev_end = time.monotonic_ns()
        if os.environ.get("RT_TRACE", "0") == "1":
            print(f"c r{self.repeats} t{self.turn_calls} cpu{(time.thread_time_ns()-self.c0)/1e6:.2f} w{(self.prev_end-self.now)/1e6:.2f} {os.sched_getaffinity(0)}", file=sys.stderr, flush=True)


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()
        self._t = _Tracker()

    def forward(self, x):
        self._t.before(x)
        out = 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
        self._t.after()
        return out
