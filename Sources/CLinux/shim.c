#define _GNU_SOURCE
#include "CLinux.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

const uint32_t CLINUX_EPOLLIN = EPOLLIN;
const uint32_t CLINUX_EPOLLOUT = EPOLLOUT;
const uint32_t CLINUX_EPOLLERR = EPOLLERR;
const uint32_t CLINUX_EPOLLHUP = EPOLLHUP;
const uint32_t CLINUX_EPOLLRDHUP = EPOLLRDHUP;

const int CLINUX_SOCK_STREAM_NONBLOCK = SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC;
const int CLINUX_SOCK_RAW_NONBLOCK = SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC;
const int CLINUX_MSG_NOSIGNAL = MSG_NOSIGNAL;

int clinux_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }

static int epoll_control(int epfd, int op, int fd, uint32_t events, uint64_t token) {
    struct epoll_event event;
    memset(&event, 0, sizeof event);
    event.events = events;
    event.data.u64 = token;
    return epoll_ctl(epfd, op, fd, &event);
}

int clinux_epoll_add(int epfd, int fd, uint32_t events, uint64_t token) {
    return epoll_control(epfd, EPOLL_CTL_ADD, fd, events, token);
}

int clinux_epoll_modify(int epfd, int fd, uint32_t events, uint64_t token) {
    return epoll_control(epfd, EPOLL_CTL_MOD, fd, events, token);
}

int clinux_epoll_remove(int epfd, int fd) {
    // A non-null event pointer keeps pre-2.6.9 kernels happy; harmless on new ones.
    struct epoll_event unused;
    memset(&unused, 0, sizeof unused);
    return epoll_ctl(epfd, EPOLL_CTL_DEL, fd, &unused);
}

int clinux_epoll_wait(int epfd, clinux_epoll_event *out, int max, int timeout_ms) {
    struct epoll_event events[CLINUX_EPOLL_MAX_EVENTS];
    if (max > CLINUX_EPOLL_MAX_EVENTS) max = CLINUX_EPOLL_MAX_EVENTS;
    if (max <= 0) { errno = EINVAL; return -1; }
    int n = epoll_wait(epfd, events, max, timeout_ms);
    for (int i = 0; i < n; i++) {
        out[i].token = events[i].data.u64;
        out[i].events = events[i].events;
    }
    return n;
}

uint64_t clinux_monotonic_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
}

int clinux_timerfd_create(void) { return timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC); }

int clinux_timerfd_arm(int fd, uint64_t deadline_ns) {
    struct itimerspec spec;
    memset(&spec, 0, sizeof spec);
    // it_value all zero disarms; any other absolute value arms (the past fires at once).
    spec.it_value.tv_sec = (time_t)(deadline_ns / 1000000000ull);
    spec.it_value.tv_nsec = (long)(deadline_ns % 1000000000ull);
    return timerfd_settime(fd, deadline_ns == 0 ? 0 : TFD_TIMER_ABSTIME, &spec, NULL);
}

int clinux_timerfd_drain(int fd) {
    uint64_t expirations = 0;
    ssize_t n = read(fd, &expirations, sizeof expirations);
    if (n == (ssize_t)sizeof expirations) return 1;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (n >= 0) errno = EIO;
    return -1;
}

static int fill_mask(sigset_t *mask, const int *signals, int count) {
    sigemptyset(mask);
    for (int i = 0; i < count; i++) {
        if (sigaddset(mask, signals[i]) != 0) return -1;
    }
    return 0;
}

int clinux_block_signals(const int *signals, int count) {
    sigset_t mask;
    if (fill_mask(&mask, signals, count) != 0) return -1;
    int error = pthread_sigmask(SIG_BLOCK, &mask, NULL);
    if (error != 0) { errno = error; return -1; }
    return 0;
}

