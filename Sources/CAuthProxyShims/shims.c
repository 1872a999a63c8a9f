#define _GNU_SOURCE
#include <sched.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include "CAuthProxyShims.h"
#include <openssl/crypto.h>
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ec.h>
#include <openssl/x509v3.h>
#include <openssl/rand.h>
#include <openssl/bn.h>
#include <openssl/rsa.h>
#include <openssl/core_names.h>
#include <pthread.h>
#include <time.h>

CURLcode ap_easy_setopt_long(CURL *easy, CURLoption option, long value) { return curl_easy_setopt(easy, option, value); }
CURLcode ap_easy_setopt_ptr(CURL *easy, CURLoption option, const void *value) { return curl_easy_setopt(easy, option, value); }
CURLcode ap_easy_setopt_off(CURL *easy, CURLoption option, curl_off_t value) { return curl_easy_setopt(easy, option, value); }
CURLcode ap_easy_setopt_write_cb(CURL *easy, size_t (*cb)(char *, size_t, size_t, void *)) { return curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, cb); }
CURLcode ap_easy_setopt_header_cb(CURL *easy, size_t (*cb)(char *, size_t, size_t, void *)) { return curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, cb); }
CURLcode ap_easy_setopt_read_cb(CURL *easy, size_t (*cb)(char *, size_t, size_t, void *)) { return curl_easy_setopt(easy, CURLOPT_READFUNCTION, cb); }
CURLcode ap_easy_setopt_seek_cb(CURL *easy, int (*cb)(void *, curl_off_t, int)) { return curl_easy_setopt(easy, CURLOPT_SEEKFUNCTION, cb); }
CURLcode ap_easy_setopt_closesocket_cb(CURL *easy, int (*cb)(void *, curl_socket_t)) { return curl_easy_setopt(easy, CURLOPT_CLOSESOCKETFUNCTION, cb); }
CURLcode ap_easy_setopt_sockopt_cb(CURL *easy, int (*cb)(void *, curl_socket_t, curlsocktype)) { return curl_easy_setopt(easy, CURLOPT_SOCKOPTFUNCTION, cb); }
CURLcode ap_easy_setopt_opensocket_cb(CURL *easy, curl_socket_t (*cb)(void *, curlsocktype, struct curl_sockaddr *)) { return curl_easy_setopt(easy, CURLOPT_OPENSOCKETFUNCTION, cb); }
CURLcode ap_easy_setopt_prereq_cb(CURL *easy, int (*cb)(void *, char *, char *, int, int)) { return curl_easy_setopt(easy, CURLOPT_PREREQFUNCTION, cb); }
const struct sockaddr *ap_curl_sockaddr_addr(const struct curl_sockaddr *a) { return &a->addr; }
CURLcode ap_easy_getinfo_long(CURL *easy, CURLINFO info, long *value) { return curl_easy_getinfo(easy, info, value); }
CURLcode ap_easy_getinfo_ptr(CURL *easy, CURLINFO info, void **value) { return curl_easy_getinfo(easy, info, value); }
CURLcode ap_easy_getinfo_socket(CURL *easy, CURLINFO info, curl_socket_t *value) { return curl_easy_getinfo(easy, info, value); }
CURLcode ap_easy_getinfo_off(CURL *easy, CURLINFO info, curl_off_t *value) { return curl_easy_getinfo(easy, info, value); }

CURLMcode ap_multi_setopt_long(CURLM *multi, CURLMoption option, long value) { return curl_multi_setopt(multi, option, value); }
CURLMcode ap_multi_setopt_ptr(CURLM *multi, CURLMoption option, const void *value) { return curl_multi_setopt(multi, option, value); }
CURLMcode ap_multi_setopt_socket_cb(CURLM *multi, int (*cb)(CURL *, curl_socket_t, int, void *, void *)) { return curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, cb); }
CURLMcode ap_multi_setopt_timer_cb(CURLM *multi, int (*cb)(CURLM *, long, void *)) { return curl_multi_setopt(multi, CURLMOPT_TIMERFUNCTION, cb); }

