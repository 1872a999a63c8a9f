"""The proxy's own HTTP/1.1 client (upstreams without a network credential, `[proxy] http_client`; https over a
TLS connection libcurl makes):
what it writes on the wire, connection reuse, the retry on a pooled connection that died, responses arriving in
pieces, and the switch back to libcurl. The rest of the suite runs through it too (it is the default)."""
import os
import subprocess
import threading
import time

import pytest

import harness
from harness import RawBackend, ScriptedUpstream
from httpraw import RawConn, wait_until


def get(proxy, url, headers=()):
    with RawConn(proxy.host, proxy.port, timeout=10) as c:
        lines = ["GET %s HTTP/1.1" % url, "Host: ignored.example"] + ["%s: %s" % h for h in headers]
        c.send(("\r\n".join(lines) + "\r\n\r\n").encode())
        return c.read_response()


def test_request_head_on_the_wire(proxy):
    backend = RawBackend()
    try:
        r = get(proxy, backend.url + "/a/b.json?x=1&y=%20z", [("Accept", "application/json"), ("X-Empty", ""),
                                                              ("Connection", "close, X-Hop"), ("X-Hop", "1")])
        assert r.status == 200, r.body
        raw = bytes(backend.received[0])
        head, _, _ = raw.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        assert lines[0] == b"GET /a/b.json?x=1&y=%20z HTTP/1.1"
        names = [l.split(b":", 1)[0].lower() for l in lines[1:]]
        assert names.count(b"host") == 1 and lines[1] == b"Host: " + backend.authority.encode()
        assert b"Accept: application/json" in lines
        assert b"X-Empty:" in lines  # an empty value is kept, not dropped
        assert b"x-hop" not in names and b"connection" not in names  # hop-by-hop fields are the proxy's own
        assert any(l.startswith(b"Via: 1.1 ") for l in lines)
        assert b"expect" not in names and b"content-length" not in names and b"transfer-encoding" not in names
    finally:
        backend.stop()


class Relay:
    """The proxy and a raw backend for one upstream scheme. "http": plain. "https": the backend speaks TLS and the
    proxy reaches it with upgrade_to_https (the client still asks for http://, an api key is injected), so the
    own client runs over a TLS connection libcurl made; `suffix` is what the proxy adds to a bare path."""

    def __init__(self, scheme, request, tls_cert):
        self.scheme = scheme
        self._request = request
        self._cert = tls_cert
        self.suffix = "?token=TLS-KEY" if scheme == "https" else ""
        self.proxy = None

    def start(self, respond=None, **proxy):
        """`proxy`: [proxy] settings over the defaults."""
        tls = self._cert if self.scheme == "https" else None
        backend = RawBackend(respond=respond, tls=tls)
        if tls:
            self.proxy = tls_proxy(self._request.getfixturevalue("proxy_factory"), backend, tls[0], **proxy)
        elif proxy:
            self.proxy = self._request.getfixturevalue("proxy_factory")(proxy=proxy)
        else:
            self.proxy = self._request.getfixturevalue("proxy")
        return backend

    def body(self, path):
        return ("GET %s%s 0" % (path, self.suffix)).encode()


@pytest.fixture(params=["http", "https"])
def relay(request, tls_cert):
    return Relay(request.param, request, tls_cert)


def tls_proxy(proxy_factory, backend, cert, **proxy):
    """A proxy sending the client's http://127.0.0.1:PORT requests to the backend over https (upgrade_to_https),
    trusting its self-signed certificate, with an api key injected."""
    return proxy_factory(proxy=proxy or None, extra_config=harness.cred("k", "api-key", backend.url, key="TLS-KEY",
                                                                        upgrade_to_https=True)
                         + harness.cred("t", "server-trust", "https://" + backend.authority, ca_file=cert))


def test_one_upstream_connection_carries_sequential_requests(relay):
    backend = relay.start()
    try:
        for i in range(5):
            r = get(relay.proxy, backend.url + "/seq/%d" % i)
            assert (r.status, r.body) == (200, relay.body("/seq/%d" % i)), r.body
        # Different client connections, one loop or another: at most one upstream connection per event loop (for
        # https, one TLS handshake each).
        assert 1 <= len(backend.received) <= 4, len(backend.received)
        assert sum(bytes(d).count(b"GET /seq/") for d in backend.received) == 5
    finally:
        backend.stop()


