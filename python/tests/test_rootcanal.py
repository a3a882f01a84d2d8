"""RootCanal's start when the binary cannot run: a rootcanal built for a newer glibc than this
system's (PyPI's 1.13.0 needs 2.38; Debian 12 has 2.36) fails in the dynamic loader, and the
kit's error names the glibc it needs and the pin that works. The failing rootcanal is a
stand-in script that fails exactly as the loader does."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from blemu_testkit import BlemuError, RootCanal

LOADER_REFUSAL = r'''
import sys
me = sys.argv[0]
for version in ("2.38", "2.34"):
    print(f"{me}: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_{version}' not found (required by {me})",
          file=sys.stderr)
sys.exit(1)
'''


def script(folder: Path, body: str) -> str:
    path = folder / "rootcanal"
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_a_rootcanal_too_new_for_this_glibc_is_named_with_the_pin_that_works(tmp_path, monkeypatch):
    fake = script(tmp_path, LOADER_REFUSAL)
    monkeypatch.setenv("BLEMU_ROOTCANAL", fake)
    with pytest.raises(BlemuError) as refused:
        RootCanal(log_path=tmp_path / "rootcanal.log").start(timeout=10)
    message = str(refused.value)
    assert message.startswith(f"rootcanal ({fake}) needs glibc 2.38"), message
    assert "pip install 'rootcanal==1.10.0'" in message, message
    assert "GLIBC_2.38' not found" in message  # the loader's own words follow, in the log's tail


def test_a_rootcanal_that_fails_otherwise_gets_no_glibc_advice(tmp_path, monkeypatch):
    monkeypatch.setenv("BLEMU_ROOTCANAL", script(tmp_path, "import sys\nprint('bad flag')\nsys.exit(2)\n"))
    with pytest.raises(BlemuError) as refused:
        RootCanal(log_path=tmp_path / "rootcanal.log").start(timeout=10)
    message = str(refused.value)
    assert message.startswith("rootcanal exited with status 2"), message
    assert "glibc" not in message and "bad flag" in message
