"""Reproducers for issue 35, items 6, 7 and 9, against the real binary.

Item 6: a discovered token service (`rest/info`'s `tokenServicesUrl`, or the portal of its `owningSystemUrl`) was
trusted by scheme and host alone, so a server root on one port sent `username=…&password=…` to whatever listened
on another port of its host. Now it must be on the server root's origin (scheme, host, port) or one the credential
is configured for (a `match` prefix, `token_url`); otherwise a 502 names the root, the URL and why.
"""
import http.server
import json
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

