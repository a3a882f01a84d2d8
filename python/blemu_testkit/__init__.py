"""blemu's Python test kit: start blemu and rootcanal for a test, drive the emulated devices
over the control socket, and wait for what the app under test did (Docs/TESTING-APPS.md)."""

from .control import Control, Event, EventIterator, EventLog, normalize_hex, normalize_uuid
from .errors import BlemuError, CommandError, EventTimeout, UnexpectedEvent
from .process import Blemu, blemu_executable
from .rootcanal import RootCanal

__all__ = [
    "Blemu", "BlemuError", "CommandError", "Control", "Event", "EventIterator", "EventLog", "EventTimeout",
    "RootCanal", "UnexpectedEvent", "blemu_executable", "normalize_hex", "normalize_uuid",
]
