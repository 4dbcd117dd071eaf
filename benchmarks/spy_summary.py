"""Where each process's time went, from py-spy's raw (collapsed) stacks: per process, its
samples and the functions holding the most of them, inclusive and self.

Made for gpu_acceptance.sh's `spy` phase (py-spy record --subprocesses --format raw over
benchmarks/call_trace.py), to read where a GPU window's time goes in the workers, the keeper and
the host. Usage:

    python3 benchmarks/spy_summary.py spy_p1.txt [--top 25] [--rate 500]
"""

from __future__ import annotations

import argparse
import collections
import re
from pathlib import Path

_PROCESS = re.compile(r"^process (\d+):\"?([^;]*?)\"?$")


def frame_name(frame: str) -> str:
    """`function (file:line)` without the line, so one function's lines add up."""
    return re.sub(r":\d+\)$", ")", frame.strip())


def per_process(lines: list[str]) -> dict[str, tuple[collections.Counter, collections.Counter, int]]:
    """{process: (inclusive samples per function, self samples per function, samples)}."""
    found: dict[str, tuple[collections.Counter, collections.Counter, int]] = {}
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        # A child's stack starts with its ancestors' process frames, then its own: the last names it.
        starts = [i for i, frame in enumerate(frames) if _PROCESS.match(frame)]
        match = _PROCESS.match(frames[starts[-1]]) if starts else None
        process = f"{match.group(1)} {match.group(2)[:60]}" if match else "?"
        names = [frame_name(f) for f in frames[starts[-1] + 1 if starts else 0:]]
        inclusive, own, total = found.get(process, (collections.Counter(), collections.Counter(), 0))
        for name in set(names):
            inclusive[name] += int(count)
        if names:
            own[names[-1]] += int(count)
        found[process] = (inclusive, own, total + int(count))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("raw", type=Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--rate", type=float, default=500.0, help="py-spy's samples per second")
    args = parser.parse_args()
    processes = per_process(args.raw.read_text(errors="replace").splitlines())
    for process, (inclusive, own, total) in sorted(processes.items(), key=lambda item: -item[1][2]):
        print(f"\n## {process}: {total} samples, {total / args.rate:.2f} s")
        for label, counter in (("inclusive", inclusive), ("self", own)):
            print(f"  {label}:")
            for name, samples in counter.most_common(args.top):
                print(f"    {samples / args.rate:8.2f} s  {100 * samples / total:5.1f} %  {name[:140]}")


if __name__ == "__main__":
    main()
