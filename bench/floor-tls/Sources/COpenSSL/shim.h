// OpenSSL for floor-tls. The static inline helpers wrap macros over SSL_CTX_ctrl/SSL_ctrl, which Swift cannot see
// (and accept4, which needs _GNU_SOURCE).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sys/socket.h>
#include <openssl/ssl.h>
#include <openssl/err.h>

static inline long floor_ctx_set_min_proto(SSL_CTX *ctx, int version) { return SSL_CTX_set_min_proto_version(ctx, version); }
static inline long floor_ctx_set_mode(SSL_CTX *ctx, long mode) { return SSL_CTX_set_mode(ctx, mode); }
static inline long floor_ctx_set_read_ahead(SSL_CTX *ctx, long on) { return SSL_CTX_set_read_ahead(ctx, on); }
/* A peer closing without close_notify is a normal close here, not an error (SSL_ERROR_ZERO_RETURN instead). */
static inline void floor_ctx_ignore_unexpected_eof(SSL_CTX *ctx) { SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF); }
static inline long floor_set_sni(SSL *ssl, const char *name) { return SSL_set_tlsext_host_name(ssl, name); }

/* accept(2) with O_NONBLOCK and FD_CLOEXEC set on the new socket in the same call. */
static inline int floor_accept_nonblock(int fd) { return accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC); }
