#ifndef BLEMU_FUZZ_DRIVER_H
#define BLEMU_FUZZ_DRIVER_H

#include <stddef.h>
#include <stdint.h>

/// Runs libFuzzer's driver (command line, corpus, mutations) on `test_one_input`.
///
/// SwiftPM links each executable target with `main` renamed to `<module>_main` (so that test
/// targets can link executables), which hides libFuzzer's own `main`. Each fuzz target
/// therefore defines `<module>_main` and calls this, which calls LLVMFuzzerRunDriver
/// (libFuzzer's documented entry point for programs that have their own main).
int blemu_fuzz_driver(int argc, char **argv, int (*test_one_input)(const uint8_t *data, size_t size));

/// The same for a target that keeps its stack between inputs (`PeripheralRig`): LeakSanitizer
/// off unless the command line turns it on. A live Swift object's weak-reference side table is
/// reachable only through the object's reference count bits, which LeakSanitizer cannot read,
/// so a heap scan while a kept stack is alive reports its side tables as leaks. Leaks are
/// checked with `BLEMU_FUZZ_FRESH=1` (a new stack per input, torn down after it), which the
/// regression replay and the smoke run of scripts/fuzz use.
int blemu_fuzz_driver_keeping_state(int argc, char **argv, int (*test_one_input)(const uint8_t *data, size_t size));

/// Bytes allocated and not yet freed, as AddressSanitizer's allocator counts them (the memory
/// oracle of the whole-stack targets), or, in the throughput build without it, as the driver's
/// wrappers of malloc and free count them (usable sizes).
size_t blemu_fuzz_allocated_bytes(void);

#endif
