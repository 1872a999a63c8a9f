/*
 * tlsload: a tiny HTTPS load generator for bench/https.sh.
 *
 * wrk and h2load cannot send CONNECT, so they cannot drive an intercepting forward
 * proxy. tlsload runs one thread per connection with blocking I/O. Each thread
 *   - connects to ADDR (always a numeric IPv4 host:port),
 *   - with -t AUTHORITY: sends "CONNECT AUTHORITY HTTP/1.1" and expects a 200
 *     (forward proxy); without -t the TLS server is ADDR itself (reverse proxy),
 *   - does a TLS handshake (SNI + verified name = -s, trust anchors = -C): a full one,
 *     or with -R one that resumes the thread's last session (a returning client),
 *   - sends "GET PATH HTTP/1.1" back to back on that connection (keep-alive), or
 *     with -N one GET per connection (each request = TCP + CONNECT + TLS + GET).
 * A request counts when its response is complete, has status 200 and (with -b)
 * a body of exactly that many bytes; anything else is an error and the thread
 * reconnects; so does a "Connection: close" response, without an error. Latency is
 * measured per request: send -> last body byte (with -N: connect -> last body byte).
 *
 * Output, one line on stdout:
 *   requests=N rps=R p50_ms=X p99_ms=Y errors=- | errors=conn=1,tls=2,io=3,http=4 handshakes=H resumed=S
 * (S of the H handshakes resumed a session; without -R, S is 0.)
 * The first error of each kind is described on stderr.
 *
 * Build: cc -O2 -o tlsload tlsload.c -lssl -lcrypto -lpthread
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define BUF_SIZE (256 * 1024) /* a response (head + body) must fit */

enum { E_CONN, E_TLS, E_IO, E_HTTP, E_KINDS };
static const char *kind_name[E_KINDS] = {"conn", "tls", "io", "http"};

static struct sockaddr_in addr;
static const char *authority, *sni, *path, *host_header;
static long expect_body = -1;
static int new_conn_per_request, resume;
static atomic_long handshakes, resumed;
static double deadline; /* monotonic seconds */
static SSL_CTX *ctx;
static char request[2048];
static size_t request_len;
static atomic_long errors[E_KINDS];
static atomic_int reported[E_KINDS];

typedef struct {
    uint32_t *lat_us;
    size_t n, cap;
    char buf[BUF_SIZE + 1]; /* NUL-terminated */
    size_t len;             /* bytes in buf */
} worker;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void fail(int kind, const char *what) {
    atomic_fetch_add(&errors[kind], 1);
    if (atomic_exchange(&reported[kind], 1) == 0) {
        unsigned long e = ERR_peek_last_error();
        fprintf(stderr, "tlsload: first %s error: %s%s%s%s\n", kind_name[kind], what,
                errno ? ": " : "", errno ? strerror(errno) : "",
                e ? ERR_error_string(e, NULL) : "");
    }
    ERR_clear_error();
}

/* Plain TCP connect + optional CONNECT. Returns fd or -1. */
static int open_tunnel(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct timeval tv = {5, 0};
    errno = 0;
    if (fd < 0) { fail(E_CONN, "socket"); return -1; }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        fail(E_CONN, "connect"); close(fd); return -1;
    }
    if (!authority) return fd;

    char req[600], resp[4096];
    int n = snprintf(req, sizeof req, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority);
    if (send(fd, req, n, MSG_NOSIGNAL) != n) { fail(E_CONN, "send CONNECT"); close(fd); return -1; }
    size_t got = 0;
    for (;;) { /* the proxy sends nothing after its head until the ClientHello */
        ssize_t r = recv(fd, resp + got, sizeof resp - 1 - got, 0);
        if (r <= 0) { fail(E_CONN, r == 0 ? "proxy closed during CONNECT" : "recv CONNECT"); close(fd); return -1; }
        got += r;
        resp[got] = 0;
        if (strstr(resp, "\r\n\r\n")) break;
        if (got == sizeof resp - 1) { errno = 0; fail(E_CONN, "CONNECT response head too long"); close(fd); return -1; }
    }
    if (strncmp(resp, "HTTP/1.1 200", 12) != 0 && strncmp(resp, "HTTP/1.0 200", 12) != 0) {
        errno = 0;
        char msg[128];
        snprintf(msg, sizeof msg, "CONNECT refused: %.60s", resp);
        msg[strcspn(msg, "\r\n")] = 0;
        fail(E_CONN, msg); close(fd); return -1;
    }
    return fd;
}