int ap_global_init(void) {
    OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL);
    OPENSSL_init_ssl(0, NULL);
    return (int)curl_global_init(CURL_GLOBAL_DEFAULT);
}

int ap_malloc_fix_mmap_threshold(int bytes) {
#ifdef __GLIBC__
    const char *tunables = getenv("GLIBC_TUNABLES");
    if (getenv("MALLOC_MMAP_THRESHOLD_") != NULL || (tunables != NULL && strstr(tunables, "mmap_threshold") != NULL))
        return 0;
    return mallopt(M_MMAP_THRESHOLD, bytes) == 1 ? 1 : -1;
#else
    (void)bytes;
    return -1;
#endif
}

const char *ap_curl_version(void) { return curl_version(); }

/* CURLOPT_SSL_CTX_FUNCTION: libcurl makes an SSL_CTX per connection and sets SSL_MODE_RELEASE_BUFFERS on it;
   the connection's SSL inherits the mode when libcurl creates it right after this callback.
   SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER: a write that would block is retried from the proxy's own send queue
   (curl_easy_send on a CONNECT_ONLY connection), not from the buffer the first attempt passed. */
static CURLcode ap_keep_tls_buffers_cb(CURL *easy, void *ssl_ctx, void *userdata) {
    (void)easy; (void)userdata;
    SSL_CTX_clear_mode((SSL_CTX *)ssl_ctx, SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_mode((SSL_CTX *)ssl_ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    return CURLE_OK;
}

void *ap_share_connections_new(void) {
    CURLSH *sh = curl_share_init();
    if (!sh) return NULL;
    if (curl_share_setopt(sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT) != CURLSHE_OK
        || curl_share_setopt(sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK) {
        curl_share_cleanup(sh);
        return NULL;
    }
    return sh;
}

void ap_share_free(void *share) { curl_share_cleanup((CURLSH *)share); }

int ap_easy_tls_has_pending(CURL *easy) {
    struct curl_tlssessioninfo *info = NULL;
    if (curl_easy_getinfo(easy, CURLINFO_TLS_SSL_PTR, &info) != CURLE_OK || !info) return 0;
    if (info->backend != CURLSSLBACKEND_OPENSSL || !info->internals) return 0;
    return SSL_has_pending((SSL *)info->internals);
}

CURLcode ap_easy_keep_tls_buffers(CURL *easy) { return curl_easy_setopt(easy, CURLOPT_SSL_CTX_FUNCTION, ap_keep_tls_buffers_cb); }

/* The same for a CONNECT_ONLY connection of the proxy's own client, which also reads a TCP close without a TLS
   close_notify as an end of input (SSL_ERROR_ZERO_RETURN, so curl_easy_recv returns 0 bytes) instead of an error,
   as on a plain connection: HTTP/1.1 framing tells a complete response from a cut one. */
static CURLcode ap_connect_only_tls_cb(CURL *easy, void *ssl_ctx, void *userdata) {
    ap_keep_tls_buffers_cb(easy, ssl_ctx, userdata);
    SSL_CTX_set_options((SSL_CTX *)ssl_ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    return CURLE_OK;
}

CURLcode ap_easy_connect_only_tls(CURL *easy) { return curl_easy_setopt(easy, CURLOPT_SSL_CTX_FUNCTION, ap_connect_only_tls_cb); }

int ap_accept_nonblock(int fd, struct sockaddr *addr, unsigned int *len) {
    return accept4(fd, addr, (socklen_t *)len, SOCK_NONBLOCK | SOCK_CLOEXEC);
}

long ap_ssl_ctx_set_min_proto(SSL_CTX *ctx, int version) { return SSL_CTX_set_min_proto_version(ctx, version); }
long ap_ssl_ctx_set_mode(SSL_CTX *ctx, long mode) { return SSL_CTX_set_mode(ctx, mode); }
void ap_ssl_ctx_harden(SSL_CTX *ctx) {
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
}

/* Session ticket keys, in memory only. A key encrypts for one interval from its birth and decrypts for two, so
   a ticket is accepted for at least one interval (the session timeout) and at most two; a ticket under the
   previous key is renewed. OpenSSL's own keys (random per SSL_CTX) would never rotate in a long-running
   process. The lock is taken by every loop's handshakes: it guards a copy of 80 bytes. */
struct ap_ticket_key {
    unsigned char name[16];
    unsigned char aes[32];
    unsigned char hmac[32];
    long born;
    int valid;
};

struct ap_ticket_keys {
    pthread_mutex_t lock;
    long interval;
    struct ap_ticket_key current, previous;
};

ap_ticket_keys *ap_ticket_keys_new(long interval_seconds) {
    if (interval_seconds <= 0) return NULL;
    ap_ticket_keys *k = OPENSSL_zalloc(sizeof *k);
    if (!k) return NULL;
    pthread_mutex_init(&k->lock, NULL);
    k->interval = interval_seconds;
    return k;
}

void ap_ticket_keys_free(ap_ticket_keys *k) {
    if (!k) return;
    pthread_mutex_destroy(&k->lock);
    OPENSSL_clear_free(k, sizeof *k);
}

/* Under the lock: a new current key once the current one is an interval old; the previous one dropped once it is
   two intervals old. 0 when no random bytes could be had (the keys stay as they were). */
static int ap_ticket_keys_rotate_locked(ap_ticket_keys *k, long now) {
    if (k->previous.valid && now - k->previous.born >= 2 * k->interval) OPENSSL_cleanse(&k->previous, sizeof k->previous);
    if (k->current.valid && now - k->current.born < k->interval) return 1;
    struct ap_ticket_key fresh;
    if (RAND_bytes(fresh.name, sizeof fresh.name) != 1 || RAND_priv_bytes(fresh.aes, sizeof fresh.aes) != 1
        || RAND_priv_bytes(fresh.hmac, sizeof fresh.hmac) != 1) {
        OPENSSL_cleanse(&fresh, sizeof fresh);
        return 0;
    }
    fresh.born = now;
    fresh.valid = 1;
    if (k->current.valid && now - k->current.born < 2 * k->interval) k->previous = k->current;
    else OPENSSL_cleanse(&k->previous, sizeof k->previous);
    k->current = fresh;
    OPENSSL_cleanse(&fresh, sizeof fresh);
    return 1;
}

/* The key that encrypts at `now`, copied out; 0 when there is none. */
static int ap_ticket_keys_for_encryption(ap_ticket_keys *k, long now, struct ap_ticket_key *out) {
    pthread_mutex_lock(&k->lock);
    int ok = ap_ticket_keys_rotate_locked(k, now) && k->current.valid;
    if (ok) *out = k->current;
    pthread_mutex_unlock(&k->lock);
    return ok;
}

/* The key named `name` at `now`, copied out: 1 the current one, 2 the previous one (renew the ticket), 0 none. */
static int ap_ticket_keys_for_decryption(ap_ticket_keys *k, long now, const unsigned char *name,
                                         struct ap_ticket_key *out) {
    int found = 0;
    pthread_mutex_lock(&k->lock);
    ap_ticket_keys_rotate_locked(k, now);
    if (k->current.valid && memcmp(k->current.name, name, 16) == 0) {
        *out = k->current;
        found = 1;
    } else if (k->previous.valid && memcmp(k->previous.name, name, 16) == 0) {
        *out = k->previous;
        found = 2;
    }
    pthread_mutex_unlock(&k->lock);
    return found;
}

int ap_ticket_keys_encrypting_name(ap_ticket_keys *k, long now, unsigned char *name) {
    struct ap_ticket_key key;
    if (!ap_ticket_keys_for_encryption(k, now, &key)) return 0;
    memcpy(name, key.name, 16);
    OPENSSL_cleanse(&key, sizeof key);
    return 1;
}

int ap_ticket_keys_lookup(ap_ticket_keys *k, long now, const unsigned char *name) {
    struct ap_ticket_key key;
    int found = ap_ticket_keys_for_decryption(k, now, name, &key);
    OPENSSL_cleanse(&key, sizeof key);
    return found;
}

static int ap_ticket_keys_index = -1;
static pthread_once_t ap_ticket_keys_index_once = PTHREAD_ONCE_INIT;

static void ap_ticket_keys_ex_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl, void *argp) {
    (void)parent; (void)ad; (void)idx; (void)argl; (void)argp;
    ap_ticket_keys_free((ap_ticket_keys *)ptr);
}

static void ap_ticket_keys_make_index(void) {
    ap_ticket_keys_index = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, ap_ticket_keys_ex_free);
}

static long ap_monotonic_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec;
}

static int ap_ticket_key_cb(SSL *s, unsigned char key_name[16], unsigned char iv[EVP_MAX_IV_LENGTH],
                            EVP_CIPHER_CTX *cctx, EVP_MAC_CTX *hctx, int enc) {
    ap_ticket_keys *k = SSL_CTX_get_ex_data(SSL_get_SSL_CTX(s), ap_ticket_keys_index);
    if (!k) return enc ? -1 : 0;
    struct ap_ticket_key key;
    int result;
    if (enc) {
        /* 0: no ticket this time (a TLS 1.2 client can still resume by session ID). */
        if (RAND_bytes(iv, 16) != 1 || !ap_ticket_keys_for_encryption(k, ap_monotonic_seconds(), &key)) return 0;
        memcpy(key_name, key.name, 16);
        result = 1;
    } else {
        result = ap_ticket_keys_for_decryption(k, ap_monotonic_seconds(), key_name, &key);
        if (result == 0) return 0; /* unknown or expired key: a full handshake, and a new ticket */
    }
    OSSL_PARAM params[3];
    params[0] = OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY, key.hmac, sizeof key.hmac);
    params[1] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0);
    params[2] = OSSL_PARAM_construct_end();
    int ok = EVP_MAC_CTX_set_params(hctx, params) == 1
        && (enc ? EVP_EncryptInit_ex(cctx, EVP_aes_256_cbc(), NULL, key.aes, iv)
                : EVP_DecryptInit_ex(cctx, EVP_aes_256_cbc(), NULL, key.aes, iv)) == 1;
    OPENSSL_cleanse(&key, sizeof key);
    return ok ? result : -1;
}

