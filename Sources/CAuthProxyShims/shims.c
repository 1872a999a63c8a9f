#define _GNU_SOURCE
#include <sys/socket.h>
#include "CAuthProxyShims.h"
#include <openssl/crypto.h>
#include <openssl/ssl.h>

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
CURLcode ap_easy_getinfo_long(CURL *easy, CURLINFO info, long *value) { return curl_easy_getinfo(easy, info, value); }
CURLcode ap_easy_getinfo_ptr(CURL *easy, CURLINFO info, void **value) { return curl_easy_getinfo(easy, info, value); }

CURLMcode ap_multi_setopt_long(CURLM *multi, CURLMoption option, long value) { return curl_multi_setopt(multi, option, value); }
CURLMcode ap_multi_setopt_ptr(CURLM *multi, CURLMoption option, const void *value) { return curl_multi_setopt(multi, option, value); }
CURLMcode ap_multi_setopt_socket_cb(CURLM *multi, int (*cb)(CURL *, curl_socket_t, int, void *, void *)) { return curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, cb); }
CURLMcode ap_multi_setopt_timer_cb(CURLM *multi, int (*cb)(CURLM *, long, void *)) { return curl_multi_setopt(multi, CURLMOPT_TIMERFUNCTION, cb); }

int ap_global_init(void) {
    OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL);
    OPENSSL_init_ssl(0, NULL);
    return (int)curl_global_init(CURL_GLOBAL_DEFAULT);
}

const char *ap_curl_version(void) { return curl_version(); }

int ap_accept_nonblock(int fd, struct sockaddr *addr, unsigned int *len) {
    return accept4(fd, addr, (socklen_t *)len, SOCK_NONBLOCK | SOCK_CLOEXEC);
}
