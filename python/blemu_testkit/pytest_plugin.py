"""The kit's pytest plugin (entry point `pytest11`, loaded once the kit is installed).

Fixtures:
- `blemu_rootcanal` (session): one rootcanal radio on free ports, stopped at the end.
- `blemu_device` (function): a factory, `blemu_device("heart-rate", name=…, options=[…])`,
  starting one `blemu run` on that radio (several devices: `blemu_device("heart-rate",
  "thermostat")`) and returning a `Blemu` once every device advertises; each is stopped after
  the test, which fails if blemu did not stop cleanly (exit status 0).
A failing test gets each blemu's output attached to its report.

Options: `--blemu-bin PATH` (else $BLEMU_BIN, else `blemu` on PATH).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

from .errors import BlemuError
from .process import Blemu
from .rootcanal import RootCanal

_STARTED = pytest.StashKey["list[Blemu]"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("blemu", "blemu test kit")
    group.addoption("--blemu-bin", default=None, help="the blemu executable (default $BLEMU_BIN, else blemu on PATH)")


@pytest.fixture(scope="session")
def blemu_rootcanal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RootCanal]:
    """A rootcanal radio for the session: `controller_spec` for blemu, `bumble_transport` for Bumble."""
    radio = RootCanal(log_path=tmp_path_factory.mktemp("rootcanal") / "rootcanal.log")
    radio.start()
    yield radio
    radio.stop()


class BlemuFactory(Protocol):
    def __call__(self, *devices: str, name: str | None = None, options: list[str] | tuple[str, ...] = (),
                 **kwargs: Any) -> Blemu: ...


@pytest.fixture
def blemu_device(request: pytest.FixtureRequest, blemu_rootcanal: RootCanal,
                 tmp_path: Path) -> Iterator[BlemuFactory]:
    """Start blemu with these devices on the session's radio: `blemu_device("heart-rate")`."""
    started: list[Blemu] = []
    request.node.stash[_STARTED] = started
    binary = request.config.getoption("--blemu-bin")

    def start(*devices: str, name: str | None = None, options: list[str] | tuple[str, ...] = (),
              **kwargs: Any) -> Blemu:
        kwargs.setdefault("controller", blemu_rootcanal.controller_spec)
        kwargs.setdefault("binary", binary)
        kwargs.setdefault("log_dir", tmp_path)
        device = Blemu(*(devices or ("heart-rate",)), name=name, options=options, **kwargs)
        started.append(device)  # its output goes into a failed test's report, a failed start's too
        try:
            return device.start()
        except BaseException:
            failed_starts.append(device)  # already reported by the exception; nothing to stop
            raise

    failed_starts: list[Blemu] = []
    yield start
    unclean = []
    for device in started:
        if device.process is None or device in failed_starts:
            continue
        was_running = device.running()
        try:
            status = device.stop()
        except BlemuError as error:  # it would not stop: killed; the others are still stopped
            unclean.append(str(error))
            continue
        if status != 0:
            why = "exited during the test" if not was_running else "did not stop cleanly on SIGTERM"
            unclean.append(f"blemu {' '.join(device.devices)} {why}: status {status}\n{device.log_tail()}")
    if unclean:
        pytest.fail("\n".join(unclean), pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if not report.failed:
        return
    for device in item.stash.get(_STARTED, []):
        report.sections.append((f"blemu {' '.join(device.devices)} output ({device.log_path})", device.log_tail(80)))