static SSL *open_tls(int fd, SSL_SESSION *session) {
    SSL *ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    if (session) SSL_set_session(ssl, session);
    SSL_set_tlsext_host_name(ssl, sni);
    SSL_set1_host(ssl, sni);
    errno = 0;
    if (SSL_connect(ssl) != 1) {
        long v = SSL_get_verify_result(ssl);
        char msg[160];
        snprintf(msg, sizeof msg, "handshake (verify: %s) ", X509_verify_cert_error_string(v));
        fail(E_TLS, msg);
        SSL_free(ssl);
        return NULL;
    }
    atomic_fetch_add(&handshakes, 1);
    if (SSL_session_reused(ssl)) atomic_fetch_add(&resumed, 1);
    return ssl;
}

/* Reads until w->buf holds at least `need` bytes. 0 on success. */
static int fill(worker *w, SSL *ssl, size_t need) {
    while (w->len < need) {
        if (need > BUF_SIZE) { errno = 0; fail(E_HTTP, "response larger than buffer"); return -1; }
        int r = SSL_read(ssl, w->buf + w->len, BUF_SIZE - w->len);
        if (r <= 0) { fail(E_IO, "read (server closed or timed out)"); return -1; }
        w->len += r;
        w->buf[w->len] = 0;
    }
    return 0;
}

static char *find(worker *w, size_t from, const char *s) {
    return memmem(w->buf + from, w->len - from, s, strlen(s));
}

/* Reads one response (Content-Length or chunked). 0 if it is a 200 with the expected body;
 * *close is set when the server announced "Connection: close". */
static int read_response(worker *w, SSL *ssl, int *close) {
    char *end;
    while (!(end = find(w, 0, "\r\n\r\n")))
        if (fill(w, ssl, w->len + 1)) return -1;
    size_t head = end + 4 - w->buf;
    int status = atoi(w->buf + 9);
    long clen = -1, body = 0;
    int chunked = 0;
    for (char *l = strstr(w->buf, "\r\n") + 2; l < w->buf + head - 2; l = strstr(l, "\r\n") + 2) {
        if (!strncasecmp(l, "Content-Length:", 15)) clen = atol(l + 15);
        char *c = strcasestr(l, "chunked");
        if (!strncasecmp(l, "Transfer-Encoding:", 18) && c && c < strstr(l, "\r\n")) chunked = 1;
        c = strcasestr(l, "close");
        if (!strncasecmp(l, "Connection:", 11) && c && c < strstr(l, "\r\n")) *close = 1;
    }
    size_t pos = head;
    if (chunked) {
        for (;;) {
            char *crlf;
            while (!(crlf = find(w, pos, "\r\n")))
                if (fill(w, ssl, w->len + 1)) return -1;
            long size = strtol(w->buf + pos, NULL, 16);
            if (size < 0 || size > BUF_SIZE) { errno = 0; fail(E_HTTP, "bad chunk size"); return -1; }
            pos = crlf + 2 - w->buf;
            if (fill(w, ssl, pos + size + 2)) return -1; /* data + CRLF (no trailers) */
            pos += size + 2;
            body += size;
            if (size == 0) break;
        }
    } else if (clen >= 0) {
        if (fill(w, ssl, head + clen)) return -1;
        pos = head + clen;
        body = clen;
    } else {
        errno = 0; fail(E_HTTP, "response without Content-Length or chunked"); return -1;
    }
    memmove(w->buf, w->buf + pos, w->len - pos); /* keep anything that came after it */
    w->len -= pos;
    w->buf[w->len] = 0;
    if (status != 200 || (expect_body >= 0 && body != expect_body)) {
        char msg[96];
        errno = 0;
        snprintf(msg, sizeof msg, "status %d, body %ld bytes (expected 200, %ld)", status, body, expect_body);
        fail(E_HTTP, msg);
        return -1;
    }
    return 0;
}

static void record(worker *w, double t0) {
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 65536;
        w->lat_us = realloc(w->lat_us, w->cap * sizeof *w->lat_us);
    }
    w->lat_us[w->n++] = (uint32_t)((now() - t0) * 1e6 + 0.5);
}

