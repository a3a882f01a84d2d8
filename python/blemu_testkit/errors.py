"""The kit's exceptions: each says what was asked and what happened instead."""

from __future__ import annotations

from typing import Any


class BlemuError(Exception):
    """Something about blemu or rootcanal went wrong (start, stop, the control socket)."""


class CommandError(BlemuError):
    """blemu refused a control command (`"ok": false`); `error` is its one-line reason, `code`
    the stable word a programmable host's refusal carries (`busy`, `unknown-link`, ...) or None."""

    def __init__(self, request: dict[str, Any], error: str, code: str | None = None):
        self.request = request
        self.error = error
        self.code = code
        fields = " ".join(f"{k}={v!r}" for k, v in request.items() if k not in ("id", "cmd"))
        super().__init__(f"blemu refused {request.get('cmd')} {fields}: {error}")


class EventTimeout(BlemuError, AssertionError):
    """No event matched within the timeout; the message lists the events seen meanwhile."""


class UnexpectedEvent(BlemuError, AssertionError):
    """The awaited kind of event came, but not as expected (e.g. another value written)."""
