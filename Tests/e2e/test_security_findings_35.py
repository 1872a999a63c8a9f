"""Reproducers for issue 35, items 6, 7 and 9, against the real binary.

Item 6: a discovered token service (`rest/info`'s `tokenServicesUrl`, or the portal of its `owningSystemUrl`) was
trusted by scheme and host alone, so a server root on one port sent `username=…&password=…` to whatever listened
on another port of its host. Now it must be on the server root's origin (scheme, host, port) or one the credential
is configured for (a `match` prefix, `token_url`); otherwise a 502 names the root, the URL and why.

Item 7: `Upgrade: websocket, h2c` went upstream as it was, and any `101` was relayed as a raw tunnel, through which
requests the proxy refuses (`/arcgis/..;/admin/x`) reached the backend unparsed. Now only `Upgrade: websocket` goes
upstream, and a `101` becomes a relay only when it switches to websocket with the `Sec-WebSocket-Accept` that answers
the request's key; otherwise the client gets a 502 and the upstream connection is closed.

Item 9a: an OIDC discovery document's `mtls_endpoint_aliases.token_endpoint` was used whatever its scheme: an http
alias got the token request without TLS. Now it must be https, or discovery is refused naming the field.

Item 9b: a fleet lock squatted in Redis delayed every token need by the whole token request timeout; now a replica
waits `[cluster] lock_wait_seconds` (default 5 s) for another's token, then fetches it itself with a warning.
"""
import base64
import hashlib
import http.server
import json
import os
import shutil
import socket
import ssl
import threading
import time
import urllib.parse

import pytest

import harness
from harness import cred

PASSWORD = "s3cret-pass-35"


