// For scripts/channel-mechanism-bench.swift: Glibc does not export epoll or eventfd.
#include <sys/epoll.h>
#include <sys/eventfd.h>
