// The programmable host (issue 36): both roles on one controller, driven by requests over the
// control socket (Docs/CONTROL.md, "The programmable host"). The types come in the next commits.
import BlemuCore
