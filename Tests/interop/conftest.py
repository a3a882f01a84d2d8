"""Fixtures for blemu's interop tests: a rootcanal radio, blemu processes, Bumble centrals.

- `rootcanal` (module): one rootcanal; every TCP connection to its HCI port is a new
  controller on the same simulated radio.
- `blemu` (module): one `blemu run heart-rate` on that radio, already advertising; its
  teardown sends SIGTERM and asserts exit status 0 (a clean stop).
- `blemu_factory` (function): start more blemu processes (restart, clean-stop tests; any
  BlemuProcess options: devices, extra_args, env, log_args, ...).
- `restartable_rootcanal` (function): a rootcanal of its own that a test can crash and
  restart on the same HCI port (controller recovery tests).
Helpers for the tests themselves (run, unique_name, BlemuProcess) live in harness.py.

Every test has its own $STATE_DIRECTORY (a temporary directory), so a blemu started without
--state-dir never writes to ~/.local/state/blemu.

Environment:
  BLEMU_BIN       the blemu executable (default .build/debug/blemu, else .build/release/blemu)
  BLEMU_LOG_ARGS  logging options passed to blemu (default "--log stderr --log-level debug")
  BLEMU_TEST_LOG_DIR  where process output goes (default: a new /tmp/blemu-interop-* folder)
"""

from __future__ import annotations

import os
import tempfile

import pytest

from harness import BlemuError, BlemuFactory, BlemuProcess, RestartableRootCanal, RootCanal, log_dir, start_advertising, unique_name

# No test writes to the user's ~/.local/state/blemu: every blemu the tests start without
# --state-dir keeps its bonds, identities and passkeys in $STATE_DIRECTORY, a temporary
# directory; this one for the module fixtures, started before any test's own.
os.environ["STATE_DIRECTORY"] = tempfile.mkdtemp(prefix="state-", dir=log_dir())


@pytest.fixture(autouse=True)
def own_state_directory(tmp_path_factory, monkeypatch):
    """Each test's own state directory ($STATE_DIRECTORY), for the blemu processes it starts."""
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path_factory.mktemp("state")))


@pytest.fixture(scope="module")
def rootcanal():
    server = RootCanal(log_path=log_dir() / f"rootcanal-{unique_name('rc')}.log")
    try:
        server.start()
    except BlemuError as error:
        pytest.fail(str(error), pytrace=False)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def blemu(rootcanal):
    """One heart-rate blemu for the module, advertising when the first test gets it."""
    process = start_advertising(BlemuProcess(rootcanal.controller_spec, unique_name()), rootcanal)
    yield process
    if process.exited() is not None:
        pytest.fail(f"blemu died during the tests: {process.exited()}", pytrace=False)
    status = process.stop()
    assert status == 0, f"blemu exited with status {status} on SIGTERM (a clean stop is 0); output:\n{process.log_tail()}"


@pytest.fixture
def blemu_factory(rootcanal):
    factory = BlemuFactory(rootcanal)
    yield factory
    factory.cleanup()


@pytest.fixture
def restartable_rootcanal():
    server = RestartableRootCanal("rc-restart")
    server.start()
    yield server
    server.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On failure, attach the output of the blemu processes the test used, and rootcanal's log."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    funcargs = getattr(item, "funcargs", {})
    processes: list[BlemuProcess] = []
    servers: list[RootCanal | RestartableRootCanal] = []
    # Every fixture value that is (or holds) a blemu process or a rootcanal, whatever its name.
    for value in funcargs.values():
        if isinstance(value, BlemuProcess):
            processes.append(value)
        elif isinstance(value, BlemuFactory):
            processes.extend(value.processes)
        elif isinstance(value, (RootCanal, RestartableRootCanal)):
            servers.append(value)
    for process in processes:
        report.sections.append((f"blemu {process.name or ' '.join(process.devices)} output ({process.log_path})", process.log_tail(80)))
    for server in servers:
        report.sections.append((f"rootcanal log ({server.log_path})", server.log_tail(30)))
