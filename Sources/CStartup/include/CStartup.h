#pragma once

// Nothing to call: this target is a constructor that runs in the `blemu` executable before the
// Swift runtime and main (startup.c). Linked into `blemu` only, so the tests' processes and the
// other tools start as before.
