/* Preloaded into authproxy when it runs under valgrind (bench/irperrequest.sh), nowhere else.
 *
 * valgrind 3.19 (Debian 12) writes into the signal mask passed to rt_sigsuspend, to keep its own kill signal
 * deliverable. libdispatch's dispatchMain() waits in sigsuspend() with a mask in read-only memory, so valgrind
 * faults on that write and aborts ("VALGRIND INTERNAL ERROR ... SIGSEGV" in syscall 130). This sigsuspend
 * passes a writable copy of the mask; the process waits for the same signals as before. */
#define _GNU_SOURCE
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

int sigsuspend(const sigset_t *mask) {
    sigset_t copy = *mask;
    return (int)syscall(SYS_rt_sigsuspend, &copy, 8); /* the kernel's sigset is 64 bits */
}
