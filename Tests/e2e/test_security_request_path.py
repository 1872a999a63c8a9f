"""Reproducers for the request-path findings of issue 25's outside probe: a POST sent twice after a kept-alive
upstream connection died unanswered, the injected key leaking through response headers, allow_clients narrowed
by a reload not reaching kept-alive connections, %u dot segments, TRACE echoing the key, and a client's
Connection list stripping what the proxy injects. Each failed on the build the probe tested."""
import json
import socket
import threading
import time
import urllib.parse

import pytest

import harness
from harness import cred


# ---------------------------------------------------------------------------------------------------------
# 1. A non-idempotent request is never sent twice
# ---------------------------------------------------------------------------------------------------------

class DropsSecondRequest(harness.RawBackend):
    """An upstream that answers the first request on each connection (kept alive), then reads the second one to
    its end and closes without a byte of answer: the shape of a server that processed a request and died, or of
    an idle-timeout close that raced the request. `requests` records every request it read."""

    def __init__(self):
        super().__init__(respond=self._answer)

    def _answer(self, req):
        with self.lock:
            nth = sum(1 for r in self.requests if r.conn == req.conn)
        if nth == 2:
            return [harness.RawBackend.CLOSE]
        reply = b"answer-%d-%d" % (req.conn, nth)
        return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(reply) + reply

    def requests_for(self, marker):
        with self.lock:
            return [r for r in self.requests if marker in r.target]


@pytest.fixture
def drops_second():
    b = DropsSecondRequest()
    yield b
    b.stop()


