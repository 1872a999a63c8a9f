"""HTTP forwarding semantics: methods, bodies, framing, headers, keep-alive."""

import hashlib
import json

import pytest

import harness
from httpraw import RawConn, request_bytes
from origin import COOKIES, GZIP_BODY, JSON_DOC, iter_pattern, pattern, pattern_sha256

HOP_REQUEST_HEADERS = {"connection", "proxy-connection", "keep-alive", "proxy-authorization",
                       "te", "trailer", "upgrade", "transfer-encoding"}


def echo_headers(e, name):
    return [v for k, v in e["headers"] if k.lower() == name.lower()]


# ---------------------------------------------------------------------------
# methods and bodies
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("method,with_body", [
    ("GET", False), ("POST", True), ("PUT", True), ("DELETE", False),
    ("PATCH", True), ("OPTIONS", False), ("DELETE", True),
])
def test_methods_fixed_length(proxy, origin, method, with_body):
    body = pattern(100_001) if with_body else None
    r, data = harness.fetch(proxy, method, origin.url + "/echo?m=" + method, body=body)
    assert r.status == 200, data
    e = json.loads(data)
    assert e["method"] == method
    assert e["path"] == "/echo" and e["query"] == "m=" + method
    n = len(body) if body else 0
    assert e["body_length"] == n
    assert e["body_sha256"] == hashlib.sha256(body or b"").hexdigest()


def test_head_has_no_body_and_keeps_length(proxy, origin):
    with RawConn(proxy.host, proxy.port) as c:
        c.send(request_bytes("HEAD", origin.url + "/bytes?n=12345", [("Host", origin.authority)]))
        r = c.read_response(method="HEAD")
        assert r.status == 200
        assert r.get("Content-Length") == "12345", r.headers
        # the next response on the same connection must parse cleanly
        c.send(request_bytes("GET", origin.url + "/json", [("Host", origin.authority)]))
        r2 = c.read_response()
        assert r2.status == 200 and r2.json() == JSON_DOC
        assert not c.buf, "stray bytes after response: %r" % bytes(c.buf[:100])


def test_204_304_framing_on_keepalive_connection(proxy, origin):
    with RawConn(proxy.host, proxy.port) as c:
        for path, status in (("/status/204", 204), ("/status/304", 304), ("/status/204", 204)):
            c.send(request_bytes("GET", origin.url + path, [("Host", origin.authority)]))
            r = c.read_response()
            assert r.status == status, r
            assert not r.has("Transfer-Encoding"), r.headers
            assert r.get("Content-Length", "0") == "0", r.headers
            assert r.get("X-Status") == str(status)
        c.send(request_bytes("GET", origin.url + "/json", [("Host", origin.authority)]))
        r = c.read_response()
        assert r.status == 200 and r.json() == JSON_DOC, r
        c.settimeout(0.5)
        assert not c.buf
        try:
            extra = c.sock.recv(100)
        except OSError:
            extra = b""
        assert extra == b"", "stray bytes after 204/304 responses: %r" % extra


def test_other_statuses_relayed(proxy, origin):
    for code in (201, 404, 418, 500, 503):
        r, data = harness.fetch(proxy, "GET", origin.url + "/status/%d" % code)
        assert r.status == code
        assert json.loads(data) == {"status": code}, "origin's body must be relayed, not replaced"


def test_chunked_request_body(proxy, origin):
    chunks = [b"a" * 1, b"b" * 4096, pattern(70_000), b"z" * 17]
    body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    with RawConn(proxy.host, proxy.port) as c:
        c.send(request_bytes("POST", origin.url + "/upload",
                             [("Host", origin.authority), ("Transfer-Encoding", "chunked"),
                              ("Content-Type", "application/octet-stream")], body))
        r = c.read_response()
        assert r.status == 200, r
        e = r.json()
        whole = b"".join(chunks)
        assert e["size"] == len(whole) and e["sha256"] == hashlib.sha256(whole).hexdigest()
        # connection still usable afterwards
        c.send(request_bytes("GET", origin.url + "/json", [("Host", origin.authority)]))
        assert c.read_response().json() == JSON_DOC