int ap_ssl_ctx_enable_resumption(SSL_CTX *ctx, ap_ticket_keys *keys, long cache_size) {
    pthread_once(&ap_ticket_keys_index_once, ap_ticket_keys_make_index);
    if (!keys) return 0;
    if (ap_ticket_keys_index < 0 || SSL_CTX_set_ex_data(ctx, ap_ticket_keys_index, keys) != 1) {
        ap_ticket_keys_free(keys);
        return 0;
    }
    /* From here the context owns the keys (freed with it). */
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
    SSL_CTX_sess_set_cache_size(ctx, cache_size);
    SSL_CTX_set_timeout(ctx, keys->interval);
    SSL_CTX_clear_options(ctx, SSL_OP_NO_TICKET);
    return SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, ap_ticket_key_cb) == 1;
}

int ap_ssl_ctx_set_session_context(SSL_CTX *ctx, const char *name) {
    unsigned char md[SSL_MAX_SID_CTX_LENGTH];
    unsigned int len = 0;
    if (EVP_Digest(name, strlen(name), md, &len, EVP_sha256(), NULL) != 1 || len > sizeof md) return 0;
    return SSL_CTX_set_session_id_context(ctx, md, len);
}

int ap_ssl_set_session_context(SSL *ssl, const char *name) {
    unsigned char md[SSL_MAX_SID_CTX_LENGTH];
    unsigned int len = 0;
    if (EVP_Digest(name, strlen(name), md, &len, EVP_sha256(), NULL) != 1 || len > sizeof md) return 0;
    return SSL_set_session_id_context(ssl, md, len);
}
EVP_PKEY *ap_ec_p256_keygen(void) { return EVP_EC_gen("P-256"); }
int ap_bio_pending(BIO *bio) { return BIO_pending(bio); }
void ap_ssl_ignore_unexpected_eof(SSL *ssl) { SSL_set_options(ssl, SSL_OP_IGNORE_UNEXPECTED_EOF); }