int clinux_signalfd(int fd, const int *signals, int count) {
    sigset_t mask;
    if (fill_mask(&mask, signals, count) != 0) return -1;
    return signalfd(fd, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
}

int clinux_signalfd_read(int fd) {
    struct signalfd_siginfo info;
    ssize_t n = read(fd, &info, sizeof info);
    if (n == (ssize_t)sizeof info) return (int)info.ssi_signo;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (n >= 0) errno = EIO;
    return -1;
}

uint32_t clinux_baud_constant(int baud) {
    switch (baud) {
    case 1200: return B1200;
    case 2400: return B2400;
    case 4800: return B4800;
    case 9600: return B9600;
    case 19200: return B19200;
    case 38400: return B38400;
    case 57600: return B57600;
    case 115200: return B115200;
    case 230400: return B230400;
    case 460800: return B460800;
    case 500000: return B500000;
    case 576000: return B576000;
    case 921600: return B921600;
    case 1000000: return B1000000;
    case 1152000: return B1152000;
    case 1500000: return B1500000;
    case 2000000: return B2000000;
    case 2500000: return B2500000;
    case 3000000: return B3000000;
    case 3500000: return B3500000;
    case 4000000: return B4000000;
    default: return B0;
    }
}

int clinux_serial_configure(int fd, int baud) {
    speed_t speed = clinux_baud_constant(baud);
    if (speed == B0) { errno = EINVAL; return -1; }
    struct termios tio;
    if (tcgetattr(fd, &tio) != 0) return -1;
    cfmakeraw(&tio);                      // 8 data bits, no parity, no echo, no line editing
    tio.c_cflag &= ~(tcflag_t)CSTOPB;     // one stop bit
    tio.c_cflag |= CRTSCTS | CLOCAL | CREAD;  // "Flow control: RTS/CTS" (Vol 4, Part A, 3)
    tio.c_cc[VMIN] = 1;
    tio.c_cc[VTIME] = 0;
    if (cfsetspeed(&tio, speed) != 0) return -1;
    if (tcsetattr(fd, TCSANOW, &tio) != 0) return -1;
    tcflush(fd, TCIOFLUSH);               // drop whatever a previous user left in the buffers
    return 0;
}

#include <malloc.h>

uint64_t clinux_heap_in_use(void) {
    struct mallinfo2 info = mallinfo2();
    return info.uordblks + info.hblkhd;
}

#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>

#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
#ifndef UFFD_FEATURE_WP_ASYNC
#define UFFD_FEATURE_WP_ASYNC (1 << 15)
#endif

/// A userfaultfd whose only use is to switch fault-around off on the ranges registered with it
/// (Linux 6.7+): the kernel maps no neighbours on a fault in a range registered for write
/// protection. Asynchronous write protection (resolved by the kernel, never reported) on code
/// that is never written changes nothing else. Kept open for the process's life: closing it
/// would unregister the ranges. -1 where the kernel has no such feature: nothing lost.
static int fault_around_off_fd = -2;

static int fault_around_off(void) {
    if (fault_around_off_fd != -2) return fault_around_off_fd;
    fault_around_off_fd = -1;
    // UFFD_USER_MODE_ONLY: allowed without privilege whatever vm.unprivileged_userfaultfd says.
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
    if (fd < 0) return -1;
    struct uffdio_api api = {.api = UFFD_API, .features = UFFD_FEATURE_WP_ASYNC};
    if (ioctl(fd, UFFDIO_API, &api) != 0) {
        close(fd);
        return -1;
    }
    fault_around_off_fd = fd;
    return fd;
}

static int register_single_page_faults(uintptr_t start, uintptr_t end) {
    int fd = fault_around_off();
    if (fd < 0) return 0;
    struct uffdio_register range = {.range = {.start = start, .len = end - start}, .mode = UFFDIO_REGISTER_MODE_WP};
    return ioctl(fd, UFFDIO_REGISTER, &range) == 0;
}

/// True when an object's code was written at load (DT_TEXTREL): its "read-only" pages are then
/// private copies, and dropping them would lose the relocations.
static int has_text_relocations(const struct dl_phdr_info *info) {
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *segment = &info->dlpi_phdr[i];
        if (segment->p_type != PT_DYNAMIC) continue;
        for (const ElfW(Dyn) *entry = (const ElfW(Dyn) *)(info->dlpi_addr + segment->p_vaddr);
             entry->d_tag != DT_NULL; entry++) {
            if (entry->d_tag == DT_TEXTREL) return 1;
            if (entry->d_tag == DT_FLAGS && (entry->d_un.d_val & DF_TEXTREL)) return 1;
        }
    }
    return 0;
}

struct release_totals {
    uint64_t advised;
    uint64_t single_page;
    int is_program; // the first object dl_iterate_phdr reports is the program itself
    int at_start;   // before main: nothing is paged out of the data segment the relocations just wrote
};

