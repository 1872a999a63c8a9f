#ifndef CAUTHPROXY_TLS_PROBE_H
#define CAUTHPROXY_TLS_PROBE_H

/* Helpers for `authproxy doctor`'s TLS probe (Sources/AuthProxyCore/Doctor/TLSProbe.swift): OpenSSL macros and
   STACK_OF() walks that Swift cannot express. */

struct ssl_st;
struct x509_st;
struct X509_name_st;

/// SSL_set_tlsext_host_name (a macro).
int ap_probe_set_sni(struct ssl_st *ssl, const char *host);
/// Counts the server's client-certificate requests into *counter (the client-certificate callback, which sends
/// no certificate) and enables TLS 1.3 post-handshake authentication, so a later request is seen too.
void ap_probe_watch_client_cert(struct ssl_st *ssl, int *counter);
/// The CA names of the server's CertificateRequest: their number (-1: none received), and name i as RFC 2253 text.
int ap_probe_client_ca_count(const struct ssl_st *ssl);
int ap_probe_client_ca_name(const struct ssl_st *ssl, int index, char *buf, int len);
/// Subject / issuer (RFC 2253) and notAfter of the peer's certificate; 0 when there is none.
int ap_probe_peer_subject(const struct ssl_st *ssl, char *buf, int len);
int ap_probe_peer_issuer(const struct ssl_st *ssl, char *buf, int len);
int ap_probe_peer_not_after(const struct ssl_st *ssl, char *buf, int len);
/// SHA-256 of the peer's DER SubjectPublicKeyInfo (what CURLOPT_PINNEDPUBLICKEY compares) into out[32]; 1 on success.
int ap_probe_peer_pubkey_sha256(const struct ssl_st *ssl, unsigned char *out);
/// Verifies the peer's chain for `host` (a name or an IP literal) against the system CAs, plus the PEM bundle
/// `ca_file` when not NULL, as a TLS client would. Returns X509_V_OK (0) or the X509_V_ERR code, -1 when it
/// could not run (no certificate, unreadable ca_file); the reason goes to buf.
int ap_probe_verify_peer(const struct ssl_st *ssl, const char *host, const char *ca_file, char *buf, int len);
/// Whether the peer's certificate is valid for `host` (name or IP literal): 1 yes, 0 no.
int ap_probe_peer_matches_host(const struct ssl_st *ssl, const char *host);

#endif