def test_chunked_request_body_with_extensions_and_trailers(proxy, origin):
    body = b"5;name=value\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"
    with RawConn(proxy.host, proxy.port) as c:
        c.send(request_bytes("PUT", origin.url + "/upload",
                             [("Host", origin.authority), ("Transfer-Encoding", "chunked")], body))
        r = c.read_response()
        assert r.status == 200, r
        assert r.json()["sha256"] == hashlib.sha256(b"hello world").hexdigest()
        c.send(request_bytes("GET", origin.url + "/json", [("Host", origin.authority)]))
        assert c.read_response().json() == JSON_DOC


def test_streamed_generator_upload_with_requests(proxy, origin, session):
    n = 3 * 1024 * 1024 + 7
    gen = (bytes(c) for c in iter_pattern(n))  # no length known -> chunked request
    r = session.put(origin.url + "/upload", data=gen, proxies=proxy.proxies, timeout=30)
    assert r.status_code == 200
    assert r.json()["size"] == n and r.json()["sha256"] == pattern_sha256(n)


@pytest.mark.parametrize("path", ["/bytes", "/chunked", "/close"])
def test_response_body_integrity(proxy, origin, session, path):
    n = 20 * 1024 * 1024 + 12345
    r = session.get(origin.url + "%s?n=%d" % (path, n), proxies=proxy.proxies, stream=True,
                    timeout=30)
    assert r.status_code == 200
    h = hashlib.sha256()
    total = 0
    for c in r.raw.stream(1 << 20, decode_content=False):
        h.update(c)
        total += len(c)
    assert total == n and h.hexdigest() == pattern_sha256(n)


def test_unknown_length_response_is_chunked_for_http11(proxy, origin):
    n = 300_000
    with RawConn(proxy.host, proxy.port) as c:
        c.send(request_bytes("GET", origin.url + "/close?n=%d" % n, [("Host", origin.authority)]))
        r = c.read_response()
        assert r.status == 200
        assert (r.get("Transfer-Encoding") or "").lower() == "chunked", r.headers
        assert r.body == pattern(n)
        # and the client connection survives (the upstream one was close-delimited)
        c.send(request_bytes("GET", origin.url + "/json", [("Host", origin.authority)]))
        r2 = c.read_response()
        assert r2.status == 200 and r2.json() == JSON_DOC


# ---------------------------------------------------------------------------
# HTTP/1.0 clients, Expect
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("path,n", [("/json", None), ("/chunked", 200_000), ("/bytes", 5000)])
def test_http10_client_gets_close_semantics(proxy, origin, path, n):
    url = origin.url + path + ("?n=%d" % n if n else "")
    with RawConn(proxy.host, proxy.port) as c:
        c.send(request_bytes("GET", url, [("Host", origin.authority)], version="HTTP/1.0"))
        version, status, reason, headers = c.read_head()
        from httpraw import Response
        r = Response(version, status, reason, headers)
        assert status == 200
        assert "chunked" not in (r.get("Transfer-Encoding") or "").lower(), \
            "HTTP/1.0 clients must never get chunked responses: %r" % headers
        cl = r.get("Content-Length")
        body = c.read_exact(int(cl)) if cl is not None else c.read_to_eof()
        if n is None:
            assert json.loads(body) == JSON_DOC
        else:
            assert body == pattern(n)
        assert c.closed_by_peer(timeout=3), "proxy must close an HTTP/1.0 connection after the response"


def test_expect_100_continue(proxy, origin):
    body = b"0123456789abcdef"
    with RawConn(proxy.host, proxy.port, timeout=5) as c:
        c.send(request_bytes("POST", origin.url + "/upload",
                             [("Host", origin.authority), ("Content-Length", str(len(body))),
                              ("Expect", "100-continue")]))
        version, status, reason, headers = c.read_head()
        assert status == 100, "expected 100 Continue before sending the body, got %s %s" % (status, reason)
        c.send(body)
        r = c.read_response()
        assert r.status == 200, r
        assert r.json()["size"] == len(body)
        assert r.json()["sha256"] == hashlib.sha256(body).hexdigest()


