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

#endif