static int release_object_pages(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct release_totals *totals = data;
    int is_program = totals->is_program;
    totals->is_program = 0;
    // The vDSO is the kernel's, not a file: nothing to give back.
    if (!is_program && (info->dlpi_name == NULL || info->dlpi_name[0] == '\0' || strstr(info->dlpi_name, "vdso") != NULL))
        return 0;
    int text_written = has_text_relocations(info);
    long page = sysconf(_SC_PAGESIZE);
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *segment = &info->dlpi_phdr[i];
        if (segment->p_type != PT_LOAD) continue;
        uintptr_t start = (info->dlpi_addr + segment->p_vaddr) & ~(uintptr_t)(page - 1);
        uintptr_t end = (info->dlpi_addr + segment->p_vaddr + segment->p_memsz + page - 1) & ~(uintptr_t)(page - 1);
        if (!(segment->p_flags & PF_W)) {
            if (text_written) continue;
            // Code and read-only data: clean file pages, never written. MADV_DONTNEED unmaps them
            // from this process only (a shared library's pages stay for the processes that use
            // them); the next use maps the page again from the page cache or the file.
            if (madvise((void *)start, end - start, MADV_DONTNEED) == 0) totals->advised += end - start;
            // Then each fault maps the one page it needs. Without this the kernel maps up to
            // 64 KiB of cached neighbours around every fault (fault-around), and the page cache
            // holds all of the code: Linux reads ahead around a fault in executable pages whatever
            // MADV_RANDOM says (6.16+), up to the disk's read_ahead_kb.
            if (register_single_page_faults(start, end)) totals->single_page += end - start;
        } else if (is_program && totals->at_start) {
            // The data segment at start: the relocations just wrote part of it (anonymous pages
            // now); the rest is type metadata and tables start-up reads, each read fault mapping
            // 64 KiB of neighbours. Registered, a fault maps its page alone; nothing here is
            // write-protected, so writes go on as before.
            if (register_single_page_faults(start, end)) totals->single_page += end - start;
        } else if (is_program) {
            // The data segment: most of a Swift program's is type metadata read at start and never
            // written (clean file pages, dropped); a page written is anonymous memory and stays,
            // unless the board has swap. MADV_PAGEOUT (Linux 5.4) never loses a written page; older
            // kernels refuse it: nothing lost.
            if (madvise((void *)start, end - start, MADV_RANDOM) == 0 &&
                madvise((void *)start, end - start, MADV_PAGEOUT) == 0)
                totals->advised += end - start;
        }
    }
    return 0;
}

/// At the very start (Sources/CStartup's constructor, before the Swift runtime and main run): the
/// code and read-only pages the loader mapped are unmapped and, from then on, each fault maps the
/// single page it needs (Linux 6.7+), so start-up's peak RSS (VmHWM) is the pages start-up runs
/// rather than 64 KiB of neighbours around each; in the program's data segment too, which is
/// not paged out (the relocations just wrote it). Returns the bytes advised.
uint64_t clinux_single_page_faults_from_start(uint64_t *single_page_bytes);
uint64_t clinux_single_page_faults_from_start(uint64_t *single_page_bytes) {
    struct release_totals totals = {0, 0, 1, 1};
    dl_iterate_phdr(release_object_pages, &totals);
    if (single_page_bytes != NULL) *single_page_bytes = totals.single_page;
    return totals.advised;
}

uint64_t clinux_release_startup_code(uint64_t *single_page_bytes) {
    struct release_totals totals = {0, 0, 1, 0};
    dl_iterate_phdr(release_object_pages, &totals);
    // With nothing of the program's file mapped, the page cache can drop all of it (read-around
    // at start, or the whole file just after it was copied in): later faults then read the single
    // page they need, and fault-around finds no neighbours to map. Pages another process maps (a
    // second blemu) stay.
    int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
    if (single_page_bytes != NULL) *single_page_bytes = totals.single_page;
    return totals.advised;
}

int clinux_terminal_size(int fd, int *columns, int *rows) {
    struct winsize size;
    if (ioctl(fd, TIOCGWINSZ, &size) != 0 || size.ws_col == 0) return -1;
    *columns = size.ws_col;
    *rows = size.ws_row;
    return 0;
}
