"""A real Web Bluetooth app for the kernel tests: Debian's Chromium, headless, over BlueZ, in the guest.

    python3 web_bluetooth.py NAME

Run by Tests/kernel/run.py (case web-bluetooth-heart-rate) with the guest's python3 (standard
library only), inside the qemu guest where bluetoothd owns an adapter bridged to the host's
rootcanal, and blemu's heart-rate sensor, named NAME, advertises on the host. It serves
Tests/kernel/web_bluetooth.html on http://localhost:PORT (Web Bluetooth needs a secure
context; localhost is one), starts `chromium --headless=new` with the DevTools protocol on a
pipe (--remote-debugging-pipe: NUL-terminated JSON on file descriptors 3 and 4, no websocket),
opens the page, checks `navigator.bluetooth.getAvailability()`, and calls the page's `start()`
with a user gesture (Runtime.evaluate userGesture: true, as a click would): requestDevice with
the Heart Rate service as its filter. The chooser that opens is answered through the DevTools
DeviceAccess domain: each `deviceRequestPrompted` lists the devices found so far; once NAME is
among them, `selectPrompt` picks it. The page connects, reads Body Sensor Location and
subscribes to Heart Rate Measurement; every step is a console line that this prints. On SIGTERM
the page's `stop()` unsubscribes and disconnects, Chromium is closed, and it exits 0:

  app: chromium VERSION up in S s / page http://localhost:PORT/ loaded in S s / availability true
  app: chooser LIST (each time the list changes) / chose NAME in S s
  app: chosen NAME / connected / read 2a38 HEX / subscribed 2a37
  app: notification 2a37 HEX bpm=N
  app: disconnected

Any failure prints `app: error ...` and exits 1 (the page's own errors too). Chromium's output
goes to chromium.log in the working folder's TMPDIR (the agent's log folder in the guest).
"""

from __future__ import annotations

import http.server
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

PAGE = Path(__file__).resolve().with_name("web_bluetooth.html")
# Web Bluetooth is off on Linux unless the WebBluetooth feature is on (or all of
# --enable-experimental-web-platform-features): without either there is no navigator.bluetooth.
# --no-sandbox: the guest runs it as root.
CHROMIUM_FLAGS = ["--headless=new", "--no-sandbox", "--enable-features=WebBluetooth", "--remote-debugging-pipe",
                  "--no-first-run", "--disable-gpu"]
# Generous: Chromium under TCG on two shared cores.
START_TIMEOUT = 300.0
CALL_TIMEOUT = 300.0
CHOOSER_TIMEOUT = 90.0
NAVIGATION_TIMEOUT = 150.0


def say(text: str) -> None:
    print(f"app: {text}", flush=True)


class Failed(Exception):
    """The app failed: the message is its one-line reason."""


