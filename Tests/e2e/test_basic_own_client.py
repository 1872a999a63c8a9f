"""A `password` credential with `schemes = ["basic"]` (the GeoServer case) on the proxy's own HTTP/1.1 client (issue
38): `Authorization: Basic` sent at once over the own client's pooled keep-alive connections (over https, or over
http with `allow_basic_over_http`), the same answers and diagnostics as with libcurl (`http_client = "libcurl"`
keeps libcurl and serves as the reference), and WebSocket handshakes to a Basic-only host (`ws://`, and `wss://`
inside an intercepted CONNECT) carrying the header. The password and its Basic value appear in no log line, no
span and no answer to the client.

Upstreams: Apache httpd with Basic and Digest (Tests/e2e/netauth), a raw TLS backend recording the bytes it
receives (harness.RawBackend), and a WebSocket echo server that checks Basic (wsecho.EchoServer)."""
import base64
import json
import re
import socket
import ssl

import pytest

import harness
from harness import RawBackend, cred
from httpraw import RawConn, wait_until
from netauth.fixtures import netauth_rig  # noqa: F401  (fixture)
from otlp_receiver import OTLPReceiver
from test_credentials import via

websockets = pytest.importorskip("websockets", minversion="15")
from websockets.datastructures import Headers  # noqa: E402
from websockets.http11 import Response  # noqa: E402
from websockets.sync.client import connect as ws_connect  # noqa: E402

from wsecho import PATH, EchoServer  # noqa: E402

T = 30
USER, PASSWORD = "alice", "alice-pw"
BASIC = "Basic " + base64.b64encode(b"alice:alice-pw").decode()
B64 = BASIC.split(" ", 1)[1]
MODES = ["native", "libcurl"]


def basic_cred(match, password=PASSWORD, **fields):
    return cred("geo", "password", match, username=USER, password=password, schemes=["basic"], **fields)


def no_secret_in(text, *secrets):
    for s in (PASSWORD, B64) + secrets:
        assert s not in text, "a secret in: %r" % text[max(0, text.find(s) - 200):text.find(s) + 200]


@pytest.fixture
def receiver():
    r = OTLPReceiver().start()
    yield r
    r.stop()
    assert not r.errors, r.errors


def otel_env(receiver):
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_SERVICE_NAME": "authproxy-e2e"}


def attempt_clients(receiver, count):
    """The `authproxy.upstream.client` of the first `count` upstream attempts' spans, once exported."""
    spans = receiver.wait_for(
        lambda sp: len([s for s in sp if s["kind"] == "SPAN_KIND_CLIENT"]) >= count, timeout=15)
    return [s["attributes"].get("authproxy.upstream.client") for s in spans if s["kind"] == "SPAN_KIND_CLIENT"]


def span_texts(receiver):
    out = []
    for s in receiver.spans():
        out += [s["name"], s["status"]["message"]]
        out += ["%s=%s" % (k, json.dumps(v)) for k, v in s["attributes"].items()]
        out += ["%s=%s" % (k, json.dumps(v)) for e in s["events"] for k, v in e["attributes"].items()]
    return "\n".join(out)


def requests_in(data):
    """The request heads in the bytes one upstream connection received."""
    return [h for h in bytes(data).split(b"\r\n\r\n") if re.match(rb"^(GET|POST|HEAD) ", h)]


def authorizations(head):
    return [l.split(b":", 1)[1].strip().decode() for l in head.split(b"\r\n")[1:]
            if l.lower().startswith(b"authorization:")]


