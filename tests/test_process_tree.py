"""The one reader of /proc/PID/stat (process_tree.stat_fields) and what is read through it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from kernelopt.sandbox import process_tree


def test_a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields(tmp_path):
    """A process names itself (its executable's file name): the fields after the name must still
    be found, or a candidate's helper could pass for a child of the container's init, or a pid
    reused by another process for the one the host started."""
    odd = tmp_path / "a) 1 (b"
    odd.symlink_to(sys.executable)
    child = subprocess.Popen([str(odd), "-c", "import time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 10
        while process_tree.stat_fields(child.pid) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert process_tree.parent_pid(child.pid) == os.getpid()
        started = process_tree.start_time(child.pid)
        assert started is not None and started >= process_tree.start_time(os.getpid())
        assert not process_tree.is_zombie(child.pid)
        child.kill()
        deadline = time.monotonic() + 10
        while not process_tree.is_zombie(child.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        # Dead but not yet reaped: no start time, so it is no longer the process it was.
        assert process_tree.is_zombie(child.pid) and process_tree.start_time(child.pid) is None
    finally:
        child.kill()
        child.wait()
    assert process_tree.stat_fields(child.pid) is None and process_tree.parent_pid(child.pid) is None