int ap_x509_add_ext(X509 *cert, X509 *issuer, int nid, const char *value) {
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer ? issuer : cert, cert, NULL, NULL, 0);
    X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    if (!ext) return 0;
    int ok = X509_add_ext(cert, ext, -1);
    X509_EXTENSION_free(ext);
    return ok;
}

int ap_x509_set_validity(X509 *cert, long notBeforeOffset, long notAfterOffset) {
    return X509_gmtime_adj(X509_getm_notBefore(cert), notBeforeOffset) != NULL
        && X509_gmtime_adj(X509_getm_notAfter(cert), notAfterOffset) != NULL;
}

int ap_x509_set_random_serial(X509 *cert) {
    unsigned char bytes[16];
    if (RAND_bytes(bytes, sizeof bytes) != 1) return 0;
    bytes[0] &= 0x7f; /* positive */
    BIGNUM *bn = BN_bin2bn(bytes, sizeof bytes, NULL);
    if (!bn) return 0;
    int ok = BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert)) != NULL;
    BN_free(bn);
    return ok;
}

int ap_x509_set_names(X509 *cert, const char *subjectCN, const char *subjectO, X509 *issuer) {
    X509_NAME *name = X509_NAME_new();
    if (!name) return 0;
    if (subjectO && !X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8, (const unsigned char *)subjectO, -1, -1, 0)) { X509_NAME_free(name); return 0; }
    if (subjectCN && !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)subjectCN, -1, -1, 0)) { X509_NAME_free(name); return 0; }
    int ok = X509_set_subject_name(cert, name);
    ok = ok && X509_set_issuer_name(cert, issuer ? X509_get_subject_name(issuer) : name);
    X509_NAME_free(name);
    return ok;
}