# ---------------------------------------------------------------------------------------------------------
# https: the own client's pooled connection carries Basic on every request
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_basic_over_https_on_one_pooled_connection(proxy_factory, tls_cert, receiver, mode):
    """The client asks for http://, upgrade_to_https takes it to the TLS backend: every request carries Basic once,
    all over one kept-alive upstream connection; the attempt's span names the client (own unless libcurl was
    chosen)."""
    backend = RawBackend(tls=tls_cert)
    try:
        p = proxy_factory(
            proxy={"http_client": mode}, env=otel_env(receiver),
            extra_config=basic_cred(backend.url, upgrade_to_https=True)
            + cred("trust", "server-trust", "https://" + backend.authority, ca_file=tls_cert[0]))
        with RawConn(p.host, p.port, timeout=T) as c:
            for i in range(5):
                c.send(("GET %s/geoserver/wms?n=%d HTTP/1.1\r\nHost: x\r\n\r\n" % (backend.url, i)).encode())
                r = c.read_response()
                assert (r.status, r.body) == (200, b"GET /geoserver/wms?n=%d 0" % i), r
                no_secret_in(repr(r.headers) + r.body.decode("latin-1"))
        assert len(backend.received) == 1, len(backend.received)
        heads = requests_in(backend.received[0])
        assert len(heads) == 5, heads
        assert all(authorizations(h) == [BASIC] for h in heads), heads
        expected = "own" if mode == "native" else "libcurl"
        assert attempt_clients(receiver, 5)[:5] == [expected] * 5
        assert p.wait_for_log(lambda l: "access" in l and "credential=geo " in l + " ", timeout=10)
        no_secret_in(p.log_text())
        no_secret_in(span_texts(receiver))
    finally:
        backend.stop()


@pytest.mark.parametrize("mode", MODES)
def test_an_answer_echoing_the_basic_value_is_masked(proxy_factory, tls_cert, mode):
    """A server that echoes the login (a debug page, a misconfigured header) does not hand it to the client."""
    def respond(req):
        body = ("you sent %s" % B64).encode()
        return (b"HTTP/1.1 200 OK\r\nX-Seen: " + BASIC.encode() + b"\r\nContent-Length: %d\r\n\r\n" % len(body)
                + body)
    backend = RawBackend(respond=respond, tls=tls_cert)
    try:
        p = proxy_factory(
            proxy={"http_client": mode},
            extra_config=basic_cred(backend.url, upgrade_to_https=True)
            + cred("trust", "server-trust", "https://" + backend.authority, ca_file=tls_cert[0]))
        with RawConn(p.host, p.port, timeout=T) as c:
            c.send(("GET %s/echo HTTP/1.1\r\nHost: x\r\n\r\n" % backend.url).encode())
            r = c.read_response()
        assert r.status == 200 and r.get("x-seen"), r.headers
        assert B64 not in r.get("x-seen"), r.headers
        assert authorizations(requests_in(backend.received[0])[0]) == [BASIC]
    finally:
        backend.stop()


# ---------------------------------------------------------------------------------------------------------
# http with allow_basic_over_http, against Apache: right and wrong password, the same as libcurl
# ---------------------------------------------------------------------------------------------------------

def apache_lines(rig, marker):
    return wait_until(lambda: [l for l in rig.apache.access_log_lines() if marker in l], 10) or []


def outcome(p, session, url):
    r = via(p, session, "GET", url)
    # A Digest nonce is new each time.
    challenge = re.sub(r'nonce="[^"]*"', 'nonce="-"', r.headers.get("WWW-Authenticate") or "")
    return r.status_code, challenge, r.headers.get("X-Remote-User")


def warnings(p):
    """The proxy's network-credential warnings: (message, credential, cause), the time and the URL left out."""
    assert p.wait_for_log(lambda l: "network credential" in l, timeout=10)
    out = []
    for l in p.log_lines():
        if "network credential" in l:
            kv = harness.parse_kv(l)
            message = re.match(r"^\S+ \w+ (.*?) \w+=", l).group(1)
            out.append((message, kv.get("credential"), kv.get("cause")))
    return out


