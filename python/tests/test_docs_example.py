"""Docs/TESTING-APPS.md's complete test, run as written: the first Python block under
"### A complete test" goes into a file of its own and pytest runs it (the installed plugin
provides its fixtures), so the page cannot go stale."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "Docs" / "TESTING-APPS.md"


def example_block() -> str:
    text = DOC.read_text()
    section = text.split("### A complete test", 1)[1]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert "def test_" in block, "the example has no test in it"
    return block


def test_the_documented_example_passes(tmp_path: Path) -> None:
    (tmp_path / "test_heart_app.py").write_text(example_block())
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_heart_app.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=os.environ.copy())
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "1 passed" in result.stdout, result.stdout