def _two_on_one_connection(p, backend, method, body):
    """A first GET that leaves a pooled upstream connection, then `method` on the same client connection."""
    conn = harness.proxied_conn(p)
    try:
        conn.request("GET", backend.url + "/warm")
        r = conn.getresponse()
        assert r.status == 200 and r.read().startswith(b"answer-")
        conn.request(method, backend.url + "/second?op=%s" % method, body=body,
                     headers={"Content-Type": "application/x-www-form-urlencoded"} if body is not None else {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


@pytest.mark.parametrize("body", [b"features=%5B%7B%7D%5D&f=json", None], ids=["with-body", "empty"])
@pytest.mark.parametrize("method", ["POST", "PATCH"])
def test_a_non_idempotent_request_is_not_sent_again_after_the_connection_died(proxy_factory, drops_second,
                                                                              method, body):
    p = proxy_factory(proxy={"workers": 1})
    if body is None:
        body = b""
    status, text = _two_on_one_connection(p, drops_second, method, body)
    seen = drops_second.requests_for("/second")
    assert len(seen) == 1, "the %s reached the server %d times: %r" % (method, len(seen), seen)
    if status == 200:
        # libcurl never puts a bodyless non-idempotent request on a reused connection: it had a new one.
        assert body == b"" and seen[0].conn != drops_second.requests_for("/warm")[0].conn, (status, text, seen)
        return
    assert status == 502, (status, text)
    err = json.loads(text)
    assert "not sent again" in json.dumps(err), err
    assert method in err["error"]["message"], err


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_an_idempotent_request_still_goes_again_on_a_new_connection(proxy_factory, drops_second, method):
    p = proxy_factory(proxy={"workers": 1})
    status, text = _two_on_one_connection(p, drops_second, method, b"x=1" if method == "PUT" else None)
    seen = drops_second.requests_for("/second")
    assert status == 200, (status, text)
    assert text.startswith(b"answer-")
    assert len(seen) == 2 and seen[0].conn != seen[1].conn, seen


# ---------------------------------------------------------------------------------------------------------
# 2. The injected key never leaves in a response header, in any encoding
# ---------------------------------------------------------------------------------------------------------

KEY = "AAPK.SECRET-key_42"


def _redirect_kinds(key, other):
    """(name, header lines) for the redirects the probe followed with Python requests: each echoes the request
    URL, key included, the way a real server does."""
    q = urllib.parse.quote
    own = "/arcgis/rest/services?f=json&token=" + key
    return [
        ("returnurl", ["Location: %s/login?ReturnUrl=%s" % (other, q(own, safe=""))]),
        ("next-double", ["Location: %s/login?next=%s" % (other, q(q("http://gis" + own, safe=""), safe=""))]),
        ("redirect-uri", ["Location: %s/authorize?redirect_uri=%s" % (other, q("http://gis" + own, safe=""))]),
        ("amp-escaped", ["Location: %s/next?f=json&amp;token=%s" % (other, key)]),
        ("semicolon", ["Location: %s/next;token=%s" % (other, key)]),
        ("hex-everything", ["Location: %s/next?t=%s" % (other, "".join("%%%02X" % b for b in key.encode()))]),
        ("link", ["Location: %s/plain" % other, "Link: <%s>; rel=canonical" % ("http://gis" + own)]),
        ("set-cookie", ["Location: %s/plain" % other, "Set-Cookie: last=%s; Path=/" % q(key, safe="")]),
    ]


@pytest.mark.parametrize("kind", [k for k, _ in _redirect_kinds("K", "http://x")])
def test_a_redirect_never_carries_the_injected_key_to_the_client_or_the_next_host(proxy_factory, session, kind):
    other = harness.RawBackend()  # the host a client follows the redirect to (no credential there)
    lines = dict(_redirect_kinds(KEY, other.url))[kind]

    def respond(req):
        return ("HTTP/1.1 302 Found\r\n" + "".join(l + "\r\n" for l in lines)
                + "Content-Length: 0\r\n\r\n").encode()

    gis = harness.RawBackend(respond)
    try:
        p = proxy_factory(extra_config=cred("svc", "api-key", gis.url + "/arcgis", key=KEY))
        r = session.get(gis.url + "/arcgis/rest/services?f=json", proxies=p.proxies, allow_redirects=False,
                        timeout=10)
        assert r.status_code == 302
        assert gis.requests and ("token=" + KEY) in gis.requests[0].target  # it was injected upstream
        head = "\r\n".join("%s: %s" % kv for kv in r.raw.headers.items())
        for form in (KEY, urllib.parse.quote(KEY, safe=""), urllib.parse.quote(urllib.parse.quote(KEY, safe=""), safe=""),
                     "".join("%%%02X" % b for b in KEY.encode())):
            assert form not in head, (kind, head)
        # Followed as a client does: the next host never sees the key either.
        r = session.get(gis.url + "/arcgis/rest/services?f=json", proxies=p.proxies, timeout=10)
        seen = b"".join(other.received) + b"".join(h.encode() for h in r.headers.values())
        assert KEY.encode() not in seen and urllib.parse.quote(KEY, safe="").encode() not in seen, (kind, seen[:600])
    finally:
        gis.stop()
        other.stop()


# ---------------------------------------------------------------------------------------------------------
# 5. A reload that narrows allow_clients reaches connections already open
# ---------------------------------------------------------------------------------------------------------

def _rewrite_and_reload(p, text):
    from test_reload import rewrite, sighup
    rewrite(p, text)
    sighup(p, "configuration reloaded")


def _connected_from(source, p):
    s = socket.socket()
    s.settimeout(10)
    s.bind((source, 0))
    s.connect((p.host, p.port))
    return s


def _get_on(s, url):
    """One GET on the raw connection `s` -> the bytes of the answer (head and Content-Length body)."""
    u = urllib.parse.urlsplit(url)
    s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (url, u.netloc)).encode())
    return _read_answer(s)


def _read_answer(s):
    try:
        data = harness.read_head(s)
        head, _, rest = data.partition(b"\r\n\r\n")
        n = 0
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                n = int(v)
        while len(rest) < n:
            d = s.recv(65536)
            if not d:
                break
            rest += d
        return head + b"\r\n\r\n" + rest
    except (ConnectionResetError, BrokenPipeError):
        return b""