def test_basic_over_http_right_password_keeps_the_connection(proxy_factory, netauth_rig, session):
    rig = netauth_rig
    p = proxy_factory(proxy={"http_client": "native"},
                      extra_config=basic_cred(rig.basic.url, allow_basic_over_http=True))
    with RawConn(p.host, p.port, timeout=T) as c:
        for i in range(4):
            c.send(("GET %ssecret?m=keepalive-own&n=%d HTTP/1.1\r\nHost: x\r\n\r\n" % (rig.basic.url, i)).encode())
            r = c.read_response()
            assert r.status == 200, r
            assert r.get("x-remote-user") == USER
    def four():
        found = [l for l in rig.apache.access_log_lines() if "m=keepalive-own" in l]
        return found if len(found) >= 4 else None
    lines = wait_until(four, 10)
    assert lines and len(lines) == 4, lines
    # One upstream connection (Apache's client port) carried the four, as keep-alive requests 0..3, each with
    # Basic sent at once (no 401 first).
    assert len({l.split()[2] for l in lines}) == 1, lines
    assert sorted(re.search(r" k=(\d+) ", l).group(1) for l in lines) == ["0", "1", "2", "3"], lines
    assert all('auth="%s"' % BASIC in l and '" 200 ' in l for l in lines), lines
    no_secret_in(p.log_text())


@pytest.mark.parametrize("case", ["wrong-password", "no-basic-over-http", "digest-only-server"])
def test_refusals_read_as_they_did_with_libcurl(proxy_factory, netauth_rig, session, case):
    """The client's answer and the proxy's warning are the same on the own client as with libcurl (the reference:
    `http_client = "libcurl"` keeps libcurl)."""
    rig = netauth_rig
    results = {}
    for mode in MODES:
        marker = "m=%s-%s" % (case, mode)
        if case == "wrong-password":
            c, url = basic_cred(rig.basic.url, password="WRONG-pw", allow_basic_over_http=True), rig.basic.url
        elif case == "no-basic-over-http":
            c, url = basic_cred(rig.basic.url), rig.basic.url
        else:
            c, url = basic_cred(rig.digest.url, allow_basic_over_http=True), rig.digest.url
        p = proxy_factory(proxy={"http_client": mode}, extra_config=c)
        answer = outcome(p, session, url + "secret?" + marker)
        lines = apache_lines(rig, marker)
        assert lines, marker
        sent = [re.search(r'auth="([^"]*)"', l).group(1) for l in lines]
        results[mode] = (answer, sent, warnings(p))
        no_secret_in(p.log_text(), "WRONG-pw")
    assert results["native"] == results["libcurl"], results
    (status, challenge, user), sent, warned = results["native"]
    assert status == 401 and challenge and user is None
    if case == "wrong-password":
        assert sent == ["Basic " + base64.b64encode(b"alice:WRONG-pw").decode()]
        assert warned == [("upstream refused the network credential", "geo", None)], warned
    elif case == "no-basic-over-http":
        assert sent == ["-"] or sent == [""], sent
        assert len(warned) == 1 and "allow_basic_over_http" in warned[0][2], warned
    else:
        assert challenge.startswith("Digest"), challenge
        assert len(warned) == 1 and warned[0][2] == "the server offers digest; the credential's schemes are basic", \
            warned


def test_a_clients_own_authorization_wins(proxy_factory, netauth_rig, session):
    """As with libcurl: the client's own login goes as it is, the credential's stays out of that request."""
    rig = netauth_rig
    p = proxy_factory(proxy={"http_client": "native"},
                      extra_config=basic_cred(rig.basic.url, allow_basic_over_http=True))
    r = via(p, session, "GET", rig.basic.url + "secret?m=client-own", auth=("bob", "bob-pw"))
    assert (r.status_code, r.headers.get("X-Remote-User")) == (200, "bob")
    lines = apache_lines(rig, "m=client-own")
    assert lines and all("auth=\"Basic %s\"" % base64.b64encode(b"bob:bob-pw").decode() in l for l in lines), lines


# ---------------------------------------------------------------------------------------------------------
# WebSocket to a Basic-only host: ws:// and wss:// inside an intercepted CONNECT
# ---------------------------------------------------------------------------------------------------------

