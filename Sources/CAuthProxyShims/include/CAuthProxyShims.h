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
CURLcode ap_easy_getinfo_long(CURL *easy, CURLINFO info, long *value);
CURLcode ap_easy_getinfo_ptr(CURL *easy, CURLINFO info, void **value);

CURLMcode ap_multi_setopt_long(CURLM *multi, CURLMoption option, long value);
CURLMcode ap_multi_setopt_ptr(CURLM *multi, CURLMoption option, const void *value);
CURLMcode ap_multi_setopt_socket_cb(CURLM *multi, int (*cb)(CURL *, curl_socket_t, int, void *, void *));
CURLMcode ap_multi_setopt_timer_cb(CURLM *multi, int (*cb)(CURLM *, long, void *));

/// Initialises OpenSSL without its atexit handler (which can crash at exit), then libcurl.
int ap_global_init(void);

struct sockaddr;
/// accept4(2) with SOCK_NONBLOCK | SOCK_CLOEXEC (accept4 needs _GNU_SOURCE, which Swift's Glibc lacks).
int ap_accept_nonblock(int fd, struct sockaddr *addr, unsigned int *len);

/// Reads the libcurl version string and feature bits.
const char *ap_curl_version(void);

#endif