static void *run(void *arg) {
    worker *w = arg;
    SSL_SESSION *session = NULL; /* with -R: the last one the server gave this thread */
    while (now() < deadline) {
        double t0 = now();
        int fd = open_tunnel();
        if (fd < 0) { usleep(10000); continue; }
        SSL *ssl = open_tls(fd, session);
        if (!ssl) { close(fd); usleep(10000); continue; }
        w->len = 0;
        w->buf[0] = 0;
        for (;;) {
            if (!new_conn_per_request) t0 = now();
            errno = 0;
            if (SSL_write(ssl, request, request_len) != (int)request_len) { fail(E_IO, "write"); break; }
            int server_closes = 0;
            if (read_response(w, ssl, &server_closes)) break;
            if (now() >= deadline) break; /* finished after the end: not counted */
            record(w, t0);
            if (resume) { /* after a response: a TLS 1.3 server's tickets have come in by now */
                SSL_SESSION *latest = SSL_get1_session(ssl);
                if (latest && SSL_SESSION_is_resumable(latest)) {
                    SSL_SESSION_free(session);
                    session = latest;
                } else {
                    SSL_SESSION_free(latest);
                }
            }
            if (new_conn_per_request || server_closes) break; /* e.g. keepalive_requests reached */
        }
        SSL_shutdown(ssl); /* send close_notify, do not wait for the peer's */
        SSL_free(ssl);
        close(fd);
    }
    SSL_SESSION_free(session);
    return NULL;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static void usage(void) {
    fprintf(stderr,
            "usage: tlsload -a IP:PORT [-t HOST:PORT] -s SNI -C CAFILE [-H HOST] [-p PATH]\n"
            "               [-c CONNS] [-d SECONDS] [-b BODY_BYTES] [-N] [-R]\n"
            "  -a  TCP address to connect to (the proxy, or the TLS server without -t)\n"
            "  -t  CONNECT to this authority first (forward proxy)\n"
            "  -s  TLS server name (SNI and certificate check)   -C  trusted CA file\n"
            "  -H  Host header (default: -t, else SNI)   -p  path (default /small.json)\n"
            "  -c  connections (threads, default 1)      -d  seconds (default 10)\n"
            "  -b  expected body size (default: not checked)\n"
            "  -N  new connection (and handshake) for every request\n"
            "  -R  resume: each handshake offers the thread's last session (a returning client)\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *address = NULL, *cafile = NULL;
    int conns = 1, opt;
    double seconds = 10;
    path = "/small.json";
    while ((opt = getopt(argc, argv, "a:t:s:C:H:p:c:d:b:NR")) != -1) {
        switch (opt) {
        case 'a': address = optarg; break;
        case 't': authority = optarg; break;
        case 's': sni = optarg; break;
        case 'C': cafile = optarg; break;
        case 'H': host_header = optarg; break;
        case 'p': path = optarg; break;
        case 'c': conns = atoi(optarg); break;
        case 'd': seconds = atof(optarg); break;
        case 'b': expect_body = atol(optarg); break;
        case 'N': new_conn_per_request = 1; break;
        case 'R': resume = 1; break;
        default: usage();
        }
    }
    if (!address || !sni || !cafile || conns < 1 || seconds <= 0) usage();
    char ip[64];
    const char *colon = strrchr(address, ':');
    if (!colon || colon - address >= (long)sizeof ip) usage();
    memcpy(ip, address, colon - address);
    ip[colon - address] = 0;
    addr.sin_family = AF_INET;
    addr.sin_port = htons(atoi(colon + 1));
    if (inet_pton(AF_INET, ip, &addr.sin_addr) != 1) usage();
    if (!host_header) host_header = authority ? authority : sni;
    request_len = snprintf(request, sizeof request, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: tlsload\r\nAccept: */*\r\n\r\n",
                           path, host_header);

    signal(SIGPIPE, SIG_IGN);
    ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    /* No cache: without -R every handshake is a full one; with -R each thread keeps its own last session. */
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    if (SSL_CTX_load_verify_locations(ctx, cafile, NULL) != 1) {
        fprintf(stderr, "tlsload: cannot load CA file %s\n", cafile);
        return 2;
    }

    worker *ws = calloc(conns, sizeof *ws);
    pthread_t *th = calloc(conns, sizeof *th);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    double start = now();
    deadline = start + seconds;
    for (int i = 0; i < conns; i++)
        if (pthread_create(&th[i], &attr, run, &ws[i]) != 0) { perror("pthread_create"); return 1; }
    size_t total = 0;
    for (int i = 0; i < conns; i++) {
        pthread_join(th[i], NULL);
        total += ws[i].n;
    }

    uint32_t *all = malloc((total ? total : 1) * sizeof *all);
    size_t k = 0;
    for (int i = 0; i < conns; i++) {
        memcpy(all + k, ws[i].lat_us, ws[i].n * sizeof *all);
        k += ws[i].n;
    }
    qsort(all, total, sizeof *all, cmp_u32);
    char errs[256] = "";
    for (int i = 0; i < E_KINDS; i++) {
        long e = atomic_load(&errors[i]);
        if (e) snprintf(errs + strlen(errs), sizeof errs - strlen(errs), "%s%s=%ld", *errs ? "," : "", kind_name[i], e);
    }
    if (total == 0)
        printf("requests=0 rps=0 p50_ms=nan p99_ms=nan errors=%s", *errs ? errs : "-");
    else
        printf("requests=%zu rps=%.2f p50_ms=%.3f p99_ms=%.3f errors=%s", total, total / seconds,
               all[(size_t)(0.50 * (total - 1))] / 1000.0, all[(size_t)(0.99 * (total - 1))] / 1000.0,
               *errs ? errs : "-");
    printf(" handshakes=%ld resumed=%ld\n", atomic_load(&handshakes), atomic_load(&resumed));
    return 0;
}
