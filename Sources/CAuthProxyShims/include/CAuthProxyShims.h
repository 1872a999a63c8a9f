#ifndef CAUTHPROXY_SHIMS_H
#define CAUTHPROXY_SHIMS_H

#include <curl/curl.h>
#include <stddef.h>
#include <sys/types.h>

/// Fixed-signature wrappers for libcurl's variadic setopt/getinfo functions, which Swift cannot call.
CURLcode ap_easy_setopt_long(CURL *easy, CURLoption option, long value);
CURLcode ap_easy_setopt_ptr(CURL *easy, CURLoption option, const void *value);
CURLcode ap_easy_setopt_off(CURL *easy, CURLoption option, curl_off_t value);
CURLcode ap_easy_setopt_write_cb(CURL *easy, size_t (*cb)(char *, size_t, size_t, void *));
CURLcode ap_easy_setopt_header_cb(CURL *easy, size_t (*cb)(char *, size_t, size_t, void *));
CURLcode ap_easy_setopt_read_cb(CURL *easy, size_t (*cb)(char *, size_t, size_t, void *));
CURLcode ap_easy_setopt_seek_cb(CURL *easy, int (*cb)(void *, curl_off_t, int));
CURLcode ap_easy_setopt_closesocket_cb(CURL *easy, int (*cb)(void *, curl_socket_t));
CURLcode ap_easy_setopt_sockopt_cb(CURL *easy, int (*cb)(void *, curl_socket_t, curlsocktype));
CURLcode ap_easy_setopt_opensocket_cb(CURL *easy, curl_socket_t (*cb)(void *, curlsocktype, struct curl_sockaddr *));
CURLcode ap_easy_setopt_prereq_cb(CURL *easy, int (*cb)(void *, char *, char *, int, int));
/// Has the handle's TLS connections keep their record buffers (libcurl sets SSL_MODE_RELEASE_BUFFERS, which
/// frees and reallocates ~34 KiB per request on a kept-alive connection).
CURLcode ap_easy_keep_tls_buffers(CURL *easy);
CURLcode ap_easy_connect_only_tls(CURL *easy);
/* The socket address inside a curl_sockaddr (sizeof(struct sockaddr) is too small for IPv6 in Swift's view). */
const struct sockaddr *ap_curl_sockaddr_addr(const struct curl_sockaddr *a);
CURLcode ap_easy_getinfo_long(CURL *easy, CURLINFO info, long *value);
CURLcode ap_easy_getinfo_ptr(CURL *easy, CURLINFO info, void **value);
CURLcode ap_easy_getinfo_socket(CURL *easy, CURLINFO info, curl_socket_t *value);
CURLcode ap_easy_getinfo_off(CURL *easy, CURLINFO info, curl_off_t *value);
/* A share handle holding a connection cache and a DNS cache of its own (CURL_LOCK_DATA_CONNECT,
   CURL_LOCK_DATA_DNS), or NULL. The DNS cache keeps a handle's CURLOPT_RESOLVE pins (permanent entries) to itself,
   out of the multi handle's cache that every other transfer looks names up in. */
void *ap_share_connections_new(void);
void ap_share_free(void *share);
/* Whether the OpenSSL connection of `easy` holds bytes not yet read by SSL_read (SSL_has_pending). */
int ap_easy_tls_has_pending(CURL *easy);

CURLMcode ap_multi_setopt_long(CURLM *multi, CURLMoption option, long value);
CURLMcode ap_multi_setopt_ptr(CURLM *multi, CURLMoption option, const void *value);
CURLMcode ap_multi_setopt_socket_cb(CURLM *multi, int (*cb)(CURL *, curl_socket_t, int, void *, void *));
CURLMcode ap_multi_setopt_timer_cb(CURLM *multi, int (*cb)(CURLM *, long, void *));

/// Initialises OpenSSL without its atexit handler (which can crash at exit), then libcurl.
int ap_global_init(void);

struct sockaddr;
/// accept4(2) with SOCK_NONBLOCK | SOCK_CLOEXEC (accept4 needs _GNU_SOURCE, which Swift's Glibc lacks).
int ap_accept_nonblock(int fd, struct sockaddr *addr, unsigned int *len);

/// CPUs this thread may run on (sched_getaffinity: taskset, cpuset cgroups, container --cpuset-cpus), or -1.
int ap_affinity_cpu_count(void);

/// Fixes glibc's mmap threshold at `bytes` (unless MALLOC_MMAP_THRESHOLD_ or GLIBC_TUNABLES sets it): blocks of
/// that size and more are mmapped and given back when freed, and each arena trims its free top above 128 KiB.
/// Returns 1 when applied, 0 when the environment decides, -1 when mallopt failed (or not glibc).
int ap_malloc_fix_mmap_threshold(int bytes);

/// Starts `path` with `argv` (NULL-terminated) as a helper process: `fd` becomes its standard input (the one channel
/// to it), standard output is /dev/null, standard error is shared, every other descriptor is closed (the proxy's
/// listening and client sockets must never outlive it in a child), signal dispositions and the mask are reset.
/// Returns the pid, or -errno.
int ap_spawn_helper(const char *path, char *const argv[], int fd);
/// In a helper: dies with SIGKILL when the thread that started it (the proxy's) dies; then checks the parent is
/// still `parent` (it may have died before the request took effect). Returns 0, or -1 when orphaned already.
int ap_die_with_parent(int parent);
/// Closes every descriptor from `first` on (close_range, else one by one up to the limit).
void ap_close_from(int first);

