#ifndef C_AUTHPROXY_EPOLL_H
#define C_AUTHPROXY_EPOLL_H

// Glibc's Swift module leaves out <sys/epoll.h>: the event loops' epoll sets (Server/EventPoll) use it from here.
#include <sys/epoll.h>

#endif