def _closed_by_peer(s, timeout=5.0):
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_a_reload_that_narrows_allow_clients_closes_kept_alive_connections_and_tunnels(proxy_factory, origin):
    echo = harness.RawBackend()  # a CONNECT target
    try:
        p = proxy_factory(proxy={"allow_clients": ["127.0.0.0/8"], "connect_ports": [echo.port]},
                          extra_config=cred("k", "api-key", origin.url + "/echo", key="RELOAD-KEY"))
        kept = _connected_from("127.0.0.2", p)
        assert _get_on(kept, origin.url + "/echo").startswith(b"HTTP/1.1 200")
        tunnel = _connected_from("127.0.0.2", p)
        tunnel.sendall(("CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (echo.port, echo.port)).encode())
        assert tunnel.recv(4096).startswith(b"HTTP/1.1 200")
        still = _connected_from("127.0.0.1", p)
        assert _get_on(still, origin.url + "/echo").startswith(b"HTTP/1.1 200")
        before = len(origin.request_log())

        _rewrite_and_reload(p, p.config_text.replace('allow_clients = ["127.0.0.0/8"]', 'allow_clients = ["127.0.0.1/32"]'))

        # The idle kept-alive connection and the tunnel from the address no longer allowed are closed ...
        assert _closed_by_peer(kept), "the kept-alive connection from 127.0.0.2 stayed open"
        assert _closed_by_peer(tunnel), "the tunnel from 127.0.0.2 stayed open"
        # ... nothing more from there reaches the service with the key ...
        try:
            answer = _get_on(kept, origin.url + "/echo")
        except OSError:
            answer = b""
        assert not answer.startswith(b"HTTP/1.1 200"), answer[:200]
        assert len(origin.request_log()) == before
        # ... and the allowed client carries on, on its kept-alive connection.
        assert _get_on(still, origin.url + "/echo").startswith(b"HTTP/1.1 200")
        assert any("no longer in [proxy] allow_clients" in l for l in p.log_lines())
        for s in (kept, tunnel, still):
            s.close()
    finally:
        echo.stop()


def test_a_request_in_flight_across_the_narrowing_reload_finishes_and_the_next_gets_403(proxy_factory):
    release = threading.Event()

    def respond(req):
        if "slow" in req.target:
            release.wait(10)
        return b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

    slow = harness.RawBackend(respond)
    try:
        p = proxy_factory(proxy={"allow_clients": ["127.0.0.0/8"]})
        s = _connected_from("127.0.0.2", p)
        s.sendall(("GET %s/slow HTTP/1.1\r\nHost: %s\r\n\r\n" % (slow.url, slow.authority)).encode())
        deadline = time.monotonic() + 5
        while not slow.requests and time.monotonic() < deadline:
            time.sleep(0.02)
        _rewrite_and_reload(p, p.config_text.replace('allow_clients = ["127.0.0.0/8"]', 'allow_clients = ["127.0.0.1/32"]'))
        release.set()
        data = _read_answer(s)
        assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"ok"), data
        second = _get_on(s, slow.url + "/again")
        assert second.startswith(b"HTTP/1.1 403"), second[:300]
        assert b"allow_clients" in second
        assert not any("again" in r.target for r in slow.requests)
        s.close()
    finally:
        release.set()
        slow.stop()


# ---------------------------------------------------------------------------------------------------------
# 6. %u dot segments and other ambiguous escapes never carry the key
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/arcgis/%u002e%u002e/admin", "/arcgis/%U002E%U002E/admin", "/arcgis/%252e%252e/admin",
                                  "/arcgis/..%3b/admin", "/arcgis/..%00/admin", "/arcgis/%zz/x",
                                  # double encoding with a mix of escapes (found by the URL fuzz target)
                                  "/arcgis/%252%65%252%65/admin", "/arcgis/%25%32%65%25%32%65/admin"])
def test_ambiguous_escapes_get_400_on_a_host_with_credentials(proxy_factory, path):
    gis = harness.RawBackend()
    try:
        p = proxy_factory(extra_config=cred("svc", "api-key", gis.url + "/arcgis", key="PATH-KEY"))
        conn = harness.proxied_conn(p)
        conn.putrequest("GET", gis.url + path, skip_host=False, skip_accept_encoding=True)
        conn.endheaders()
        r = conn.getresponse()
        body = r.read()
        conn.close()
        assert r.status == 400, (r.status, body)
        assert not gis.requests, gis.requests
    finally:
        gis.stop()


# ---------------------------------------------------------------------------------------------------------
# 9. TRACE to a host with credentials is refused; 10. a client's Connection list keeps what the proxy injects
# ---------------------------------------------------------------------------------------------------------

