"""tests/live_report.py, the plugin the GPU acceptance script loads: a run cut off before its
summary must still have written each failure and warning as it happened."""

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_failures_and_warnings_are_written_as_they_happen(tmp_path):
    (tmp_path / "test_sample.py").write_text(
        "import warnings\n"
        "def test_passes(): pass\n"
        "def test_fails(): assert 1 + 1 == 3, 'arithmetic'\n"
        "def test_warns(): warnings.warn('expectation waived')\n")
    report = tmp_path / "live.txt"
    env = dict(os.environ, LIVE_REPORT=str(report), PYTHONPATH=str(TESTS))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "live_report", "-p", "no:cacheprovider",
                           str(tmp_path / "test_sample.py")], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 1, done.stdout + done.stderr
    text = report.read_text()
    assert "=== FAILED" in text and "test_fails" in text and "arithmetic" in text
    assert "=== WARNING" in text and "expectation waived" in text
    assert "test_passes" not in text
