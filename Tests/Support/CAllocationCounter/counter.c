// glibc lets a program replace malloc and friends by defining them ("Replacing malloc" in the
// glibc manual); these count, then forward to glibc's own allocator (its __libc_* entry points),
// so free() stays glibc's and nothing else changes.
//
// What counts is an allocation the Swift runtime makes (its `swift_` entry points:
// swift_slowAlloc, under swift_allocObject and swift_allocBox): class instances, array, string
// and dictionary storage, boxes, closure contexts. A debug build also mallocs the frames of the
// standard library's unspecialised accessor coroutines (mangled `$s...` callers), which an
// optimised build does not have; those are left out, so the debug test build checks what a
// release build allocates.
#define _GNU_SOURCE
#include "CAllocationCounter.h"
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *pointer, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);

static __thread int counting;
static __thread int looking;
static __thread long allocations;

static void note_allocation(void *caller) {
    if (!counting || looking) return;
    looking = 1;
    Dl_info info;
    if (dladdr(caller, &info) && info.dli_sname && strncmp(info.dli_sname, "swift_", 6) == 0) allocations++;
    looking = 0;
}

// Swift Testing hooks the runtime's "will throw" entry points to capture a backtrace of every
// error thrown (an allocation the stack does not make): the hooks are off while counting.
static void *saved_will_throw, *saved_will_throw_typed;

static void **runtime_hook(const char *name) { return (void **)dlsym(RTLD_DEFAULT, name); }

void blemu_allocation_counting_start(void) {
    void **hook = runtime_hook("_swift_willThrow");
    if (hook) saved_will_throw = __atomic_exchange_n(hook, NULL, __ATOMIC_SEQ_CST);
    hook = runtime_hook("_swift_willThrowTypedImpl");
    if (hook) saved_will_throw_typed = __atomic_exchange_n(hook, NULL, __ATOMIC_SEQ_CST);
    allocations = 0;
    counting = 1;
}

long blemu_allocation_counting_stop(void) {
    counting = 0;
    void **hook = runtime_hook("_swift_willThrow");
    if (hook) __atomic_store_n(hook, saved_will_throw, __ATOMIC_SEQ_CST);
    hook = runtime_hook("_swift_willThrowTypedImpl");
    if (hook) __atomic_store_n(hook, saved_will_throw_typed, __ATOMIC_SEQ_CST);
    return allocations;
}

void *malloc(size_t size) {
    note_allocation(__builtin_return_address(0));
    return __libc_malloc(size);
}

void *calloc(size_t count, size_t size) {
    note_allocation(__builtin_return_address(0));
    return __libc_calloc(count, size);
}

void *realloc(void *pointer, size_t size) {
    note_allocation(__builtin_return_address(0));
    return __libc_realloc(pointer, size);
}

void *memalign(size_t alignment, size_t size) {
    note_allocation(__builtin_return_address(0));
    return __libc_memalign(alignment, size);
}

void *aligned_alloc(size_t alignment, size_t size) {
    note_allocation(__builtin_return_address(0));
    return __libc_memalign(alignment, size);
}

int posix_memalign(void **out, size_t alignment, size_t size) {
    // POSIX: a power of two that is a multiple of sizeof(void *), else EINVAL.
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment % sizeof(void *) != 0) return EINVAL;
    note_allocation(__builtin_return_address(0));
    void *pointer = __libc_memalign(alignment, size);
    if (pointer == NULL) return ENOMEM;
    *out = pointer;
    return 0;
}