def _echoing(req):
    """A server that answers TRACE as RFC 9110 says: the request it received, as the body."""
    if req.method == "TRACE":
        echoed = ("TRACE %s HTTP/1.1\r\n" % req.target + "".join("%s: %s\r\n" % kv for kv in req.headers)).encode()
        return b"HTTP/1.1 200 OK\r\nContent-Type: message/http\r\nContent-Length: %d\r\n\r\n" % len(echoed) + echoed
    body = json.dumps({"target": req.target, "headers": req.headers}).encode()
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body


@pytest.mark.parametrize("placement", ["param", "header"])
def test_trace_to_a_host_with_credentials_is_refused(proxy_factory, placement):
    gis = harness.RawBackend(_echoing)
    try:
        p = proxy_factory(extra_config=cred("svc", "api-key", gis.url + "/arcgis", key="TRACE-KEY",
                                            token_placement=placement))
        r, body = harness.fetch(p, "TRACE", gis.url + "/arcgis/rest/services")
        assert r.status == 405, (r.status, body)
        assert b"TRACE-KEY" not in body
        assert not gis.requests
        # Elsewhere TRACE is relayed as before.
        other = harness.RawBackend(_echoing)
        try:
            r, body = harness.fetch(p, "TRACE", other.url + "/x")
            assert r.status == 200 and body.startswith(b"TRACE /x")
        finally:
            other.stop()
    finally:
        gis.stop()


@pytest.mark.parametrize("listed", ["X-Esri-Authorization", "keep-alive, x-esri-authorization, Referer"])
def test_a_client_connection_list_does_not_strip_the_injected_header(proxy_factory, listed):
    gis = harness.RawBackend(_echoing)
    try:
        p = proxy_factory(extra_config=cred("svc", "api-key", gis.url + "/arcgis", key="HDR-KEY",
                                            token_placement="header"))
        for _ in range(3):
            r, body = harness.fetch(p, "GET", gis.url + "/arcgis/rest/services?f=json",
                                    headers={"Connection": listed})
            assert r.status == 200, body
        for req in gis.requests:
            assert req.header("X-Esri-Authorization") == ["Bearer HDR-KEY"], req.headers
        assert "rejected" not in p.log_text()
    finally:
        gis.stop()


# ---------------------------------------------------------------------------------------------------------
# 11. A reload that changes only the CA bundle's contents does not reuse connections verified with the old one
# ---------------------------------------------------------------------------------------------------------

def test_a_ca_bundle_changed_in_place_is_not_bypassed_by_pooled_connections(proxy_factory, tls_cert, tmp_path):
    import subprocess
    from httpraw import RawConn
    other_key, other_cert = str(tmp_path / "other.key"), str(tmp_path / "other.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "2",
                    "-subj", "/CN=unrelated", "-keyout", other_key, "-out", other_cert,
                    "-addext", "basicConstraints=critical,CA:TRUE"], check=True, capture_output=True, timeout=60)
    bundle = tmp_path / "bundle.pem"
    bundle.write_bytes(open(tls_cert[0], "rb").read())
    backend = harness.RawBackend(tls=tls_cert)
    try:
        trust = cred("t", "server-trust", "https://" + backend.authority, ca_file=str(bundle))
        # A password credential too under libcurl transfers (http_client = "libcurl"): the pooled connection is
        # then libcurl's, matched by its TLS settings.
        p = proxy_factory(extra_config=cred("k", "api-key", backend.url, key="K", upgrade_to_https=True) + trust)
        with RawConn(p.host, p.port, timeout=10) as c:
            c.send(("GET %s/before HTTP/1.1\r\nHost: x\r\n\r\n" % backend.url).encode())
            r = c.read_response()
            assert (r.status, r.body) == (200, b"GET /before?token=K 0")
            # The compromised CA is removed from the bundle: same path, other contents.
            bundle.write_bytes(open(other_cert, "rb").read())
            _rewrite_and_reload(p, p.config_text + "\n# bundle rotated\n")
            c.send(("GET %s/after HTTP/1.1\r\nHost: x\r\n\r\n" % backend.url).encode())
            r = c.read_response()
        harness.assert_error_json(r.status, r.get, r.body, 502)
        assert [q.target for q in backend.requests] == ["/before?token=K"]
    finally:
        backend.stop()