int ap_ssl_last_error(char *buf, int len) {
    unsigned long e = ERR_peek_last_error();
    if (buf && len > 0) {
        buf[0] = 0;
        if (e) ERR_error_string_n(e, buf, (size_t)len);
    }
    ERR_clear_error();
    return e ? ERR_GET_REASON(e) : 0;
}
int ap_ssl_reason_unknown_ca(void) { return SSL_R_TLSV1_ALERT_UNKNOWN_CA; }
int ap_ssl_reason_bad_certificate(void) { return SSL_R_SSLV3_ALERT_BAD_CERTIFICATE; }
int ap_ssl_reason_certificate_unknown(void) { return SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN; }

int ap_affinity_cpu_count(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) return -1;
    return CPU_COUNT(&set);
}

static int ap_pem_password(char *buf, int size, int rwflag, void *u) {
    (void)rwflag;
    if (!u || size <= 0) return 0;  /* no passphrase: decryption fails, nothing is asked */
    size_t n = strlen((const char *)u);
    if (n > (size_t)size) n = (size_t)size;
    memcpy(buf, u, n);
    return (int)n;
}

EVP_PKEY *ap_pem_read_private_key(BIO *bio, const char *password) {
    return PEM_read_bio_PrivateKey(bio, NULL, ap_pem_password, (void *)password);
}

