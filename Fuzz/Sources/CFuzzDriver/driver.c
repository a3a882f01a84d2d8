#include "CFuzzDriver.h"
#include <stdlib.h>

extern int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*user_callback)(const uint8_t *data, size_t size));
// AddressSanitizer's allocator statistics (sanitizer/allocator_interface.h).
extern size_t __sanitizer_get_current_allocated_bytes(void);

int blemu_fuzz_driver(int argc, char **argv, int (*test_one_input)(const uint8_t *data, size_t size)) {
    return LLVMFuzzerRunDriver(&argc, &argv, test_one_input);
}

static int leak_check_at_exit_off = 0;

// LeakSanitizer asks this before its check at exit (sanitizer/lsan_interface.h).
int __lsan_is_turned_off(void) { return leak_check_at_exit_off; }

int blemu_fuzz_driver_keeping_state(int argc, char **argv, int (*test_one_input)(const uint8_t *data, size_t size)) {
    leak_check_at_exit_off = 1;
    // -detect_leaks=0 first, so a -detect_leaks on the command line still wins (the last one counts).
    char **with = calloc((size_t)argc + 2, sizeof(char *));
    if (!with) return LLVMFuzzerRunDriver(&argc, &argv, test_one_input);
    with[0] = argc > 0 ? argv[0] : "fuzz";
    with[1] = "-detect_leaks=0";
    for (int i = 1; i < argc; i++) with[i + 1] = argv[i];
    int count = argc > 0 ? argc + 1 : 2;
    return LLVMFuzzerRunDriver(&count, &with, test_one_input);
}

size_t blemu_fuzz_allocated_bytes(void) {
    return __sanitizer_get_current_allocated_bytes();
}