class Recorder:
    """A listener on a loopback port that records every request (method, path, body) and answers a POST as an
    ArcGIS token service would (token T35), so the old build logs in there and goes on."""

    def __init__(self):
        self.requests = []
        self.lock = threading.Lock()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def record(self, body):
                with owner.lock:
                    owner.requests.append((self.command, self.path, body.decode("latin-1")))

            def send(self, obj):
                body = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                self.record(b"")
                # Answers as a portal would, so a build that probes it as a root goes on to log in.
                self.send({"currentVersion": "11.1", "authInfo": {"isTokenBasedSecurity": True}})

            def do_POST(self):
                self.record(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                self.send({"token": "T35", "expires": int(time.time() * 1000) + 3600000, "ssl": False})

        self._srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._srv.server_address[1]
        threading.Thread(target=self._srv.serve_forever, daemon=True).start()

    @property
    def base(self):
        return "http://127.0.0.1:%d" % self.port

    def passwords_seen(self):
        with self.lock:
            return [r for r in self.requests if PASSWORD in r[2] or PASSWORD in r[1]]

    def stop(self):
        self._srv.shutdown()
        self._srv.server_close()


class NamingServer:
    """An ArcGIS-like server root (`/arcgis`) on its own loopback port whose `rest/info` says what the test wants
    (`info`), and whose services answer 200 to `token=T35` and a 499 token error otherwise."""

    def __init__(self, info):
        self.info = info
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def send(self, obj):
                body = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                u = urllib.parse.urlsplit(self.path)
                if u.path == "/arcgis/rest/info":
                    return self.send(owner.info)
                if "T35" in urllib.parse.parse_qs(u.query).get("token", []):
                    return self.send({"features": [{"attributes": {"id": 1}}]})
                self.send({"error": {"code": 499, "message": "Token Required", "details": []}})

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.send({"error": {"code": 400, "message": "Unable to generate token.", "details": []}})

        self._srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._srv.server_address[1]
        threading.Thread(target=self._srv.serve_forever, daemon=True).start()

    @property
    def root(self):
        return "http://127.0.0.1:%d/arcgis" % self.port

    def query_url(self):
        return self.root + "/rest/services/Secure/Points/FeatureServer/0/query?where=1%3D1&f=json"

    def stop(self):
        self._srv.shutdown()
        self._srv.server_close()


@pytest.fixture
def recorder():
    r = Recorder()
    yield r
    r.stop()


def via(proxy, session, url):
    return session.get(url, proxies=proxy.proxies, timeout=30)


# ---------------------------------------------------------------------------------------------------------------
# Item 6: rest/info names a token service on another port of the server's host
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("field", ["tokenServicesUrl", "owningSystemUrl"])
def test_rest_info_naming_another_port_never_gets_the_password(proxy_factory, session, recorder, field):
    """The server root on one port names a listener on another port of 127.0.0.1 (as its token service, or as the
    portal it is federated with): the password must never arrive there, and the client gets a 502 naming the
    root, the URL rest/info named and why (the old build posted username and password there and answered 200)."""
    if field == "tokenServicesUrl":
        named = recorder.base + "/arcgis/tokens/generateToken"
        info = {"currentVersion": 11.1, "authInfo": {"isTokenBasedSecurity": True, "tokenServicesUrl": named}}
    else:
        named = recorder.base + "/portal/sharing/rest/generateToken"
        info = {"currentVersion": 11.1, "owningSystemUrl": recorder.base + "/portal",
                "authInfo": {"isTokenBasedSecurity": True}}
    server = NamingServer(info)
    try:
        p = proxy_factory(extra_config=cred("gis", "arcgis-token", server.root, username="alice", password=PASSWORD))
        r = via(p, session, server.query_url())
        err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
        msg = err["message"]
        assert server.root + "/rest/info" in msg and named in msg, msg
        assert "origin" in msg and field in msg and "token_url" in msg, msg
        assert recorder.passwords_seen() == [], recorder.requests
        assert PASSWORD not in p.log_text()

        # Control: the same listener named by token_url (configured) does get the login — the recorder sees a
        # password when one is sent, so the check above can fail.
        if field == "tokenServicesUrl":
            p2 = proxy_factory(extra_config=cred("gis", "arcgis-token", server.root, username="alice",
                                                 password=PASSWORD, token_url=named))
            r = via(p2, session, server.query_url())
            assert r.status_code == 200, r.text[:300]
            assert len(recorder.passwords_seen()) == 1, recorder.requests
    finally:
        server.stop()


def test_federated_portal_on_another_port_needs_configuring(proxy_factory, federation, session):
    """The faithful test servers: a server federated with a portal on another port of the same host. With only the
    server matched, the portal's owningSystemUrl is not the server's origin: no password login there, a 502 that
    says so. With the portal also matched (configured), the one portal login and the exchange work."""
    portal, server = federation
    p = proxy_factory(extra_config=cred("gis", "arcgis-token", server.server_root, username="bob",
                                        password="bob-pass"))
    r = via(p, session, server.query_url() + "?f=json")
    err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
    # The faithful server names the portal twice (tokenServicesUrl and owningSystemUrl): either is refused.
    assert portal.portal_url + "/sharing/rest/generateToken" in err["message"], err
    assert "origin" in err["message"] and "token_url" in err["message"], err
    assert portal.token_calls("portal.generateToken") == [], portal.token_calls()

    p2 = proxy_factory(extra_config=cred("gis", "arcgis-token", [server.server_root, portal.portal_url],
                                         username="bob", password="bob-pass"))
    r = via(p2, session, server.query_url() + "?f=json")
    assert r.status_code == 200 and r.json().get("features"), r.text[:300]
    issued = portal.stats()["tokens_issued"]
    assert issued.get("generate_password") == 1 and issued.get("generate_federated") == 1, issued


# ---------------------------------------------------------------------------------------------------------------
# Item 7: a 101 to anything but the handshake's websocket becomes a raw tunnel
# ---------------------------------------------------------------------------------------------------------------

WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 §1.3
SMUGGLED = b"GET /arcgis/..;/admin/x HTTP/1.1\r\nHost: backend\r\n\r\n"


def accept_for(key):
    return base64.b64encode(hashlib.sha1(key.encode() + WS_GUID).digest()).decode()


class SwitchingOrigin:
    """A raw-socket origin that answers every request head with `answer(head)` (bytes), then records whatever the
    connection carries next until it closes or `after_seconds` pass: what a tunnel would have relayed."""

    def __init__(self, answer, after_seconds=3.0):
        self.answer = answer
        self.after_seconds = after_seconds
        self.lock = threading.Lock()
        self.seen = []  # [head bytes, bytes after the head, finished]
        self.up = harness.ScriptedUpstream(self._behave)
        self.url = self.up.url

    def _behave(self, c):
        entry = [b"", b"", False]
        with self.lock:
            self.seen.append(entry)
        try:
            c.settimeout(10)
            data = harness.read_head(c)
            head, _, after = data.partition(b"\r\n\r\n")
            entry[0] = head
            entry[1] = after
            c.sendall(self.answer(head.decode("latin-1")))
            deadline = time.monotonic() + self.after_seconds
            while time.monotonic() < deadline:
                c.settimeout(max(0.05, deadline - time.monotonic()))
                try:
                    d = c.recv(65536)
                except socket.timeout:
                    break
                if not d:
                    break
                entry[1] += d
        finally:
            entry[2] = True
            c.close()

    def wait_finished(self, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if self.seen and all(e[2] for e in self.seen):
                    return list(self.seen)
            time.sleep(0.05)
        with self.lock:
            return list(self.seen)

    def close(self):
        self.up.close()


def header_values(head, name):
    out = []
    for line in head.split("\r\n")[1:]:
        k, _, v = line.partition(":")
        if k.strip().lower() == name:
            out.append(v.strip())
    return out


def answer_101(kind):
    def answer(head):
        key = (header_values(head, "sec-websocket-key") or [""])[0]
        if kind == "h2c":
            return b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n"
        accept = accept_for(key) if kind == "valid" else accept_for("not-" + key)
        return ("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                "Sec-WebSocket-Accept: %s\r\n\r\n" % accept).encode()
    return answer


def read_response(s, timeout=10):
    """(head text, body bytes) of one response on `s` (body by Content-Length; b"" when there is none)."""
    s.settimeout(timeout)
    data = harness.read_head(s)
    head, _, body = data.partition(b"\r\n\r\n")
    text = head.decode("latin-1")
    n = int((header_values(text, "content-length") or ["0"])[0])
    while len(body) < n:
        d = s.recv(65536)
        if not d:
            break
        body += d
    return text, body


def handshake(origin, upgrade, key):
    target = origin.url + "/arcgis/rest/services/Quakes/StreamServer/subscribe"
    return ("GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: %s\r\nConnection: Upgrade, HTTP2-Settings\r\n"
            "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n"
            % (target, origin.url[len("http://"):], upgrade, key)).encode()


@pytest.mark.parametrize("client", ["native", "libcurl"])
@pytest.mark.parametrize("kind", ["h2c", "wrong-accept", "valid"])
def test_a_switch_is_relayed_only_to_the_handshakes_websocket(proxy_factory, client, kind):
    """The handshake offers `websocket, h2c`; the origin answers `101` with `Upgrade: h2c`, or with websocket and an
    accept value for another key, then reads on. The client must get a 502 naming why, and the request it writes
    next (`/arcgis/..;/admin/x`, which the proxy refuses on this host) must never reach the origin — the upstream
    connection is closed. Control (`valid`): a correct switch is relayed and the same bytes do arrive, so the
    recorder sees what a tunnel carries. Every handshake reaches the origin with `Upgrade: websocket` alone."""
    origin = SwitchingOrigin(answer_101(kind))
    try:
        p = proxy_factory(proxy={"http_client": client},
                          extra_config=cred("stream", "api-key", origin.url + "/arcgis", key="KEY35"))
        key = base64.b64encode(os.urandom(16)).decode()
        s = socket.create_connection((p.host, p.port), timeout=10)
        try:
            s.sendall(handshake(origin, "websocket, h2c", key))
            head, body = read_response(s)
            try:
                s.sendall(SMUGGLED)
            except OSError:
                pass  # the proxy closed the connection after its 502
            seen = origin.wait_finished()
        finally:
            s.close()
        assert len(seen) == 1, seen
        if kind == "valid":
            assert head.startswith("HTTP/1.1 101"), head
            assert SMUGGLED in seen[0][1], seen
        else:
            assert b"..;" not in b"".join(e[0] + e[1] for e in seen), seen
            err = harness.assert_error_json(int(head.split(" ")[1]),
                                            lambda n: (header_values(head, n.lower()) or [None])[0], body, 502)
            assert "101" in err["message"], err
            assert ("h2c" in err["message"]) if kind == "h2c" else ("Sec-WebSocket-Accept" in err["message"]), err
            assert header_values(head, "connection") == ["close"], head
            assert "KEY35" not in p.log_text()
        upstream_head = seen[0][0].decode("latin-1")
        assert header_values(upstream_head, "upgrade") == ["websocket"], upstream_head
    finally:
        origin.close()


@pytest.mark.parametrize("client", ["native", "libcurl"])
def test_an_upgrade_naming_no_websocket_is_a_plain_request(proxy_factory, client):
    """`Upgrade: h2c` alone: the request goes upstream as a plain request without `Upgrade`, and an origin that
    switches anyway gets no tunnel (a 502; nothing the client writes next reaches it)."""
    origin = SwitchingOrigin(answer_101("h2c"))
    try:
        p = proxy_factory(proxy={"http_client": client})
        s = socket.create_connection((p.host, p.port), timeout=10)
        try:
            s.sendall(handshake(origin, "h2c", base64.b64encode(os.urandom(16)).decode()))
            head, body = read_response(s)
            try:
                s.sendall(SMUGGLED)
            except OSError:
                pass
            seen = origin.wait_finished()
        finally:
            s.close()
        assert len(seen) >= 1, seen
        assert header_values(seen[0][0].decode("latin-1"), "upgrade") == [], seen[0][0]
        assert head.startswith("HTTP/1.1 502"), head
        assert b"..;" not in b"".join(e[0] + e[1] for e in seen), seen
    finally:
        origin.close()


# ---------------------------------------------------------------------------------------------------------------
# Item 9a: an http mutual-TLS alias in OIDC discovery
# ---------------------------------------------------------------------------------------------------------------

def test_an_http_mtls_alias_never_gets_the_token_request(proxy_factory, session, tls_cert, recorder):
    """An https provider whose discovery names an http `mtls_endpoint_aliases.token_endpoint` (a listener on another
    port that records what it gets), with a certificate credential covering it: the token request must not go there
    (the old build sent `grant_type=client_credentials&client_id=…` in clear), and the 502 names the field."""
    from oidc import OIDCProvider, ResourceServer
    cert, key = tls_cert
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    idp = OIDCProvider(expires_in=60, auth_methods=["tls_client_auth"])
    idp.tls = ctx
    idp.start()
    ogc = ResourceServer(idp).start()
    try:
        idp.add_client("mtls-client", tls_subject_cn="localhost")
        alias = recorder.base + "/realms/test/protocol/openid-connect/token"
        idp.mtls_alias = alias
        config = (cred("idp-trust", "server-trust", idp.base, ca_file=cert)
                  + cred("alias-cert", "certificate", recorder.base, cert=cert, key=key)
                  + cred("ogc", "oauth2", ogc.base + "/ogc", issuer=idp.issuer, client_id="mtls-client",
                         token_endpoint_auth_method="tls_client_auth"))
        p = proxy_factory(extra_config=config)
        r = via(p, session, ogc.items_url())
        assert recorder.requests == [], recorder.requests
        assert idp.token_requests() == [], idp.token_requests()
        err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
        assert "mtls_endpoint_aliases.token_endpoint" in err["message"] and alias in err["message"], err
        assert "https" in err["message"], err
    finally:
        ogc.stop()
        idp.stop()


# ---------------------------------------------------------------------------------------------------------------
# Item 9b: a squatted fleet lock
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server (Debian package) is not installed")
def test_a_squatted_fleet_lock_delays_a_token_need_by_the_lock_wait_only(proxy_factory, ags, tmp_path, session):
    """Someone who can write to the fleet's Redis sets the lock key of a credential's token with a 10-minute expiry.
    A replica that needs that token waits `lock_wait_seconds` (default 5 s), then fetches it itself and says so —
    not the whole token request timeout (30 s here; the old build waited all of it)."""
    from test_fleet import STATE_KEY, RedisServer, cluster_section, wait_connected
    redis = RedisServer(tmp_path).start()
    try:
        extra = cluster_section(redis.url()) + cred("fleet35", "arcgis-token", ags.server_root, username="alice",
                                                    password="alice-pass")
        a = proxy_factory(proxy={"state_key": STATE_KEY, "workers": 1}, extra_config=extra)
        wait_connected([a])
        assert via(a, session, ags.query_url() + "?f=json").status_code == 200
        token_keys = [k for k in redis.keys() if ":t:" in k]
        assert len(token_keys) == 1, redis.keys()
        lock_key = token_keys[0].replace(":t:", ":l:")
        assert redis.cli("SET", lock_key, "squatter", "PX", "600000").strip() == "OK"
        redis.cli("DEL", token_keys[0])
        logins = len(ags.token_calls("server.generateToken"))

        b = proxy_factory(proxy={"state_key": STATE_KEY, "workers": 1, "upstream_timeout_seconds": 30},
                          extra_config=extra)
        wait_connected([b])
        t0 = time.monotonic()
        r = session.get(ags.query_url() + "?f=json", proxies=b.proxies, timeout=90)
        elapsed = time.monotonic() - t0
        assert r.status_code == 200, r.text[:300]
        # It did wait for the lock (the squatter was seen), and no longer than the wait plus a debug build's room.
        assert 4.0 <= elapsed < 15.0, elapsed
        assert len(ags.token_calls("server.generateToken")) == logins + 1
        assert "lock_wait_seconds" in b.log_text(), b.log_text()[-2000:]
        # The squatter's lock is left alone (its value is not this replica's lease).
        assert redis.cli("GET", lock_key).strip() == "squatter"
    finally:
        redis.stop()
