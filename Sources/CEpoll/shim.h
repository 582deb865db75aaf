#ifndef PEERLINK_CEPOLL_SHIM_H
#define PEERLINK_CEPOLL_SHIM_H
// epoll, which Swift's Glibc module does not export. `struct epoll_event` is packed on
// x86_64, so Swift never touches it: these wrappers take and give plain integers.
#include <errno.h>
#include <stdint.h>
#include <sys/epoll.h>

static inline int peerlink_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }

/// op: 0 add, 1 modify, 2 delete. `in`/`out`: the interests; always one-shot.
static inline int peerlink_epoll_ctl(int epfd, int op, int fd, int in, int out, uint64_t token) {
    struct epoll_event ev;
    ev.events = EPOLLONESHOT | (in ? EPOLLIN | EPOLLRDHUP : 0) | (out ? EPOLLOUT : 0);
    ev.data.u64 = token;
    int cop = op == 0 ? EPOLL_CTL_ADD : op == 1 ? EPOLL_CTL_MOD : EPOLL_CTL_DEL;
    return epoll_ctl(epfd, cop, fd, &ev);
}

/// Bits of `peerlink_epoll_wait`'s `events`.
enum { PEERLINK_EPOLL_IN = 1, PEERLINK_EPOLL_OUT = 2, PEERLINK_EPOLL_HUP = 4 };

/// Waits; fills `tokens[i]` and `events[i]` (PEERLINK_EPOLL_* bits) for up to `max` events.
static inline int peerlink_epoll_wait(int epfd, uint64_t *tokens, uint32_t *events, int max, int timeout_ms) {
    struct epoll_event ev[64];
    if (max > 64) max = 64;
    int n = epoll_wait(epfd, ev, max, timeout_ms);
    for (int i = 0; i < n; i++) {
        tokens[i] = ev[i].data.u64;
        uint32_t e = ev[i].events, r = 0;
        if (e & (EPOLLIN | EPOLLRDHUP)) r |= PEERLINK_EPOLL_IN;
        if (e & EPOLLOUT) r |= PEERLINK_EPOLL_OUT;
        if (e & (EPOLLHUP | EPOLLERR)) r |= PEERLINK_EPOLL_HUP;
        events[i] = r;
    }
    return n;
}
/// The type of the file system `fd` is on (`statfs`'s f_type, a linux/magic.h number), which
/// Swift's Glibc module does not export either; -1 when it cannot be told.
#include <sys/vfs.h>
static inline int64_t peerlink_file_system_type(int fd) {
    struct statfs info;
    return fstatfs(fd, &info) == 0 ? (int64_t)info.f_type : -1;
}

/// glibc's `mallopt(M_TRIM_THRESHOLD, bytes)`, which Swift's Glibc module does not export
/// (malloc.h is not in it). 1 on success.
#include <malloc.h>
static inline int peerlink_malloc_trim_threshold(int bytes) { return mallopt(M_TRIM_THRESHOLD, bytes); }

/// Sends up to 64 packets in one call (`sendmmsg`: Swift's Glibc module lacks it, since it
/// needs _GNU_SOURCE), without blocking or SIGPIPE: the number sent (each whole, in order;
/// fewer when the socket filled), or -1 with errno when the first was not sent.
///
/// No socket header is included here: in the static (musl) build a header this module
/// includes first becomes this module's, and its names (MSG_NOSIGNAL...) disappear from
/// the files that do not import it. So the structs are declared with the kernel's layout
/// (which glibc's and musl's mmsghdr both have), and the function with them.
#include <stddef.h>
struct peerlink_iovec { void *base; size_t length; };
struct peerlink_msghdr {
    void *name; unsigned int name_length;
    struct peerlink_iovec *iov; size_t iov_count;
    void *control; size_t control_length;
    int flags;
};
struct peerlink_mmsghdr { struct peerlink_msghdr header; unsigned int length; };
int sendmmsg(int fd, struct peerlink_mmsghdr *messages, unsigned int count, int flags);
/// Linux's MSG_DONTWAIT and MSG_NOSIGNAL (the same on every architecture).
enum { PEERLINK_MSG_DONTWAIT = 0x40, PEERLINK_MSG_NOSIGNAL = 0x4000 };

static inline int peerlink_send_packets(int fd, const void *const *bases, const size_t *lengths, int count) {
    struct peerlink_mmsghdr messages[64];
    struct peerlink_iovec iov[64];
    if (count > 64) count = 64;
    for (int i = 0; i < count; i++) {
        iov[i].base = (void *)bases[i];
        iov[i].length = lengths[i];
        messages[i] = (struct peerlink_mmsghdr){ .header = { .iov = &iov[i], .iov_count = 1 } };
    }
    return sendmmsg(fd, messages, (unsigned int)count, PEERLINK_MSG_DONTWAIT | PEERLINK_MSG_NOSIGNAL);
}

/// renameat2(from, to, RENAME_NOREPLACE), which Swift's Glibc module does not export (glibc
/// declares it only with _GNU_SOURCE): the system call itself. 0, or -1 with errno (EEXIST:
/// `to` exists; EINVAL: the file system cannot do it).
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>
static inline int peerlink_rename_noreplace(const char *from, const char *to) {
    return (int)syscall(SYS_renameat2, AT_FDCWD, from, AT_FDCWD, to, 1u /* RENAME_NOREPLACE */);
}

#endif
