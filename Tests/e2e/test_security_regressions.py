"""Regression tests for the defects an outside-in security campaign found. Each one
reproduces the attack as it was reported and failed before its fix."""
import hashlib
import socket
import threading
import time
import urllib.parse

import pytest

import harness
from harness import cred
from httpraw import RawConn, request_bytes
from test_access_control import header_values, query_of, raw_exchange


# ---------------------------------------------------------------------------------------------------------
# Cross-client response mixing through libcurl's connection pool
# ---------------------------------------------------------------------------------------------------------

class LateBytesBackend:
    """A raw HTTP/1.1 backend that, after answering in the mode a request asks for (`/head`, `/204`, `/304`,
    `/cl`, `/chunked`), writes a complete extra response on the same connection 300 ms later. Every other
    request gets its own numbered body, so a shifted answer is visible."""

    SMUGGLED = b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nSMUGGLED"

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.lock = threading.Lock()
        self.served = 0
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def _accept(self):
        while not self.stopped:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    d = c.recv(65536)
                    if not d:
                        return
                    buf += d
                head, _, buf = buf.partition(b"\r\n\r\n")
                method, target = head.split(b" ")[:2]
                path = target.split(b"?")[0]
                if not path.startswith(b"/"):
                    path = b"/" + path.split(b"/", 3)[-1]
                with self.lock:
                    self.served += 1
                    n = self.served
                late = True
                if method == b"HEAD" or path == b"/head":
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n")
                elif path == b"/204":
                    c.sendall(b"HTTP/1.1 204 No Content\r\n\r\n")
                elif path == b"/304":
                    c.sendall(b"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n")
                elif path == b"/cl":
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody")
                elif path == b"/chunked":
                    c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nbody\r\n0\r\n\r\n")
                else:
                    late = False
                    body = b"REAL-%04d" % n
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
                if late:
                    time.sleep(0.3)
                    c.sendall(self.SMUGGLED)
        except OSError:
            pass
        finally:
            c.close()

    def stop(self):
        self.stopped = True
        self.sock.close()


@pytest.fixture
def late_backend():
    b = LateBytesBackend()
    yield b
    b.stop()


@pytest.mark.parametrize("trigger", ["HEAD", "/204", "/304", "/cl", "/chunked"])
def test_late_bytes_on_a_pooled_connection_never_reach_another_client(proxy_factory, late_backend, trigger):
    # One event loop: every request shares one libcurl connection pool, as the attack needs.
    p = proxy_factory(proxy={"workers": 1})
    method = "HEAD" if trigger == "HEAD" else "GET"
    path = "/head" if trigger == "HEAD" else trigger
    r, _ = harness.fetch(p, method, late_backend.url + path)
    assert r.status in (200, 204, 304)
    time.sleep(0.6)  # the late bytes have arrived on the idle pooled connection
    # Several clients, interleaved on their own connections, each must get its own fresh answer.
    seen = []
    lock = threading.Lock()

    def client(i):
        for j in range(3):
            r, body = harness.fetch(p, "GET", late_backend.url + "/real?c=%d&j=%d" % (i, j))
            with lock:
                seen.append((r.status, body))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(seen) == 12
    bodies = [b for _, b in seen]
    assert b"SMUGGLED" not in bodies, bodies
    assert all(s == 200 and b.startswith(b"REAL-") for s, b in seen), seen
    assert len(set(bodies)) == 12, "a response was delivered twice: %r" % bodies


@pytest.mark.parametrize("trigger", ["HEAD", "/204", "/304"])
def test_next_client_inside_the_late_bytes_window_gets_its_own_answer(proxy_factory, late_backend, trigger):
    """The next client arrives 50 ms after the bodiless answer, before the late bytes (300 ms): a peek before
    reuse cannot see them yet, so such connections must not be pooled at all."""
    p = proxy_factory(proxy={"workers": 1})
    method = "HEAD" if trigger == "HEAD" else "GET"
    path = "/head" if trigger == "HEAD" else trigger
    for _ in range(3):
        harness.fetch(p, method, late_backend.url + path)
        time.sleep(0.05)
        r, body = harness.fetch(p, "GET", late_backend.url + "/victim")
        assert r.status == 200 and body.startswith(b"REAL-"), body
        time.sleep(0.4)
        r, body = harness.fetch(p, "GET", late_backend.url + "/victim2")
        assert r.status == 200 and body.startswith(b"REAL-"), body


