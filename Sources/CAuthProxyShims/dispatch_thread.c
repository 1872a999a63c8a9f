#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/resource.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "CAuthProxyDispatchThread.h"

/* Exported by libdispatch for CoreFoundation (dispatch/private/queue_private.h, not installed on Linux). */
extern void *_dispatch_runloop_root_queue_create_4CF(const char *label, unsigned long flags);
extern bool _dispatch_runloop_root_queue_perform_4CF(void *queue);
/* Public; dispatch_object_t is a transparent union of pointers, passed as a pointer. */
extern void dispatch_set_target_queue(void *object, void *queue);

void *ap_dispatch_thread_queue_create(const char *label) {
    return _dispatch_runloop_root_queue_create_4CF(label, 0);
}

int ap_dispatch_thread_queue_fd(void *queue) {
    /* libdispatch keeps the runloop queue's eventfd, plus one (0 is a valid descriptor), in the object's context
     * field (do_ctxt: after the vtable pointer, two reference counts, do_next and do_targetq). The header is not
     * public, so the value is checked before it is trusted: it must name an eventfd of this process. The caller
     * also checks that pushing work makes it readable. */
    uintptr_t stored = *(uintptr_t *)((char *)queue + 32);
    if (stored == 0 || stored > (uintptr_t)INT32_MAX) return -1;
    int fd = (int)stored - 1;
    char path[64], target[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n <= 0) return -1;
    target[n] = 0;
    if (strcmp(target, "anon_inode:[eventfd]") != 0) return -1;
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0) return -1;
    return fd;
}

bool ap_dispatch_thread_queue_drain_one(void *queue) {
    return _dispatch_runloop_root_queue_perform_4CF(queue);
}

void ap_dispatch_set_target_queue(void *object, void *target) {
    dispatch_set_target_queue(object, target);
}

int ap_gettid(void) { return gettid(); }

void ap_thread_set_name(const char *name) {
    char buf[16];
    snprintf(buf, sizeof buf, "%s", name);
    pthread_setname_np(pthread_self(), buf);
}

int ap_thread_set_nice(int nice) {
    return setpriority(PRIO_PROCESS, (id_t)gettid(), nice) == 0 ? 0 : errno;
}