class BasicEchoServer(EchoServer):
    """The WebSocket echo server behind Basic: a handshake without the right `Authorization` gets 401."""

    def _process_request(self, connection, request):
        if "upgrade" in request.headers.get("Connection", "").lower() and \
                request.headers.get("Authorization") != BASIC:
            with self.lock:
                self.handshakes.append((request.path, dict(request.headers.raw_items()), "401"))
            return Response(401, "Unauthorized", Headers([("WWW-Authenticate", 'Basic realm="geo"'),
                                                          ("Content-Length", "0")]), b"")
        return super()._process_request(connection, request)

    def authorizations(self):
        with self.lock:
            return [h.get("Authorization") for _, h, _ in self.handshakes]


@pytest.fixture
def ws_upstream():
    s = BasicEchoServer().start()
    yield s
    s.stop()


@pytest.mark.parametrize("mode", MODES)
def test_ws_handshake_to_a_basic_only_host_carries_the_login(proxy_factory, ws_upstream, mode):
    s = ws_upstream
    p = proxy_factory(proxy={"http_client": mode},
                      extra_config=basic_cred("http://127.0.0.1:%d/" % s.port, allow_basic_over_http=True))
    with ws_connect(s.url("ws"), proxy=p.url, open_timeout=T) as ws:
        ws.send("hello geoserver")
        assert ws.recv(timeout=T) == "hello geoserver"
        answer = str(ws.response.headers)
    assert s.authorizations() == [BASIC] and s.outcomes() == ["ok"], s.handshakes
    no_secret_in(answer)
    assert p.wait_for_log(lambda l: "upgrade=websocket" in l and "status=101" in l, timeout=10)
    no_secret_in(p.log_text())


def test_ws_basic_not_sent_over_http_without_the_setting(proxy_factory, ws_upstream):
    """Without allow_basic_over_http the handshake goes without Basic, as a request would: the server's 401."""
    s = ws_upstream
    p = proxy_factory(extra_config=basic_cred("http://127.0.0.1:%d/" % s.port))
    with pytest.raises(websockets.exceptions.InvalidStatus) as e:
        with ws_connect(s.url("ws"), proxy=p.url, open_timeout=T):
            pass
    assert e.value.response.status_code == 401
    assert s.authorizations() == [None], s.handshakes
    assert p.wait_for_log(lambda l: "cannot answer the upstream's challenge" in l and "allow_basic_over_http" in l,
                          timeout=10)


@pytest.fixture(scope="module")
def ca(proxy_binary, tmp_path_factory):
    d = tmp_path_factory.mktemp("basic-ws-ca") / "ca"
    r = harness.run_cli(["ca", "init", "--dir", str(d)])
    assert r.returncode == 0, r.stderr + r.stdout
    return d


def test_wss_inside_an_intercepted_connect_to_a_basic_only_host(proxy_factory, ca, tls_cert):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tls_cert[0], tls_cert[1])
    s = BasicEchoServer(ssl_context=ctx).start()
    try:
        ca_cert, ca_key = str(ca / "ca.pem"), str(ca / "ca.key")
        p = proxy_factory(extra_config='\n[tls]\nca_cert = %s\nca_key = %s\nintercept = "matched"\n'
                          % (json.dumps(ca_cert), json.dumps(ca_key))
                          + basic_cred("https://localhost:%d/" % s.port)
                          + cred("trust", "server-trust", "https://localhost:%d" % s.port, ca_file=tls_cert[0]))
        with ws_connect(s.url("wss", PATH, host="localhost"), proxy=p.url,
                        ssl=ssl.create_default_context(cafile=ca_cert), open_timeout=T) as ws:
            ws.send("over intercepted tls")
            assert ws.recv(timeout=T) == "over intercepted tls"
            answer = str(ws.response.headers)
        assert s.authorizations() == [BASIC] and s.outcomes() == ["ok"], s.handshakes
        no_secret_in(answer)
        assert p.wait_for_log(lambda l: "upgrade=websocket" in l and "status=101" in l, timeout=10)
        no_secret_in(p.log_text())
    finally:
        s.stop()