# ---------------------------------------------------------------------------
# headers
# ---------------------------------------------------------------------------

def test_hop_by_hop_request_headers_stripped_and_via_appended(proxy, origin):
    hdrs = [
        ("Host", origin.authority),
        ("X-First", "1"),
        ("Connection", "keep-alive, X-Hop"),
        ("X-Hop", "must-not-pass"),
        ("Proxy-Connection", "keep-alive"),
        ("Keep-Alive", "timeout=5"),
        ("Proxy-Authorization", "Basic dXNlcjpwYXNz"),
        ("TE", "trailers"),
        ("Trailer", "X-Trail"),
        ("Upgrade", "example/1"),
        ("X-Dup", "a"),
        ("Via", "1.0 client-side"),
        ("X-Dup", "b"),
        ("X-Last", "z"),
    ]
    with RawConn(proxy.host, proxy.port) as c:
        c.send(request_bytes("GET", origin.url + "/echo", hdrs))
        r = c.read_response()
    assert r.status == 200, r
    e = r.json()
    names = [k.lower() for k, v in e["headers"]]
    for bad in ("x-hop", "proxy-connection", "keep-alive", "proxy-authorization", "te",
                "trailer", "upgrade", "transfer-encoding"):
        assert bad not in names, "%s forwarded upstream: %r" % (bad, e["headers"])
    for v in echo_headers(e, "Connection"):
        assert "x-hop" not in v.lower(), e["headers"]
    assert harness.joined(echo_headers(e, "Via")) == "1.0 client-side, 1.1 authproxy"
    e2e = [(k, v) for k, v in e["headers"] if k.lower() in ("x-first", "x-dup", "x-last")]
    assert e2e == [("X-First", "1"), ("X-Dup", "a"), ("X-Dup", "b"), ("X-Last", "z")], e["headers"]


def test_hop_by_hop_response_headers_stripped_and_via_appended(proxy, origin):
    conn = harness.proxied_conn(proxy)
    try:
        conn.request("GET", origin.url + "/hop")
        r = conn.getresponse()
        body = r.read()
        assert r.status == 200 and body == b"hop\n"
        names = [k.lower() for k, v in r.getheaders()]
        for bad in ("x-foo", "x-bar", "keep-alive", "proxy-connection", "trailer", "upgrade",
                    "proxy-authorization", "te"):
            assert bad not in names, "%s relayed to client: %r" % (bad, r.getheaders())
        for v in r.msg.get_all("Connection") or []:
            assert "x-foo" not in v.lower() and "x-bar" not in v.lower(), r.getheaders()
        assert r.getheader("X-End-To-End") == "kept"
        assert harness.joined(r.msg.get_all("Via")) == "1.1 origin, 1.1 authproxy"
        # connection still usable (Connection: X-Foo did not mean close)
        conn.request("GET", origin.url + "/json")
        r2 = conn.getresponse()
        assert json.loads(r2.read()) == JSON_DOC
    finally:
        conn.close()


def test_via_added_to_plain_response(proxy, origin):
    r, _ = harness.fetch(proxy, "GET", origin.url + "/json")
    assert r.msg.get_all("Via") == ["1.1 authproxy"]


def test_host_header_is_url_authority_and_origin_form(proxy, origin):
    with RawConn(proxy.host, proxy.port) as c:
        c.send(request_bytes("GET", origin.url + "/echo?a=1&b=%20x&c",
                             [("Host", "wrong.example:1234"), ("User-Agent", "e2e")]))
        r = c.read_response()
    assert r.status == 200, r
    e = r.json()
    assert echo_headers(e, "Host") == [origin.authority], e["headers"]
    assert e["target"] == "/echo?a=1&b=%20x&c", "upstream request must be origin-form with query intact"
    assert echo_headers(e, "User-Agent") == ["e2e"]