@pytest.mark.parametrize("trigger", ["HEAD", "/status/204", "/status/304"])
def test_no_reuse_after_a_bodiless_answer_ends_with_that_request(proxy_factory, origin, trigger):
    """`FORBID_REUSE` (set for HEAD, and mid-transfer for 204/304) stays on a pooled libcurl easy handle unless the
    next request puts it back: the connection of the bodiless answer is closed, but the GETs that follow on the
    same handle pool theirs again (same upstream connection, seen by the origin as the same remote port)."""
    p = proxy_factory(proxy={"workers": 1})
    host = origin.url.split("//", 1)[1]
    method, path = ("HEAD", "/echo") if trigger == "HEAD" else ("GET", trigger)
    with RawConn(p.host, p.port) as c:
        ports = []
        for m, t in ((method, path), ("GET", "/echo?a"), ("GET", "/echo?b"), ("GET", "/echo?c")):
            c.send(request_bytes(m, origin.url + t, [("Host", host)]))
            r = c.read_response(method=m)
            assert r.status in (200, 204, 304), r
            ports.append(origin.request_log()[-1]["remote_port"])
    assert ports[1] != ports[0], ports  # the bodiless answer's connection was not reused
    assert ports[1] == ports[2] == ports[3], ports


def test_pipelined_requests_on_one_client_connection_stay_in_step(proxy_factory, late_backend):
    p = proxy_factory(proxy={"workers": 1})
    harness.fetch(p, "HEAD", late_backend.url + "/head")
    time.sleep(0.6)
    req = b"".join(b"GET " + late_backend.url.encode() + b"/real?k=%d HTTP/1.1\r\nHost: x\r\n\r\n" % k for k in range(3))
    out = raw_exchange(p, req + b"GET " + late_backend.url.encode() + b"/real HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert out.count(b"HTTP/1.1 200") == 4 and b"SMUGGLED" not in out, out


# ---------------------------------------------------------------------------------------------------------
# The /proxy endpoint: no Origin, JSONP
# ---------------------------------------------------------------------------------------------------------

APP = "http://maps.example.test:8080"


@pytest.fixture
def js_proxy(proxy_factory, origin):
    return proxy_factory(proxy={"allowed_origins": [APP]}, extra_config=cred("k", "api-key", origin.url, key="JSKEY"))


def test_proxy_endpoint_without_origin_or_referer_is_refused(js_proxy, origin, session):
    # What <script src> and <img> send: no Origin.
    r = session.get(js_proxy.url + "/proxy?" + origin.url + "/echo?f=json", timeout=10)
    harness.assert_error_json(r.status_code, r.headers.get, r.content, 403)
    r = session.get(js_proxy.url + "/proxy?" + origin.url + "/echo?f=json", timeout=10,
                    headers={"Referer": "https://evil.example/page.html"})
    harness.assert_error_json(r.status_code, r.headers.get, r.content, 403)
    assert not [e for e in origin.request_log() if "/echo" in e["target"]]


def test_proxy_endpoint_accepts_an_allowed_referer(js_proxy, origin, session):
    r = session.get(js_proxy.url + "/proxy?" + origin.url + "/echo?f=json", timeout=10,
                    headers={"Referer": APP + "/app/index.html?x=1"})
    assert r.status_code == 200, r.text[:300]
    assert query_of(r.json())["token"] == ["JSKEY"]


def test_proxy_endpoint_refuses_jsonp_unless_the_credential_allows_it(js_proxy, proxy_factory, origin, session):
    for q in ["callback=steal", "f=json&callback=steal", "f=json&%63allback=steal"]:
        r = session.get(js_proxy.url + "/proxy?" + origin.url + "/echo?" + q, timeout=10, headers={"Origin": APP})
        err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 403)
        assert "JSONP" in err["message"]
    assert not [e for e in origin.request_log() if "/echo" in e["target"]]
    p = proxy_factory(proxy={"allowed_origins": [APP]},
                      extra_config=cred("k", "api-key", origin.url, key="JSKEY", allow_jsonp=True))
    r = session.get(p.url + "/proxy?" + origin.url + "/echo?f=json&callback=cb", timeout=10, headers={"Origin": APP})
    assert r.status_code == 200


def test_jsonp_permission_is_not_borrowed_through_dot_segments(proxy_factory, origin, session):
    p = proxy_factory(proxy={"allowed_origins": [APP]}, extra_config=(
        cred("public", "api-key", origin.url + "/public", key="PUBLICKEY", allow_jsonp=True)
        + cred("secure", "api-key", origin.url + "/secure", key="SECUREKEY")))
    r = session.get(p.url + "/proxy?" + origin.url + "/public/q?f=json&callback=cb", timeout=10, headers={"Origin": APP})
    assert r.status_code == 404  # allowed: the origin's own answer for /public/q
    for path in ["/public/../secure/q", "/public/%2e%2e/secure/q"]:
        r = session.get(p.url + "/proxy?" + origin.url + path + "?f=json&callback=steal", timeout=10,
                        headers={"Origin": APP})
        harness.assert_error_json(r.status_code, r.headers.get, r.content, 403)
    assert not [e for e in origin.request_log() if "steal" in e["target"]]


