"""Fixtures for blemu's interop tests: a rootcanal radio, blemu processes, Bumble centrals.

- `rootcanal` (module): one rootcanal; every TCP connection to its HCI port is a new
  controller on the same simulated radio.
- `blemu` (module): one `blemu run heart-rate` on that radio, already advertising; its
  teardown sends SIGTERM and asserts exit status 0 (a clean stop).
- `blemu_factory` (function): start more blemu processes (restart, clean-stop tests).
Helpers for the tests themselves (run, unique_name, BlemuProcess) live in harness.py.

Environment:
  BLEMU_BIN       the blemu executable (default .build/debug/blemu, else .build/release/blemu)
  BLEMU_LOG_ARGS  logging options passed to blemu (default "--log stderr --log-level debug")
  BLEMU_TEST_LOG_DIR  where process output goes (default: a new /tmp/blemu-interop-* folder)
"""

from __future__ import annotations

import pytest

from harness import BlemuFactory, BlemuProcess, RootCanal, log_dir, unique_name


@pytest.fixture(scope="module")
def rootcanal():
    server = RootCanal(log_path=log_dir() / f"rootcanal-{unique_name('rc')}.log")
    try:
        server.start()
    except RuntimeError as error:
        pytest.fail(str(error), pytrace=False)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def blemu(rootcanal):
    """One heart-rate blemu for the module, advertising when the first test gets it."""
    process = BlemuProcess(rootcanal.controller_spec, unique_name())
    process.start()
    try:
        process.wait_advertising(rootcanal)
    except BaseException:
        process.kill()
        raise
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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On failure, attach the output of the blemu processes the test used, and rootcanal's log."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    funcargs = getattr(item, "funcargs", {})
    processes: list[BlemuProcess] = []
    if isinstance(funcargs.get("blemu"), BlemuProcess):
        processes.append(funcargs["blemu"])
    if isinstance(funcargs.get("blemu_factory"), BlemuFactory):
        processes.extend(funcargs["blemu_factory"].processes)
    for process in processes:
        report.sections.append((f"blemu {process.name} output ({process.log_path})", process.log_tail(80)))
    server = funcargs.get("rootcanal")
    if isinstance(server, RootCanal):
        report.sections.append((f"rootcanal log ({server.log_path})", server.log_tail(30)))