int ap_pkey_jws_kind(EVP_PKEY *key) {
    if (EVP_PKEY_get_base_id(key) == EVP_PKEY_RSA) return EVP_PKEY_get_bits(key) >= 2048 ? 1 : 0;
    if (EVP_PKEY_get_base_id(key) == EVP_PKEY_EC) {
        char group[64];
        size_t glen = 0;
        if (EVP_PKEY_get_utf8_string_param(key, "group", group, sizeof(group), &glen) != 1) return 0;
        return strcmp(group, "prime256v1") == 0 || strcmp(group, "P-256") == 0 ? 2 : 0;
    }
    return 0;
}

static int ap_pss(EVP_PKEY_CTX *pctx) {
    return EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) == 1
        && EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, 32) == 1
        && EVP_PKEY_CTX_set_rsa_mgf1_md(pctx, EVP_sha256()) == 1;
}

int ap_sign_sha256(EVP_PKEY *key, int pss, const unsigned char *data, size_t len, unsigned char *out, size_t *outlen) {
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx) return 0;
    EVP_PKEY_CTX *pctx = NULL;
    int ok = EVP_DigestSignInit(ctx, &pctx, EVP_sha256(), NULL, key) == 1
        && (!pss || ap_pss(pctx))
        && EVP_DigestSign(ctx, out, outlen, data, len) == 1;
    EVP_MD_CTX_free(ctx);
    return ok;
}

int ap_verify_sha256(EVP_PKEY *key, int pss, const unsigned char *data, size_t len, const unsigned char *sig, size_t siglen) {
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx) return 0;
    EVP_PKEY_CTX *pctx = NULL;
    int ok = EVP_DigestVerifyInit(ctx, &pctx, EVP_sha256(), NULL, key) == 1
        && (!pss || ap_pss(pctx))
        && EVP_DigestVerify(ctx, sig, siglen, data, len) == 1;
    EVP_MD_CTX_free(ctx);
    return ok;
}

int ap_pkey_size(EVP_PKEY *key) { return EVP_PKEY_get_size(key); }
EVP_PKEY *ap_rsa_keygen(unsigned bits) { return EVP_RSA_gen(bits); }
int ap_x509_der(X509 *cert, unsigned char **out) { *out = NULL; return i2d_X509(cert, out); }
void ap_openssl_free(void *p) { OPENSSL_free(p); }

int ap_spawn_helper(const char *path, char *const argv[], int fd) {
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    if (posix_spawn_file_actions_init(&fa) != 0) return -ENOMEM;
    if (posix_spawnattr_init(&attr) != 0) {
        posix_spawn_file_actions_destroy(&fa);
        return -ENOMEM;
    }
    int rc = posix_spawn_file_actions_adddup2(&fa, fd, 0);
    if (rc == 0) rc = posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    /* glibc 2.34: closes everything above stderr in the child, whatever was opened without O_CLOEXEC. */
    if (rc == 0) rc = posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    sigset_t all, none;
    sigfillset(&all);
    sigemptyset(&none);
    if (rc == 0) rc = posix_spawnattr_setsigdefault(&attr, &all);
    if (rc == 0) rc = posix_spawnattr_setsigmask(&attr, &none);
    if (rc == 0) rc = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
    pid_t pid = -1;
    extern char **environ;
    if (rc == 0) rc = posix_spawn(&pid, path, &fa, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    return rc == 0 ? (int)pid : -rc;
}

int ap_die_with_parent(int parent) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return -1;
    return getppid() == (pid_t)parent ? 0 : -1;
}

void ap_close_from(int first) {
#ifdef SYS_close_range
    if (syscall(SYS_close_range, (unsigned)first, ~0U, 0) == 0) return;
#endif
    struct rlimit rl;
    long max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (long)rl.rlim_cur : 65536;
    for (long fd = first; fd < max; fd++) close((int)fd);
}