def test_repeated_set_cookie(proxy, origin):
    r, body = harness.fetch(proxy, "GET", origin.url + "/cookies")
    assert r.status == 200 and body == b"cookies\n"
    assert r.msg.get_all("Set-Cookie") == COOKIES


def test_gzip_relayed_untouched(proxy, origin):
    r, body = harness.fetch(proxy, "GET", origin.url + "/gzip",
                            headers={"Accept-Encoding": "gzip"})
    assert r.status == 200
    assert r.getheader("Content-Encoding") == "gzip"
    assert body == GZIP_BODY, "compressed bytes must be relayed unchanged"
    cl = r.getheader("Content-Length")
    assert cl is None or int(cl) == len(GZIP_BODY)


# ---------------------------------------------------------------------------
# keep-alive and pipelining
# ---------------------------------------------------------------------------

def test_keepalive_reuse_both_sides(proxy, origin):
    conn = harness.proxied_conn(proxy)
    try:
        ports, counters, locals_ = [], [], []
        for i in range(6):
            conn.request("GET", origin.url + "/echo?i=%d" % i)
            r = conn.getresponse()
            e = json.loads(r.read())
            assert r.status == 200 and e["query"] == "i=%d" % i
            assert not r.will_close, "proxy closed a keep-alive client connection: %r" % r.getheaders()
            ports.append(e["remote_port"])
            counters.append(e["conn_requests"])
            locals_.append(conn.sock.getsockname())
        assert len(set(locals_)) == 1, "client connection was not reused"
        assert len(set(ports)) == 1, "upstream connection not reused (origin saw ports %r)" % ports
        assert counters == sorted(counters) and counters[-1] - counters[0] == 5, counters
        assert origin.stats()["connections"] == 1, origin.stats()
    finally:
        conn.close()


def test_pipelined_requests(proxy, origin):
    reqs = (request_bytes("GET", origin.url + "/echo?i=1", [("Host", origin.authority)]) +
            request_bytes("POST", origin.url + "/echo?i=2",
                          [("Host", origin.authority), ("Content-Length", "3")], b"abc") +
            request_bytes("GET", origin.url + "/bytes?n=100000", [("Host", origin.authority)]) +
            request_bytes("GET", origin.url + "/echo?i=4", [("Host", origin.authority)]))
    with RawConn(proxy.host, proxy.port) as c:
        c.send(reqs)
        r1, r2, r3, r4 = (c.read_response() for _ in range(4))
    assert [r.status for r in (r1, r2, r3, r4)] == [200] * 4
    assert r1.json()["query"] == "i=1"
    assert r2.json()["query"] == "i=2" and r2.json()["body_length"] == 3
    assert r3.body == pattern(100_000)
    assert r4.json()["query"] == "i=4"


def test_many_sequential_connections(proxy, origin):
    for i in range(30):
        r, data = harness.fetch(proxy, "GET", origin.url + "/json")
        assert r.status == 200 and json.loads(data) == JSON_DOC


def test_concurrent_clients(proxy, origin):
    import concurrent.futures as cf

    def one(i):
        n = 500_000 + i
        r, data = harness.fetch(proxy, "GET", origin.url + "/bytes?n=%d" % n, timeout=30)
        return r.status, len(data), hashlib.sha256(data).hexdigest() == pattern_sha256(n)

    with cf.ThreadPoolExecutor(16) as ex:
        results = list(ex.map(one, range(32)))
    for i, (status, size, ok) in enumerate(results):
        assert status == 200 and size == 500_000 + i and ok


def test_ipv6_origin_literal(proxy, origin_factory):
    if not harness.ipv6_available():
        pytest.skip("::1 not available")
    o6 = origin_factory(host="::1")
    r, data = harness.fetch(proxy, "GET", o6.url + "/echo")
    assert r.status == 200, data
    e = json.loads(data)
    assert echo_headers(e, "Host") == [o6.authority]
