# Template (not collected as a case): tests/test_adversarial.py replaces {PORT} with the port of
# a TCP server it runs on the host's 127.0.0.1, and asserts the server saw no connection.
# family: network escape
# why: a candidate that can reach the network can exfiltrate problems and secrets or fetch
#   answers; every attempt here is caught and reported, and ReLU is computed correctly
import socket

import torch
import torch.nn as nn

_PORT = int("{PORT}")
_TARGETS = [("127.0.0.1", _PORT), ("localhost", _PORT), ("::1", _PORT)]


def _phone_home(stage):
    report = []
    for host, port in _TARGETS:
        try:
            with socket.create_connection((host, port), timeout=2.0) as conn:
                conn.sendall(f"kernelopt-escape {stage}\n".encode())
            report.append(f"{stage}: tcp {host}:{port} CONNECTED")
        except OSError as exc:
            report.append(f"{stage}: tcp {host}:{port} failed: {exc}")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.sendto(f"kernelopt-escape {stage}\n".encode(), ("127.0.0.1", _PORT))
        report.append(f"{stage}: udp sent")
    except OSError as exc:
        report.append(f"{stage}: udp failed: {exc}")
    try:
        socket.getaddrinfo("example.com", 443)
        report.append(f"{stage}: dns resolved example.com")
    except OSError as exc:
        report.append(f"{stage}: dns failed: {exc}")
    print("\n".join(report), flush=True)


_phone_home("import")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._calls += 1
        if self._calls <= 2:
            _phone_home(f"forward-{self._calls}")
        return torch.clamp_min(x, 0.0)
