#ifndef CAUTHPROXY_DISPATCH_THREAD_H
#define CAUTHPROXY_DISPATCH_THREAD_H

#include <stdbool.h>

/* A Dispatch queue drained by a thread of the proxy's own (see DispatchThread.swift).
 *
 * libdispatch exports, for swift-corelibs-foundation's run loops, a "runloop" root queue: a serial root queue bound
 * to the thread that creates it, which no worker of libdispatch's pools ever drains. Pushing work onto it (directly
 * or through a queue that targets it) writes to an eventfd; the bound thread waits on that descriptor and drains
 * the queue one item at a time. The queues are passed as opaque pointers (dispatch_queue_t). */

/// Creates a runloop root queue bound to the calling thread, or NULL.
void *ap_dispatch_thread_queue_create(const char *label);
/// The eventfd that libdispatch writes when work is pushed onto `queue`, or -1 when it cannot be found or is
/// not an eventfd. Also switches the descriptor to blocking reads (only the bound thread reads it).
int ap_dispatch_thread_queue_fd(void *queue);
/// Runs one item of `queue` (on its bound thread); true when more are waiting.
bool ap_dispatch_thread_queue_drain_one(void *queue);
/// dispatch_set_target_queue for an inactive queue.
void ap_dispatch_set_target_queue(void *object, void *target);
/// The calling thread's kernel id.
int ap_gettid(void);
/// Names the calling thread (the kernel keeps the first 15 bytes).
void ap_thread_set_name(const char *name);
/// Sets the calling thread's nice value; 0 or the errno.
int ap_thread_set_nice(int nice);

#endif