def test_a_pooled_connection_that_died_is_retried_once_on_a_new_one(relay):
    """The upstream reads the second request on a kept-alive connection and closes it without an answer (as a server
    whose keep-alive timer fired just then; over TLS without a close_notify): the proxy sends the request again on a
    new connection."""
    calls = []
    lock = threading.Lock()

    def respond(req):
        with lock:
            calls.append(req.target)
            n = len(calls)
        if n == 2:
            return [RawBackend.CLOSE]
        return RawBackend.default_response(req)

    backend = relay.start(respond)
    try:
        with RawConn(relay.proxy.host, relay.proxy.port, timeout=10) as c:
            for path in ("/first", "/second"):
                c.send(("GET %s%s HTTP/1.1\r\nHost: x\r\n\r\n" % (backend.url, path)).encode())
                r = c.read_response()
                assert (r.status, r.body) == (200, relay.body(path)), r.body
        assert calls == [t + relay.suffix for t in ("/first", "/second", "/second")]
        assert len(backend.received) == 2
    finally:
        backend.stop()


def test_a_new_connection_that_closes_without_an_answer_is_a_clear_502(relay):
    # upstream_retries = 0: what the own client does by itself (test_retries.py has the proxy's retries).
    backend = relay.start(lambda req: [RawBackend.CLOSE], upstream_retries=0)
    try:
        r = get(relay.proxy, backend.url + "/nothing")
        err = harness.assert_error_json(r.status, r.get, r.body, 502)
        assert "closed the connection without a response" in err["message"], err
        assert len(backend.received) == 1  # not resent by the client: the connection was new
    finally:
        backend.stop()


