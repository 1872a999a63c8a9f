#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include "CAuthProxyTLSProbe.h"

int ap_probe_set_sni(SSL *ssl, const char *host) { return (int)SSL_set_tlsext_host_name(ssl, host); }

static int probe_client_cert_cb(SSL *ssl, X509 **x509, EVP_PKEY **pkey) {
    (void)x509;
    (void)pkey;
    int *counter = SSL_get_app_data(ssl);
    if (counter) (*counter)++;
    return 0; /* no certificate: continue the handshake without one */
}

void ap_probe_watch_client_cert(SSL *ssl, int *counter) {
    SSL_set_app_data(ssl, counter);
    SSL_CTX_set_client_cert_cb(SSL_get_SSL_CTX(ssl), probe_client_cert_cb);
    SSL_set_post_handshake_auth(ssl, 1);
}

int ap_probe_client_ca_count(const SSL *ssl) {
    STACK_OF(X509_NAME) *names = SSL_get_client_CA_list(ssl);
    return names ? sk_X509_NAME_num(names) : -1;
}

static int name_text(const X509_NAME *name, char *buf, int len) {
    if (!name || len <= 0) return 0;
    buf[0] = 0;
    BIO *bio = BIO_new(BIO_s_mem());
    if (!bio) return 0;
    X509_NAME_print_ex(bio, name, 0, XN_FLAG_RFC2253 & ~ASN1_STRFLGS_ESC_MSB);
    int n = BIO_read(bio, buf, len - 1);
    BIO_free(bio);
    if (n < 0) n = 0;
    buf[n] = 0;
    return 1;
}

int ap_probe_client_ca_name(const SSL *ssl, int index, char *buf, int len) {
    STACK_OF(X509_NAME) *names = SSL_get_client_CA_list(ssl);
    if (!names || index < 0 || index >= sk_X509_NAME_num(names)) return 0;
    return name_text(sk_X509_NAME_value(names, index), buf, len);
}

int ap_probe_peer_subject(const SSL *ssl, char *buf, int len) {
    X509 *cert = SSL_get0_peer_certificate(ssl);
    return cert ? name_text(X509_get_subject_name(cert), buf, len) : 0;
}

int ap_probe_peer_issuer(const SSL *ssl, char *buf, int len) {
    X509 *cert = SSL_get0_peer_certificate(ssl);
    return cert ? name_text(X509_get_issuer_name(cert), buf, len) : 0;
}

int ap_probe_peer_not_after(const SSL *ssl, char *buf, int len) {
    X509 *cert = SSL_get0_peer_certificate(ssl);
    if (!cert || len <= 0) return 0;
    BIO *bio = BIO_new(BIO_s_mem());
    if (!bio) return 0;
    ASN1_TIME_print(bio, X509_get0_notAfter(cert));
    int n = BIO_read(bio, buf, len - 1);
    BIO_free(bio);
    if (n < 0) n = 0;
    buf[n] = 0;
    return 1;
}

int ap_probe_peer_pubkey_sha256(const SSL *ssl, unsigned char *out) {
    X509 *cert = SSL_get0_peer_certificate(ssl);
    if (!cert) return 0;
    unsigned char *der = NULL;
    int n = i2d_X509_PUBKEY(X509_get_X509_PUBKEY(cert), &der);
    if (n <= 0) return 0;
    unsigned int mdlen = 0;
    int ok = EVP_Digest(der, (size_t)n, out, &mdlen, EVP_sha256(), NULL);
    OPENSSL_free(der);
    return ok == 1 && mdlen == 32;
}

static int is_ip_literal(const char *host) {
    unsigned char tmp[16];
    return inet_pton(AF_INET, host, tmp) == 1 || inet_pton(AF_INET6, host, tmp) == 1;
}

int ap_probe_verify_peer(const SSL *ssl, const char *host, const char *ca_file, char *buf, int len) {
    if (len > 0) buf[0] = 0;
    X509 *leaf = SSL_get0_peer_certificate(ssl);
    if (!leaf) {
        snprintf(buf, (size_t)len, "the server sent no certificate");
        return -1;
    }
    X509_STORE *store = X509_STORE_new();
    X509_STORE_CTX *ctx = X509_STORE_CTX_new();
    int result = -1;
    if (!store || !ctx) goto done;
    X509_STORE_set_default_paths(store);
    if (ca_file && X509_STORE_load_file(store, ca_file) != 1) {
        snprintf(buf, (size_t)len, "cannot load CA file '%s'", ca_file);
        ERR_clear_error();
        goto done;
    }
    /* The chain as the server sent it (on a client it starts with the leaf); the rest are untrusted helpers. */
    if (X509_STORE_CTX_init(ctx, store, leaf, SSL_get_peer_cert_chain(ssl)) != 1) goto done;
    X509_STORE_CTX_set_default(ctx, "ssl_server");
    X509_VERIFY_PARAM *param = X509_STORE_CTX_get0_param(ctx);
    if (is_ip_literal(host))
        X509_VERIFY_PARAM_set1_ip_asc(param, host);
    else
        X509_VERIFY_PARAM_set1_host(param, host, 0);
    if (X509_verify_cert(ctx) == 1) {
        result = X509_V_OK;
    } else {
        result = X509_STORE_CTX_get_error(ctx);
        snprintf(buf, (size_t)len, "%s", X509_verify_cert_error_string(result));
    }
    ERR_clear_error();
done:
    if (ctx) X509_STORE_CTX_free(ctx);
    if (store) X509_STORE_free(store);
    return result;
}

int ap_probe_peer_matches_host(const SSL *ssl, const char *host) {
    X509 *cert = SSL_get0_peer_certificate(ssl);
    if (!cert) return 0;
    if (is_ip_literal(host)) return X509_check_ip_asc(cert, host, 0) == 1;
    return X509_check_host(cert, host, strlen(host), 0, NULL) == 1;
}
