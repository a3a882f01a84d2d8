#include <stddef.h>
#include <stdint.h>

#include "CStartup.h"

// Sources/CLinux/shim.c, beside the release that follows start-up: the same userfaultfd, so the
// ranges registered here and there are one registration. (Declared here rather than in
// CLinux.h: no Swift code calls it.)
uint64_t clinux_single_page_faults_from_start(uint64_t *single_page_bytes);

/// Runs before the Swift runtime's initializers and main (priority 101: the first a program may
/// use; the runtime's C++ initializers have none, so they come after, and in the static board
/// build they are in this binary). From here on a fault in the code of the program or of its
/// libraries maps the one page it needs, and what the loader mapped around its relocations and
/// symbol lookups goes: without it the kernel maps 64 KiB around every fault (fault-around) and
/// start-up's few hundred scattered functions (the runtime reading type metadata, argument
/// parsing, the config, building the devices) reached a peak RSS (VmHWM) of 17.7 MB on the board
/// build where the steady state is 2.2 MB (Docs/PERFORMANCE.md, "The peak at start-up").
__attribute__((constructor(101))) static void blemu_single_page_faults_from_start(void) {
    (void)clinux_single_page_faults_from_start(NULL);
}
