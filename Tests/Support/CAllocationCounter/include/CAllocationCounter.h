#ifndef BLEMU_ALLOCATION_COUNTER_H
#define BLEMU_ALLOCATION_COUNTER_H

/// Heap allocations made on the calling thread while counting is on (malloc, calloc, realloc
/// and the aligned allocators, which this target interposes for the whole test binary and
/// forwards to glibc). Per thread, so tests running in parallel on other threads do not count.
void blemu_allocation_counting_start(void);
/// Stops counting and returns the allocations since `blemu_allocation_counting_start`.
long blemu_allocation_counting_stop(void);

#endif