class PageServer(http.server.BaseHTTPRequestHandler):
    """Serves the page at / and nothing else."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path not in ("/", "/index.html"):
            self.send_error(404)
            return
        body = PAGE.read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_arguments: object) -> None:
        pass


class DevTools:
    """The DevTools protocol over Chromium's pipe (--remote-debugging-pipe): Chromium reads
    commands from its file descriptor 3 and writes answers and events to 4, each a JSON message
    ending in NUL."""

    def __init__(self, chromium: subprocess.Popen[bytes], commands: int, messages: int):
        self.chromium, self.commands, self.messages = chromium, commands, messages
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict] = []
        self.stopping = False  # SIGTERM came: the main loop stops the page
        self.closed = False

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> int:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self.commands, json.dumps(message).encode() + b"\0")
        return self.next_id

    def receive(self, timeout: float) -> dict | None:
        """The next message, or None when none came within `timeout`."""
        deadline = time.monotonic() + timeout
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.messages], [], [], left)
            if not ready:
                continue
            data = os.read(self.messages, 1 << 16)
            if not data:
                raise Failed(f"chromium closed its DevTools pipe (exit {self.chromium.poll()})")
            self.buffer += data
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = CALL_TIMEOUT) -> dict:
        """Send a command and wait for its answer; events that come meanwhile are kept."""
        ident = self.send(method, params, session)
        deadline = time.monotonic() + timeout
        while True:
            message = self.receive(max(0.0, deadline - time.monotonic()))
            if message is None:
                if time.monotonic() >= deadline:
                    raise Failed(f"no answer to {method} within {timeout:.0f} s")
                continue
            if message.get("id") == ident:
                if "error" in message:
                    raise Failed(f"{method}: {message['error'].get('message')}")
                return message.get("result", {})
            if "method" in message:
                self.events.append(message)

    def evaluate(self, session: str, expression: str, await_promise: bool = False, gesture: bool = False):
        result = self.call("Runtime.evaluate", {"expression": expression, "awaitPromise": await_promise,
                                                "userGesture": gesture, "returnByValue": True}, session)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise Failed(f"{expression}: {details.get('exception', {}).get('description') or details.get('text')}")
        return result.get("result", {}).get("value")


def start_chromium(profile: str, log_path: str) -> tuple[subprocess.Popen[bytes], DevTools]:
    chromium = shutil.which("chromium")
    if chromium is None:
        raise Failed("chromium is missing (scripts/setup --tests: apt-get install chromium)")
    commands_read, commands_write = os.pipe()
    messages_read, messages_write = os.pipe()

    def descriptors() -> None:  # in the child: the pipe's ends as Chromium's 3 and 4
        os.dup2(commands_read, 3)
        os.dup2(messages_write, 4)

    with open(log_path, "wb") as log:
        process = subprocess.Popen([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   pass_fds=(3, 4), preexec_fn=descriptors)
    os.close(commands_read)
    os.close(messages_write)
    return process, DevTools(process, commands_write, messages_read)


def page_session(devtools: DevTools) -> str:
    """Attach to the page Chromium opened (about:blank): a flat session for the page's commands."""
    targets = devtools.call("Target.getTargets", timeout=START_TIMEOUT)["targetInfos"]
    pages = [target for target in targets if target.get("type") == "page"]
    if not pages:
        raise Failed(f"chromium opened no page: {[target.get('type') for target in targets]}")
    return devtools.call("Target.attachToTarget", {"targetId": pages[0]["targetId"], "flatten": True})["sessionId"]


def load_page(devtools: DevTools, session: str, url: str) -> None:
    """Navigate to the page and wait until its script is there; once more if it is not within
    NAVIGATION_TIMEOUT (a navigation can be lost when a service of Chromium's restarts)."""
    loaded = f"location.href === {json.dumps(url)} && document.readyState === 'complete' && typeof start === 'function'"
    for attempt in range(2):
        answer = devtools.call("Page.navigate", {"url": url}, session)
        if answer.get("errorText"):
            say(f"navigation failed: {answer['errorText']}")
        deadline = time.monotonic() + NAVIGATION_TIMEOUT
        while time.monotonic() < deadline:
            if devtools.evaluate(session, loaded) is True:
                return
            time.sleep(0.5)
        say(f"the page did not load within {NAVIGATION_TIMEOUT:.0f} s" + (": navigating again" if attempt == 0 else ""))
    raise Failed(f"the page at {url} did not load")


def console_text(event: dict) -> str | None:
    """A `web: ...` console line of the page, without its prefix."""
    arguments = event["params"].get("args", [])
    if arguments and isinstance(arguments[0].get("value"), str) and arguments[0]["value"].startswith("web: "):
        return arguments[0]["value"].removeprefix("web: ")
    return None


def chromium_log_path() -> str:
    return os.path.join(os.environ.get("TMPDIR", "/tmp"), "chromium.log")


def show_chromium_log(lines: int = 20) -> None:
    """The end of Chromium's own output, for a failure's log (without the session bus's
    complaints: there is no session bus in the guest, and Chromium needs none)."""
    try:
        with open(chromium_log_path(), errors="replace") as log:
            kept = [line.rstrip() for line in log if "Failed to connect to the bus" not in line
                    and "NameHasOwner" not in line][-lines:]
    except OSError:
        return
    for line in kept:
        print(f"chromium: {line}", flush=True)