# ---------------------------------------------------------------------------------------------------------
# Dot-segments and encoded slashes must not carry a token out of its prefix
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path,outcome", [
    ("/arcgis/rest/info", "token"),
    ("/arcgis/./rest/info", "token"),
    # The raw text is outside the prefix: a front end routing on it would serve /other. No token either way.
    ("/other/../arcgis/rest", "none"),
    ("/other/%2e%2e/arcgis/rest", "none"),
    ("/arcgis/../other", "none"),
    ("/arcgis/%2e%2e/other", "none"),
    ("/arcgis/%2E%2E/other", "none"),
    ("/arcgis/.%2e/other", "none"),
    ("/arcgis/%2E%2E%2Fother", 400),
    ("/arcgis%2f..%2fother", 400),
    ("/arcgis/..;/other", 400),
    ("/arcgis//../other", 400),
])
def test_dot_segments_leave_the_prefix_without_the_token(proxy_factory, origin, path, outcome):
    p = proxy_factory(extra_config=cred("k", "api-key", origin.url + "/arcgis", key="PREFIXKEY"))
    out = raw_exchange(p, b"GET " + origin.url.encode() + path.encode() + b"?f=json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    entries = [e for e in origin.request_log() if "f=json" in e["target"]]
    if outcome == 400:
        assert out.startswith(b"HTTP/1.1 400"), out[:300]
        assert not entries
        return
    assert len(entries) == 1, (out[:300], entries)
    got = query_of(entries[0]).get("token")
    assert got == (["PREFIXKEY"] if outcome == "token" else None), (path, entries[0]["target"])


def test_ambiguous_paths_to_unmatched_hosts_pass_through(proxy_factory, origin):
    # Only hosts with credentials get the 400: the proxy does not police other sites' URLs.
    p = proxy_factory(extra_config=cred("k", "api-key", "http://other.invalid/arcgis", key="K"))
    out = raw_exchange(p, b"GET " + origin.url.encode() + b"/a/..;/b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 404"), out[:200]  # the origin's own answer


# ---------------------------------------------------------------------------------------------------------
# Percent signs in host names
# ---------------------------------------------------------------------------------------------------------

def test_fragment_in_request_target_is_rejected(proxy, origin):
    out = raw_exchange(proxy, b"GET " + origin.url.encode() + b"/other/x#/../../json HTTP/1.1\r\nHost: x\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400"), out[:300]
    assert not origin.request_log()


@pytest.mark.parametrize("authority", ["127%2e0%2e0%2e1:{port}", "127.0.0.%31:{port}", "%6cocalhost:{port}"])
def test_percent_in_host_is_rejected(proxy, origin, authority):
    a = authority.format(port=origin.port if hasattr(origin, "port") else origin.authority.split(":")[1])
    out = raw_exchange(proxy, b"GET http://" + a.encode() + b"/json HTTP/1.1\r\nHost: x\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400"), out[:300]
    assert not origin.request_log()
    out = raw_exchange(proxy, b"CONNECT " + a.encode() + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400"), out[:300]


# ---------------------------------------------------------------------------------------------------------
# A refused CONNECT closes the connection
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("why", ["port", "unmatched"])
def test_refused_connect_closes_before_pipelined_bytes_are_read(proxy_factory, origin, why):
    proxy = {"unmatched": "deny"} if why == "unmatched" else {}
    p = proxy_factory(proxy=proxy, extra_config=cred("k", "api-key", origin.url + "/echo", key="K"))
    target = b"127.0.0.1:25" if why == "port" else b"127.0.0.1:443"
    out = raw_exchange(p, b"CONNECT " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n"
                       b"GET " + origin.url.encode() + b"/echo?smuggled=1 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 403"), out[:300]
    assert b"connection: close" in out.lower()
    assert out.count(b"HTTP/1.1 ") == 1, out
    assert not [e for e in origin.request_log() if "smuggled" in e["target"]]


# ---------------------------------------------------------------------------------------------------------
# Encoded form field names
# ---------------------------------------------------------------------------------------------------------

def test_percent_encoded_token_field_is_the_clients_token(proxy_factory, origin, session):
    p = proxy_factory(extra_config=cred("k", "api-key", origin.url, key="PROXYKEY"))
    body = b"%74oken=CLIENTTOKEN&f=json"
    r = session.post(origin.url + "/echo", data=body, proxies=p.proxies, timeout=10,
                     headers={"Content-Type": "application/x-www-form-urlencoded"})
    info = r.json()
    # Left alone: the upstream gets the client's one token, not two.
    assert info["body_sha256"] == hashlib.sha256(body).hexdigest(), info
    assert "token" not in query_of(info)
    p2 = proxy_factory(extra_config=cred("k", "api-key", origin.url, key="PROXYKEY", override_client_token=True))
    r = session.post(origin.url + "/echo", data=body, proxies=p2.proxies, timeout=10,
                     headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.json()["body_sha256"] == hashlib.sha256(b"f=json&token=PROXYKEY").hexdigest(), r.json()
