"""A `password` credential whose schemes are Basic and/or Digest on the proxy's own HTTP/1.1 client (issue 38): the
upstream's Digest 401 is answered by the own client (the body sent again), on the same kept-alive connection, and
the next requests log in at once from the loop's session cache (Apache's access log shows one 401 for many
requests); a stale nonce is answered again; a wrong password gives the client the 401 and the log names the
credential. `http_client = "libcurl"` keeps libcurl and serves as the reference.

Upstream: Apache httpd with mod_auth_digest (Tests/e2e/netauth)."""
import hashlib
import os
import re
import time

import pytest

from harness import RawBackend, cred
from httpraw import wait_until
from netauth.fixtures import netauth_big_file, netauth_rig  # noqa: F401  (fixtures)
from test_basic_own_client import apache_lines, attempt_clients, otel_env, receiver, warnings  # noqa: F401
from test_credentials import via

PASSWORD = "alice-pw"
MODES = ["native", "libcurl"]


def digest_cred(url, password=PASSWORD, name="dg", schemes=("digest",)):
    return cred(name, "password", url, username="alice", password=password, schemes=list(schemes))


def statuses(lines):
    return [int(re.search(r'" (\d{3}) ', l).group(1)) for l in lines]


@pytest.mark.parametrize("mode", MODES)
def test_get_and_post_answered_by_the_chosen_client(proxy_factory, netauth_rig, session, receiver, mode):
    rig = netauth_rig
    p = proxy_factory(proxy={"http_client": mode}, env=otel_env(receiver),
                      extra_config=digest_cred(rig.digest.url))
    marker = "m=dg-get-%s" % mode
    r = via(p, session, "GET", rig.digest.url + "secret?" + marker)
    assert r.status_code == 200, r.text[:300]
    assert (r.headers.get("X-Remote-User"), r.headers.get("X-Auth-Type")) == ("alice", "Digest")

    body = os.urandom(300 * 1024)
    r = via(p, session, "POST", rig.digest.url + "upload?m=dg-post-%s" % mode, data=body,
            headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 200, r.text[:300]
    assert int(r.headers["X-Body-Size"]) == len(body)
    assert r.headers["X-Body-Sha256"] == hashlib.sha256(body).hexdigest()

    expected = "own" if mode == "native" else "libcurl"
    assert attempt_clients(receiver, 2)[:2] == [expected] * 2
    assert PASSWORD not in p.log_text()
    assert p.wait_for_log(lambda l: "access" in l and "credential=dg " in l + " ", timeout=10)


def test_20mb_streamed_post_is_sent_again(proxy_factory, netauth_rig, netauth_big_file, session):
    """A chunked upload the 401 interrupts goes again whole (held up to max_replay_bytes) on the own client."""
    rig = netauth_rig
    p = proxy_factory(proxy={"http_client": "native"}, extra_config=digest_cred(rig.digest.url))
    path, size, sha = netauth_big_file

    def gen():
        with open(path, "rb") as f:
            while True:
                b = f.read(1 << 20)
                if not b:
                    return
                yield b

    r = via(p, session, "POST", rig.digest.url + "upload?m=dg-big", data=gen(), timeout=120,
            headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 200, r.text[:300]
    assert (int(r.headers["X-Body-Size"]), r.headers["X-Body-Sha256"]) == (size, sha)
    lines = wait_until(lambda: (lambda ls: ls if 200 in statuses(ls) else None)(apache_lines(rig, "m=dg-big")), 10)
    assert statuses(lines or []) == [401, 200], lines


def test_a_body_over_max_replay_bytes_fails_clearly(proxy_factory, netauth_rig, session):
    """A body larger than max_replay_bytes cannot be sent again: the answer and the log say so."""
    rig = netauth_rig
    p = proxy_factory(proxy={"http_client": "native", "max_replay_bytes": 1024},
                      extra_config=digest_cred(rig.digest.url))
    r = via(p, session, "POST", rig.digest.url + "upload?m=dg-over", data=iter([b"y" * 4096] * 4))
    assert r.status_code == 502, r.status_code
    assert "max_replay_bytes" in r.text
    assert p.wait_for_log(lambda l: "max_replay_bytes" in l, timeout=10)


def test_one_401_then_logins_from_the_session_on_one_connection(proxy_factory, netauth_rig, session):
    """The first request takes the 401 and answers it on the same connection; the next ones log in at once."""
    rig = netauth_rig
    p = proxy_factory(proxy={"http_client": "native"}, extra_config=digest_cred(rig.digest.url))
    ports = set()
    for i in range(6):
        method, kw = ("POST", {"data": b"x" * (1000 + i)}) if i % 2 else ("GET", {})
        r = via(p, session, method, rig.digest.url + "secret?m=dg-ka&n=%d" % i, **kw)
        assert r.status_code == 200 and r.headers.get("X-Remote-User") == "alice", (i, r.status_code)
        ports.add(r.headers.get("X-Remote-Port"))
    lines = wait_until(lambda: (lambda ls: ls if len(ls) >= 7 else None)(apache_lines(rig, "m=dg-ka")), 10) or []
    assert statuses(lines) == [401] + [200] * 6, lines
    # The nonce counts up within the session.
    ncs = [re.search(r"nc=([0-9a-f]{8})", l).group(1) for l in lines[1:]]
    assert ncs == ["%08x" % n for n in range(1, 7)], ncs
    assert len(ports) == 1, ports
    assert PASSWORD not in p.log_text()


def test_basic_and_digest_offered_digest_wins(proxy_factory, netauth_rig, session):
    """schemes = ["basic", "digest"] against the Digest vhost (over http, without allow_basic_over_http)."""
    rig = netauth_rig
    p = proxy_factory(extra_config=digest_cred(rig.digest.url, schemes=("basic", "digest")))
    r = via(p, session, "GET", rig.digest.url + "secret?m=dg-both")
    assert (r.status_code, r.headers.get("X-Auth-Type")) == (200, "Digest")


def test_basic_only_server_is_answered_with_basic(proxy_factory, netauth_rig, session):
    """schemes = ["basic", "digest"] against a Basic-only server: answered with Basic, as libcurl does (over http
    only with allow_basic_over_http)."""
    rig = netauth_rig
    c = cred("both", "password", rig.basic.url, username="alice", password=PASSWORD, schemes=["basic", "digest"],
             allow_basic_over_http=True)
    p = proxy_factory(extra_config=c)
    r = via(p, session, "GET", rig.basic.url + "secret?m=dg-basic-only")
    assert (r.status_code, r.headers.get("X-Auth-Type")) == (200, "Basic")


@pytest.mark.parametrize("mode", MODES)
def test_wrong_password_gives_the_client_the_401(proxy_factory, netauth_rig, session, mode):
    rig = netauth_rig
    p = proxy_factory(proxy={"http_client": mode}, extra_config=digest_cred(rig.digest.url, password="WRONG-pw"))
    marker = "m=dg-wrong-%s" % mode
    r = via(p, session, "POST", rig.digest.url + "secret?" + marker, data=b"payload")
    assert r.status_code == 401
    assert (r.headers.get("WWW-Authenticate") or "").startswith("Digest")
    assert r.headers.get("X-Remote-User") is None
    lines = wait_until(lambda: (lambda ls: ls if len(ls) >= 2 else None)(apache_lines(rig, marker)), 10) or []
    assert statuses(lines) == [401, 401], lines
    assert warnings(p) == [("upstream refused the network credential", "dg", None)]
    assert "WRONG-pw" not in p.log_text()


def test_a_stale_nonce_is_answered_again(proxy_factory, netauth_rig, session):
    """/short-nonce/ gives nonces that live 1 s: a later request's preemptive login is refused with stale=true and
    answered with the new nonce."""
    rig = netauth_rig
    p = proxy_factory(proxy={"http_client": "native"}, extra_config=digest_cred(rig.digest.url))
    r = via(p, session, "GET", rig.digest.url + "short-nonce/a?m=dg-stale-1")
    assert r.status_code == 200, r.status_code
    time.sleep(2.5)
    r = via(p, session, "POST", rig.digest.url + "short-nonce/b?m=dg-stale-2", data=b"again")
    assert r.status_code == 200 and r.headers.get("X-Body-Size") == "5", r.status_code
    lines = wait_until(lambda: (lambda ls: ls if 200 in statuses(ls) else None)(apache_lines(rig, "m=dg-stale-2")),
                       10) or []
    assert any(" 401 " in l and "stale=true" in l.lower() for l in lines), lines
    assert statuses(lines)[-1] == 200, lines


def test_logins_are_counted_as_with_libcurl(proxy_factory, netauth_rig, session):
    """authproxy_network_auth_total counts the own client's Digest logins (answered and from the session) and the
    refused one, although the proxy hands no intermediate 401 on."""
    from test_admin import samples, start_with_admin, value
    rig = netauth_rig
    p = start_with_admin(proxy_factory, digest_cred(rig.digest.url + "secret")
                         + digest_cred(rig.digest.url + "other", password="WRONG-pw", name="bad"))
    for i in range(3):
        assert via(p, session, "GET", rig.digest.url + "secret?m=dg-metric&n=%d" % i).status_code == 200
    assert via(p, session, "GET", rig.digest.url + "other?m=dg-metric-bad").status_code == 401
    m = samples(p)
    assert value(m, "authproxy_network_auth_total", credential="dg", scheme="digest", result="success") == 3
    assert value(m, "authproxy_network_auth_total", credential="bad", scheme="digest", result="failure") == 1


def test_a_challenge_the_own_client_cannot_answer_is_explained(proxy_factory, session):
    """A Digest algorithm the proxy does not compute: the client gets the 401, the log names the cause (not a wrong
    password)."""
    def respond(req):
        body = b"login"
        return (b'HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Digest realm="r", nonce="n1", '
                b'algorithm=SHA-512-256, qop="auth"\r\nContent-Length: %d\r\n\r\n' % len(body) + body)
    backend = RawBackend(respond=respond)
    try:
        p = proxy_factory(proxy={"http_client": "native"}, extra_config=digest_cred(backend.url))
        r = via(p, session, "GET", backend.url + "/x")
        assert (r.status_code, r.text) == (401, "login")
        assert "SHA-512-256" in r.headers.get("WWW-Authenticate", "")
        assert warnings(p) == [("the network credential cannot answer the upstream's challenge", "dg",
                                "the server's Digest challenge asks for algorithm SHA-512-256; MD5, MD5-sess, "
                                "SHA-256 and SHA-256-sess are supported")]
    finally:
        backend.stop()


# ---------------------------------------------------------------------------------------------------------
# WebSocket to a Digest host: the handshake's 401 answered by the own client, then the 101 relayed
# ---------------------------------------------------------------------------------------------------------

websockets = pytest.importorskip("websockets", minversion="15")
from websockets.datastructures import Headers  # noqa: E402
from websockets.http11 import Response  # noqa: E402
from websockets.sync.client import connect as ws_connect  # noqa: E402

from wsecho import EchoServer  # noqa: E402


class DigestEchoServer(EchoServer):
    """The WebSocket echo server behind Digest (RFC 7616, MD5, qop=auth), checked as a server does: the response
    is recomputed from the user's password, the nonce must be the one this server issued, and `nc` must grow."""

    REALM = "geo-ws"

    def __init__(self, password=PASSWORD):
        super().__init__()
        self.password = password
        self.nonce = hashlib.sha256(os.urandom(16)).hexdigest()
        self.seen_nc = set()

    @staticmethod
    def _params(value):
        return {k.lower(): v1 or v2 for k, v1, v2 in re.findall(r'(\w+)=(?:"([^"]*)"|([^\s,]+))', value)}

    def _valid(self, auth):
        if not auth or not auth.startswith("Digest "):
            return False
        d = self._params(auth[len("Digest "):])
        md5 = lambda s: hashlib.md5(s.encode()).hexdigest()  # noqa: E731
        if d.get("username") != "alice" or d.get("realm") != self.REALM or d.get("nonce") != self.nonce:
            return False
        if d.get("qop") != "auth" or not d.get("nc") or not d.get("cnonce") or d["nc"] in self.seen_nc:
            return False
        ha1 = md5("alice:%s:%s" % (self.REALM, self.password))
        ha2 = md5("GET:%s" % d.get("uri", ""))
        expected = md5("%s:%s:%s:%s:auth:%s" % (ha1, self.nonce, d["nc"], d["cnonce"], ha2))
        if d.get("response") != expected:
            return False
        self.seen_nc.add(d["nc"])
        return True

    def _process_request(self, connection, request):
        if "upgrade" in request.headers.get("Connection", "").lower():
            auth = request.headers.get("Authorization")
            with self.lock:
                ok = self._valid(auth)
            if not ok:
                with self.lock:
                    self.handshakes.append((request.path, dict(request.headers.raw_items()), "401"))
                challenge = 'Digest realm="%s", nonce="%s", qop="auth", algorithm=MD5' % (self.REALM, self.nonce)
                return Response(401, "Unauthorized", Headers([("WWW-Authenticate", challenge),
                                                              ("Content-Length", "0")]), b"")
        return super()._process_request(connection, request)

    def outcomes(self):
        with self.lock:
            return [o for _, _, o in self.handshakes]


@pytest.mark.parametrize("password", [PASSWORD, "wrong-pw"])
def test_ws_handshake_to_a_digest_host_is_answered_by_the_own_client(proxy_factory, password):
    s = DigestEchoServer().start()
    try:
        p = proxy_factory(extra_config=digest_cred("http://127.0.0.1:%d/" % s.port, password=password))
        if password == PASSWORD:
            for i in range(2):
                try:
                    with ws_connect(s.url("ws"), proxy=p.url, open_timeout=20) as ws:
                        ws.send("hello %d" % i)
                        assert ws.recv(timeout=20) == "hello %d" % i
                except Exception:
                    raise AssertionError([(o, h.get("Authorization")) for _, h, o in s.handshakes])
            # The first handshake met the challenge; the second logged in at once from the session (nc 2).
            assert s.outcomes() == ["401", "ok", "ok"], [(o, h.get("Authorization")) for _, h, o in s.handshakes]
            assert p.wait_for_log(lambda l: "upgrade=websocket" in l and "status=101" in l, timeout=10)
        else:
            with pytest.raises(websockets.exceptions.InvalidStatus) as e:
                with ws_connect(s.url("ws"), proxy=p.url, open_timeout=20):
                    pass
            assert e.value.response.status_code == 401
            assert s.outcomes() == ["401", "401"], s.handshakes
        assert password not in p.log_text()
    finally:
        s.stop()