def run(name: str) -> int:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), PageServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://localhost:{server.server_address[1]}/"
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    started = time.monotonic()
    chromium, devtools = start_chromium(profile, chromium_log_path())
    signal.signal(signal.SIGTERM, lambda *_: setattr(devtools, "stopping", True))
    try:
        version = devtools.call("Browser.getVersion", timeout=START_TIMEOUT)["product"]
        say(f"chromium {version} up in {time.monotonic() - started:.1f} s")
        session = page_session(devtools)
        for domain in ("Runtime.enable", "DeviceAccess.enable"):
            devtools.call(domain, session=session)
        load_page(devtools, session, url)
        if devtools.evaluate(session, "isSecureContext && 'bluetooth' in navigator") is not True:
            raise Failed(f"no navigator.bluetooth at {url} (a secure context: {devtools.evaluate(session, 'isSecureContext')})")
        say(f"page {url} loaded in {time.monotonic() - started:.1f} s")
        available = devtools.evaluate(session, "navigator.bluetooth.getAvailability()", await_promise=True)
        say(f"availability {str(available).lower()}")
        if available is not True:
            raise Failed("navigator.bluetooth.getAvailability() is not true: Chromium sees no adapter over BlueZ")
        devtools.evaluate(session, "start(); true", gesture=True)
        chose = False
        shown: list[str] = []
        chooser_deadline = time.monotonic() + CHOOSER_TIMEOUT
        while not devtools.stopping:
            while devtools.events:
                event = devtools.events.pop(0)
                method = event.get("method")
                if method == "DeviceAccess.deviceRequestPrompted" and not chose:
                    devices = event["params"].get("devices", [])
                    names = [device.get("name", "") for device in devices]
                    if names != shown:
                        shown = names
                        say(f"chooser {', '.join(repr(n) for n in names) or '(empty)'}")
                    wanted = [device for device in devices if device.get("name") == name]
                    if wanted:
                        devtools.send("DeviceAccess.selectPrompt",
                                      {"id": event["params"]["id"], "deviceId": wanted[0]["id"]}, session)
                        chose = True
                        say(f"chose {name} in {time.monotonic() - started:.1f} s")
                elif method == "Runtime.consoleAPICalled":
                    text = console_text(event)
                    if text is not None:
                        say(text)
                        if text.startswith("error"):
                            return 1
                elif method == "Runtime.exceptionThrown":
                    details = event["params"].get("exceptionDetails", {})
                    raise Failed(f"the page threw {details.get('exception', {}).get('description') or details.get('text')}")
            if not chose and time.monotonic() > chooser_deadline:
                raise Failed(f"no device named {name!r} in the chooser within {CHOOSER_TIMEOUT:.0f} s "
                             f"(it listed {shown or 'nothing'})")
            message = devtools.receive(0.5)
            if message is not None and "method" in message:
                devtools.events.append(message)
        devtools.stopping = False  # SIGTERM: the page stops, as a closed tab would
        devtools.evaluate(session, "stop()", await_promise=True)
        for event in devtools.events:
            text = console_text(event) if event.get("method") == "Runtime.consoleAPICalled" else None
            if text is not None:
                say(text)
        devtools.call("Browser.close")
        devtools.closed = True
        return 0
    finally:
        server.shutdown()
        if chromium.poll() is None and not devtools.closed:  # a failure: end it here
            chromium.terminate()
        try:
            chromium.wait(20)
        except subprocess.TimeoutExpired:
            chromium.kill()
            chromium.wait(5)
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: web_bluetooth.py NAME")
    try:
        sys.exit(run(sys.argv[1]))
    except Failed as failure:
        say(f"error: {failure}")
        show_chromium_log()
        sys.exit(1)
    except Exception as error:  # one line the driver shows
        say(f"error: {error!r}")
        sys.exit(1)