/// Reads the libcurl version string and feature bits.
const char *ap_curl_version(void);


/* OpenSSL macros and multi-step helpers (libssl/libcrypto 3.0). */
typedef struct ssl_ctx_st SSL_CTX;
typedef struct x509_st X509;
typedef struct evp_pkey_st EVP_PKEY;
typedef struct bio_st BIO;

long ap_ssl_ctx_set_min_proto(SSL_CTX *ctx, int version);
long ap_ssl_ctx_set_mode(SSL_CTX *ctx, long mode);
/// No renegotiation, server cipher preference.
void ap_ssl_ctx_harden(SSL_CTX *ctx);
/// Session ticket keys held in memory only: a key encrypts for `interval_seconds` and decrypts for twice that;
/// a ticket under the previous key is renewed. NULL when `interval_seconds` <= 0 or out of memory.
typedef struct ap_ticket_keys ap_ticket_keys;
ap_ticket_keys *ap_ticket_keys_new(long interval_seconds);
void ap_ticket_keys_free(ap_ticket_keys *keys);
/// The 16-byte name of the key that encrypts at `now` (seconds on any monotonic clock) into `name`; 1, or 0.
int ap_ticket_keys_encrypting_name(ap_ticket_keys *keys, long now, unsigned char *name);
/// Which key the 16-byte `name` is at `now`: 1 the current one, 2 the previous one (renew), 0 none.
int ap_ticket_keys_lookup(ap_ticket_keys *keys, long now, const unsigned char *name);
/// Server-side resumption on `ctx`: TLS 1.3 and 1.2 tickets under `keys` (the context takes them and frees them
/// with itself; freed at once when this fails), TLS 1.2 session IDs in an internal cache of at most `cache_size` sessions, sessions valid for
/// the keys' interval. 1 on success.
int ap_ssl_ctx_enable_resumption(SSL_CTX *ctx, ap_ticket_keys *keys, long cache_size);
/// The session ID context (SHA-256 of `name`): a session resumes only where it is the same.
int ap_ssl_ctx_set_session_context(SSL_CTX *ctx, const char *name);
struct ssl_st;
int ap_ssl_set_session_context(struct ssl_st *ssl, const char *name);
/// A new EC P-256 key, or NULL.
EVP_PKEY *ap_ec_p256_keygen(void);
int ap_bio_pending(BIO *bio);
/// Reads a PEM private key, decrypting it with `password` when given. Never asks for a passphrase on the
/// terminal (OpenSSL's default when no callback is given): an encrypted key without `password` fails at once.
EVP_PKEY *ap_pem_read_private_key(BIO *bio, const char *password);
/// What a private key can sign a JWS with: 1 RSA (2048 bits or more), 2 EC P-256, 0 anything else.
int ap_pkey_jws_kind(EVP_PKEY *key);
/// Signs `data` with SHA-256 (EVP_DigestSign): RSA PKCS#1 v1.5, RSA-PSS with a 32-byte salt when `pss`, or ECDSA
/// (DER). `out` must hold EVP_PKEY_get_size(key) bytes; `*outlen` is set. Returns 1 on success.
int ap_sign_sha256(EVP_PKEY *key, int pss, const unsigned char *data, size_t len, unsigned char *out, size_t *outlen);
/// Verifies a signature made as ap_sign_sha256 does; 1 when it verifies.
int ap_verify_sha256(EVP_PKEY *key, int pss, const unsigned char *data, size_t len, const unsigned char *sig, size_t siglen);
/// The maximum signature size of `key`.
int ap_pkey_size(EVP_PKEY *key);
/// A new RSA key of `bits` bits, or NULL.
EVP_PKEY *ap_rsa_keygen(unsigned bits);
/// The DER encoding of a certificate into `*out` (free with ap_openssl_free); its length, or -1.
int ap_x509_der(X509 *cert, unsigned char **out);
void ap_openssl_free(void *p);
/// Adds an X.509v3 extension given in OpenSSL's config syntax (e.g. "critical,CA:TRUE,pathlen:0").
int ap_x509_add_ext(X509 *cert, X509 *issuer, int nid, const char *value);
/// notBefore = now + notBeforeOffset, notAfter = now + notAfterOffset (seconds).
int ap_x509_set_validity(X509 *cert, long notBeforeOffset, long notAfterOffset);
int ap_x509_set_random_serial(X509 *cert);
int ap_x509_set_names(X509 *cert, const char *subjectCN, const char *subjectO, X509 *issuer);
/// Writes the last OpenSSL error (and clears the queue) into buf; returns the reason code.
int ap_ssl_last_error(char *buf, int len);
int ap_ssl_reason_unknown_ca(void);
int ap_ssl_reason_bad_certificate(void);
int ap_ssl_reason_certificate_unknown(void);
/// SSL_OP_IGNORE_UNEXPECTED_EOF on one connection (the macro is not visible to Swift): a TCP close without
/// close_notify reads as an end of input, as on a plain connection.
struct ssl_st;
void ap_ssl_ignore_unexpected_eof(struct ssl_st *ssl);

#include "CAuthProxyTLSProbe.h"
#include "CAuthProxyDispatchThread.h"
#include "CAuthProxyEpoll.h"

#endif
