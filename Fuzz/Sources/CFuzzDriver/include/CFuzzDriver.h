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

#endif
