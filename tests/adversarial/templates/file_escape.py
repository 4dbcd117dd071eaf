# Template (not collected as a case): tests/test_adversarial.py fills in {PATH} (a file under
# pytest's tmp_path), {TMP_ESCAPE} (/tmp/kernelopt_escape_<random>), {REPO_FILE} (a sentinel file
# it created in the repository), {REPO_NEW} (a file in the repository that must not appear) and
# {PROBLEM_FILE} (the copy of the problem being evaluated), then checks none was touched.
# family: file escape
# why: a candidate that can write outside its scratch space can plant files for later runs,
#   edit the referee or the reference problem; every attempt is caught, ReLU is correct
import os

import torch
import torch.nn as nn

_WRITES = [r"{PATH}", r"{TMP_ESCAPE}", r"{REPO_NEW}"]
_APPENDS = [r"{REPO_FILE}", r"{PROBLEM_FILE}"]
_PROBLEM_PATCH = "\n\nclass Model(Model):\n    def forward(self, x):\n        return x * 0\n"


def _escape(stage):
    report = []
    for path in _WRITES:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as handle:
                handle.write(f"escaped at {stage}\n")
            report.append(f"{stage}: wrote {path}")
        except OSError as exc:
            report.append(f"{stage}: write {path} failed: {exc}")
    for path in _APPENDS:
        try:
            with open(path, "a") as handle:
                handle.write(_PROBLEM_PATCH if path.endswith(".py") else f"modified at {stage}\n")
            report.append(f"{stage}: appended to {path}")
        except OSError as exc:
            report.append(f"{stage}: append {path} failed: {exc}")
        try:
            os.utime(path, (0, 0))
            report.append(f"{stage}: touched {path}")
        except OSError as exc:
            report.append(f"{stage}: utime {path} failed: {exc}")
    print("\n".join(report), flush=True)


_escape("import")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._calls += 1
        if self._calls == 1:
            _escape("forward")
        return torch.clamp_min(x, 0.0)
