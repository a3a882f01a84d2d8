#pragma once
// C shims for what Glibc's Swift module lacks: epoll, timerfd, signalfd, and the termios
// setup a UART needs. The header includes only <stdint.h>: every system header stays in
// shim.c, so no type here collides with one the Glibc module also declares. Every function
// returns -1 and leaves errno set on failure, like the calls it wraps.

#include <stdint.h>

// MARK: epoll

/// epoll event bits (sys/epoll.h), as constants Swift can import.
extern const uint32_t CLINUX_EPOLLIN;
extern const uint32_t CLINUX_EPOLLOUT;
extern const uint32_t CLINUX_EPOLLERR;
extern const uint32_t CLINUX_EPOLLHUP;
extern const uint32_t CLINUX_EPOLLRDHUP;

/// One ready descriptor: the token given at registration and the events that fired.
typedef struct clinux_epoll_event {
    uint64_t token;
    uint32_t events;
} clinux_epoll_event;

/// The most events one clinux_epoll_wait call returns.
#define CLINUX_EPOLL_MAX_EVENTS 64

/// epoll_create1(EPOLL_CLOEXEC).
int clinux_epoll_create(void);
/// epoll_ctl(EPOLL_CTL_ADD / MOD / DEL) with `token` stored in epoll_data.u64.
int clinux_epoll_add(int epfd, int fd, uint32_t events, uint64_t token);
int clinux_epoll_modify(int epfd, int fd, uint32_t events, uint64_t token);
int clinux_epoll_remove(int epfd, int fd);
/// epoll_wait into `out` (at most min(max, CLINUX_EPOLL_MAX_EVENTS) entries); timeout_ms -1 blocks.
int clinux_epoll_wait(int epfd, clinux_epoll_event *out, int max, int timeout_ms);

// MARK: clocks and timerfd

/// clock_gettime(CLOCK_MONOTONIC) in nanoseconds.
uint64_t clinux_monotonic_ns(void);
/// timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC).
int clinux_timerfd_create(void);
/// Arms the timer to fire once at the absolute CLOCK_MONOTONIC time `deadline_ns`
/// (a deadline in the past fires at once); 0 disarms it.
int clinux_timerfd_arm(int fd, uint64_t deadline_ns);
/// Reads and discards the expiration count: 1 if it had expired, 0 if not (EAGAIN), -1 on error.
int clinux_timerfd_drain(int fd);

// MARK: signals

/// Blocks `signals` in this thread (pthread_sigmask SIG_BLOCK) so that only a signalfd sees them.
int clinux_block_signals(const int *signals, int count);
/// signalfd(fd, mask of `signals`, SFD_NONBLOCK | SFD_CLOEXEC): fd -1 creates one, otherwise
/// the existing one's mask is replaced.
int clinux_signalfd(int fd, const int *signals, int count);
/// Reads one signalfd_siginfo: the signal number, 0 when none is pending, -1 on error.
int clinux_signalfd_read(int fd);

// MARK: termios

/// The termios speed_t for a baud rate in bits per second, or 0 (B0) when termios has none.
uint32_t clinux_baud_constant(int baud);
/// Raw 8N1 with RTS/CTS flow control at `baud` (cfmakeraw, CRTSCTS, CLOCAL | CREAD, cfsetspeed),
/// applied at once, pending bytes flushed. EINVAL for a baud termios has no constant for,
/// ENOTTY when `fd` is not a terminal.
int clinux_serial_configure(int fd, int baud);
/// The terminal's size (TIOCGWINSZ): 0 with columns and rows set, -1 when `fd` is no terminal.
int clinux_terminal_size(int fd, int *columns, int *rows);

// MARK: sockets

/// socket type arguments with SOCK_NONBLOCK | SOCK_CLOEXEC already or-ed in.
extern const int CLINUX_SOCK_STREAM_NONBLOCK;
extern const int CLINUX_SOCK_RAW_NONBLOCK;
/// MSG_NOSIGNAL: a write to a closed peer returns EPIPE instead of killing the process.
extern const int CLINUX_MSG_NOSIGNAL;

// MARK: heap

/// Bytes of heap in use (glibc's mallinfo2: chunks allocated in the arenas and mmapped), for
/// the footprint figures of blemu-perf-gate's `scale` mode: Glibc's Swift module lacks malloc.h.
uint64_t clinux_heap_in_use(void);
/// After start-up: the code and read-only pages of the program and its libraries are unmapped
/// (MADV_DONTNEED; the program's data segment MADV_PAGEOUT), so only what runs later comes back,
/// a single page per fault where the kernel allows (`single_page_bytes`: a userfaultfd turns
/// fault-around off, Linux 6.7+). Returns the bytes advised.
uint64_t clinux_release_startup_code(uint64_t *single_page_bytes);