@pytest.mark.parametrize("pieces", [
    [b"HTTP/1.1 200 OK\r\nContent-", 0.05, b"Length: 11\r\n\r\nhello", 0.05, b" world"],
    [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r", 0.05, b"\nhello\r\n6\r\n wor", 0.05,
     b"ld\r\n0\r\n", 0.05, b"\r\n"],
    [b"HTTP/1.1 100 Continue\r\n\r\n", 0.05, b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world"],
])
def test_a_response_arriving_in_pieces_is_relayed_whole(relay, pieces):
    backend = relay.start(lambda req: pieces if req.target.startswith("/drip") else RawBackend.default_response(req))
    try:
        with RawConn(relay.proxy.host, relay.proxy.port, timeout=10) as c:
            c.send(("GET %s/drip HTTP/1.1\r\nHost: x\r\n\r\n" % backend.url).encode())
            r = c.read_response()
            assert (r.status, r.body) == (200, b"hello world")
            c.send(("GET %s/next HTTP/1.1\r\nHost: x\r\n\r\n" % backend.url).encode())
            r = c.read_response()
            assert (r.status, r.body) == (200, relay.body("/next"))
    finally:
        backend.stop()


def test_connection_close_from_the_upstream_is_not_reused(proxy):
    backend = RawBackend(respond=lambda req: b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")
    try:
        for _ in range(3):
            r = get(proxy, backend.url + "/c")
            assert (r.status, r.body) == (200, b"ok")
        assert len(backend.received) == 3
    finally:
        backend.stop()


def test_libcurl_can_carry_plain_http_instead(proxy_factory):
    backend = RawBackend()
    try:
        p = proxy_factory(proxy={"http_client": "libcurl"})
        r = get(p, backend.url + "/via-libcurl")
        assert (r.status, r.body) == (200, b"GET /via-libcurl 0")
        head = bytes(backend.received[0]).partition(b"\r\n\r\n")[0]
        assert head.startswith(b"GET /via-libcurl HTTP/1.1\r\n")
    finally:
        backend.stop()


def test_an_unknown_http_client_is_refused_by_check(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[proxy]\nlisten = ["127.0.0.1:3999"]\nhttp_client = "curl"\n')
    out = subprocess.run([harness.proxy_bin(), "check", "--config", str(cfg)], capture_output=True, text=True)
    assert out.returncode != 0
    assert "http_client" in out.stderr + out.stdout, out


def test_check_names_the_http_client(tmp_path):
    cfg = tmp_path / "ok.toml"
    cfg.write_text('[proxy]\nlisten = ["127.0.0.1:3999"]\nstate_dir = "%s"\n' % (tmp_path / "state"))
    out = subprocess.run([harness.proxy_bin(), "check", "--config", str(cfg)], capture_output=True, text=True)
    assert out.returncode == 0, out
    assert "http_client:              native" in out.stdout, out.stdout


def test_a_head_refused_after_arriving_in_pieces_leaves_the_proxy_serving(proxy):
    """The refusal (a cancel from inside the head handling) comes while the reader works on bytes held from an
    earlier read: the client gets its 502 and its connection goes on."""
    pieces = [b"HTTP/1.1 200 OK\r\nContent-Length : 5", 0.05, b"\r\nX: y\r\n\r\nhello"]
    backend = RawBackend(respond=lambda req: pieces if req.target == "/bad" else RawBackend.default_response(req))
    try:
        with RawConn(proxy.host, proxy.port, timeout=10) as c:
            c.send(("GET %s/bad HTTP/1.1\r\nHost: x\r\n\r\n" % backend.url).encode())
            r = c.read_response()
            err = harness.assert_error_json(r.status, r.get, r.body, 502)
            assert "invalid response" in err["message"], err
            c.send(("GET %s/next HTTP/1.1\r\nHost: x\r\n\r\n" % backend.url).encode())
            r = c.read_response()
            assert (r.status, r.body) == (200, b"GET /next 0")
        assert proxy.alive()
    finally:
        backend.stop()


def answer_before_the_body(heads, stall=0.5):
    """A `ScriptedUpstream` behaviour: answer each request as soon as its head is in, before reading its body (as
    nginx's `return 200` or a 413 does), then after `stall` seconds read and discard the body and keep the connection
    for the next request."""
    def fill(c, buf, enough):
        while not enough(buf):
            d = c.recv(65536)
            if not d:
                return None
            buf += d
        return buf

    def behaviour(c):
        buf = b""
        while True:
            buf = fill(c, buf, lambda b: b"\r\n\r\n" in b)
            if buf is None:
                return
            head, _, buf = buf.partition(b"\r\n\r\n")
            heads.append(head)
            fields = dict(l.partition(b":")[::2] for l in head.split(b"\r\n")[1:])
            length = int({k.strip().lower(): v for k, v in fields.items()}.get(b"content-length", 0))
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nearly")
            time.sleep(stall)
            while len(buf) < length:  # dropped as it comes: one read held at a time, whatever the body's size
                length -= len(buf)
                buf = c.recv(65536)
                if not buf:
                    return
            buf = buf[length:]
    return behaviour


def test_an_answer_before_the_upload_ended_closes_the_client_connection_cleanly(proxy):
    """Found by the soak (2 MiB uploads to nginx's `return 200`): the upstream answered before the body was all
    forwarded, the proxy relayed the answer as keep-alive, then closed the connection while discarding the rest of
    the body; the client's next request on it got 'Remote end closed connection without response'. The answer
    must say `Connection: close`, and a client that reconnects (as http.client does after it) loses nothing.

    The first upload is 32 MiB into an upstream with a 16 KiB receive buffer: far more than the proxy's 256 KiB body
    buffer and the sockets between can hold, so the body is certainly still being read when the answer comes. The
    next ones are the soak's 2 MiB, which may or may not be read whole by then: either way nothing may be lost."""
    import http.client
    heads = []
    backend = ScriptedUpstream(answer_before_the_body(heads), rcvbuf=16384)
    big = b"u" * (32 * 1024 * 1024)
    body = big[:2 * 1024 * 1024]
    try:
        with RawConn(proxy.host, proxy.port, timeout=10) as c:
            head = "POST %s/upload HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (backend.url, len(big))
            sender = threading.Thread(target=lambda: c.sock.sendall(head.encode() + big), daemon=True)
            sender.start()
            r = c.read_response()
            assert (r.status, r.body) == (200, b"early"), r
            assert (r.get("connection") or "").lower() == "close", r.headers
            sender.join(30)
        conn = http.client.HTTPConnection(proxy.host, proxy.port, timeout=10)
        try:
            for i in range(4):
                conn.request("POST", backend.url + "/upload/%d" % i, body=body,
                             headers={"Content-Type": "application/octet-stream"})
                resp = conn.getresponse()
                assert (resp.status, resp.read()) == (200, b"early")
            conn.request("GET", backend.url + "/after")
            resp = conn.getresponse()
            assert (resp.status, resp.read()) == (200, b"early")
        finally:
            conn.close()
        assert b"GET /after HTTP/1.1" in heads[-1]
    finally:
        backend.close()


def test_the_rest_of_an_upload_answered_early_is_read_while_it_keeps_coming(proxy):
    """A client on a slow link goes on sending an upload the upstream has already answered (with `Connection:
    close`). The proxy reads and drops that input while it keeps coming, instead of closing 2 s after the answer:
    the client would then meet a reset in the middle of its upload and lose the answer it has not read yet
    (http.client, like most clients, reads only after sending)."""
    heads = []
    backend = ScriptedUpstream(answer_before_the_body(heads, stall=1), rcvbuf=16384)
    pieces = 14
    try:
        with RawConn(proxy.host, proxy.port, timeout=15) as c:
            c.send("POST %s/upload HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (backend.url, pieces * 65536))
            for _ in range(pieces):  # ~4.5 s: longer than the 2-s linger
                c.send(b"s" * 65536)
                time.sleep(0.33)
            r = c.read_response()
            assert (r.status, r.body) == (200, b"early"), r
            assert (r.get("connection") or "").lower() == "close", r.headers
    finally:
        backend.close()


# ---------------------------------------------------------------------------------------------------------
# https upstreams (also above, through `relay`): libcurl makes the TLS connection, the own client speaks HTTP/1.1
# ---------------------------------------------------------------------------------------------------------

def test_libcurl_can_carry_https_instead(proxy_factory, tls_cert):
    backend = RawBackend(tls=tls_cert)
    try:
        p = tls_proxy(proxy_factory, backend, tls_cert[0], http_client="libcurl")
        r = get(p, backend.url + "/via-libcurl")
        assert (r.status, r.body) == (200, b"GET /via-libcurl?token=TLS-KEY 0")
        head = bytes(backend.received[0]).partition(b"\r\n\r\n")[0]
        assert head.startswith(b"GET /via-libcurl?token=TLS-KEY HTTP/1.1\r\n")
    finally:
        backend.stop()


def test_a_tls_response_delimited_by_a_close_without_close_notify_is_complete(proxy_factory, tls_cert):
    """No length, no chunks: the body ends when the server closes TCP, here without a TLS close_notify (as many
    servers do). That is the end of the body, as on plain http, not a failure."""
    body = b"x" * 40000 + b"end"
    backend = RawBackend(respond=lambda req: [b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n" + body,
                                              RawBackend.CLOSE], tls=tls_cert)
    try:
        p = tls_proxy(proxy_factory, backend, tls_cert[0])
        r = get(p, backend.url + "/until-close")
        assert (r.status, r.body) == (200, body)
    finally:
        backend.stop()


def test_new_https_connections_leak_no_descriptor(proxy_factory, tls_cert):
    """The backend closes every connection, so each https request needs a new one: the Dialer connects it and hands
    the socket to libcurl for TLS, which closes it in the end. After 200 of them the proxy holds no more descriptors
    than before (one given away twice, or never closed, would show here)."""
    backend = RawBackend(respond=lambda req: [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                                              RawBackend.CLOSE], tls=tls_cert)
    try:
        p = tls_proxy(proxy_factory, backend, tls_cert[0])

        def descriptors():
            return len(os.listdir("/proc/%d/fd" % p.pid))

        for i in range(5):
            assert get(p, backend.url + "/warm/%d" % i).status == 200
        time.sleep(0.5)
        before = descriptors()
        for i in range(200):
            r = get(p, backend.url + "/new/%d" % i)
            assert (r.status, r.body) == (200, b"ok"), (i, r.status, r.body[:200])
        assert wait_until(lambda: descriptors() <= before + 2, 5), (before, descriptors())
    finally:
        backend.stop()
