#include "CFuzzDriver.h"
#include <stdlib.h>
#include <malloc.h>
#include <errno.h>
#include <stdio.h>

extern int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*user_callback)(const uint8_t *data, size_t size));
// AddressSanitizer's allocator statistics (sanitizer/allocator_interface.h). Weak: the throughput
// build (no AddressSanitizer, scripts/fuzz) has no such runtime and counts by itself below.
extern size_t __sanitizer_get_current_allocated_bytes(void) __attribute__((weak));

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

#ifdef BLEMU_FUZZ_COUNT_MALLOC
// The throughput build (BLEMU_FUZZ_THROUGHPUT=1, Fuzz/Package.swift) has no AddressSanitizer,
// whose allocator counts what is held; glibc's mallinfo2 walks every free list (milliseconds per
// call on a fuzzer's heap), so the process's malloc family is wrapped here and counts the usable
// size of every block it hands out. Only in that build: AddressSanitizer's interceptors are weak
// and these definitions would replace them.
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);
extern void __libc_free(void *);

// Signed: a block glibc handed out before these wrappers saw it would count below zero when freed.
static long counted_bytes = 0;

static inline void *counted(void *block) {
    if (block) __atomic_fetch_add(&counted_bytes, malloc_usable_size(block), __ATOMIC_RELAXED);
    return block;
}

static inline void uncount(void *block) {
    if (block) __atomic_fetch_sub(&counted_bytes, malloc_usable_size(block), __ATOMIC_RELAXED);
}

void *malloc(size_t size) { return counted(__libc_malloc(size)); }
void *calloc(size_t count, size_t size) { return counted(__libc_calloc(count, size)); }
void free(void *block) { uncount(block); __libc_free(block); }
void *realloc(void *block, size_t size) {
    size_t before = block ? malloc_usable_size(block) : 0;
    void *moved = __libc_realloc(block, size);
    if (moved || size == 0) {
        __atomic_fetch_sub(&counted_bytes, before, __ATOMIC_RELAXED);
        counted(moved);
    }
    return moved;
}
void *reallocarray(void *block, size_t count, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(count, size, &total)) { errno = ENOMEM; return NULL; }
    return realloc(block, total);
}
void *valloc(size_t size) { return counted(__libc_valloc(size)); }
void *pvalloc(size_t size) { return counted(__libc_pvalloc(size)); }
void *memalign(size_t alignment, size_t size) { return counted(__libc_memalign(alignment, size)); }
void *aligned_alloc(size_t alignment, size_t size) { return counted(__libc_memalign(alignment, size)); }
int posix_memalign(void **out, size_t alignment, size_t size) {
    if (alignment < sizeof(void *) || (alignment & (alignment - 1)) != 0) return EINVAL;
    void *block = counted(__libc_memalign(alignment, size));
    if (!block) return ENOMEM;
    *out = block;
    return 0;
}
#endif

size_t blemu_fuzz_allocated_bytes(void) {
    if (__sanitizer_get_current_allocated_bytes) return __sanitizer_get_current_allocated_bytes();
#ifdef BLEMU_FUZZ_COUNT_MALLOC
    long held = __atomic_load_n(&counted_bytes, __ATOMIC_RELAXED);
    return held > 0 ? (size_t)held : 0;
#else
    // Neither AddressSanitizer nor the counting wrappers: the memory oracle would see nothing.
    fputs("blemu fuzz: no allocation count (build with -sanitize=address, or BLEMU_FUZZ_THROUGHPUT=1)\n", stderr);
    abort();
#endif
}
