"""The plugin's teardown: a blemu that died during a test fails that test, with its status."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CRASHING_TEST = '''
import signal

def test_blemu_is_killed(blemu_device):
    heart = blemu_device("heart-rate")
    heart.process.send_signal(signal.SIGKILL)
    heart.process.wait(5)
'''


def test_a_blemu_that_died_during_the_test_fails_it(tmp_path: Path) -> None:
    (tmp_path / "test_crash.py").write_text(CRASHING_TEST)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_crash.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=os.environ.copy())
    assert result.returncode == 1, result.stdout[-3000:]
    assert "1 passed, 1 error" in result.stdout, result.stdout[-3000:]
    assert "blemu heart-rate exited during the test: status -9" in result.stdout, result.stdout[-3000:]
