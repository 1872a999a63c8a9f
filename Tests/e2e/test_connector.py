"""The one connector (Sources/AuthProxyCore/Dial/Connector.swift, ConnectAttempts.swift): relayed requests and
CONNECT tunnels reach their upstream through the same attempts, the same failover between parents and the same
`deny_destinations` check, including on the parents a PAC file names, and fail with the same answers.

Run in both client modes (AUTHPROXY_TEST_HTTP_CLIENT=libcurl too): with the own client a plain-http request through
an `http` parent goes in absolute form on a connection the connector made to the parent (and the parent's own 407
goes back to the connector for the next parent); with libcurl it is a CurlTransfer, whose failover uses the same
ConnectAttempts. A CONNECT is the connector's in both.
"""

import base64
import hashlib
import socket

import requests

import harness
from forwarding_proxy import ForwardingProxy, PacServer, parent_named_by_pac
from test_admin import samples, start_with_admin, value
from test_upstream_pac import get, send_connect, tunnel_get, wait_until

NAMES = {"a.pac.test": "127.0.0.1"}


def connect_status(proxy, host, port):
    c = socket.create_connection((proxy.host, proxy.port), timeout=20)
    try:
        status, head = send_connect(c, host, port)
        body = b""
        if status != 200 and b"\r\n\r\n" in head:
            body = head.split(b"\r\n\r\n", 1)[1]
            c.settimeout(5)
            try:
                while True:
                    chunk = c.recv(65536)
                    if not chunk:
                        break
                    body += chunk
            except socket.timeout:
                pass
        return status, body
    finally:
        c.close()


def test_a_pac_parent_named_into_a_denied_block_is_refused_with_a_403_naming_the_setting(proxy_factory, origin):
    # `localhost` resolves into 127.0.0.0/8 (and ::1), both denied: the parent is never contacted, and a request
    # and a tunnel get the same answer, naming the PAC file, the parent and deny_destinations.
    with parent_named_by_pac(NAMES) as (parent, pac):
        p = proxy_factory(proxy={
            "upstream_pac": pac.url, "upstream_pac_refresh_seconds": 300, "upstream_timeout_seconds": 5,
            "connect_ports": [443, origin.port], "deny_destinations": ["127.0.0.0/8", "::1/128"]})
        assert wait_until(lambda: "PAC file loaded" in p.log_text(), timeout=10)
        r = get(p, "http://a.pac.test:%d/echo" % origin.port)
        assert r.status_code == 403, r.text
        err = r.json()["error"]
        assert pac.url in err["message"] and "denied address" in err["message"], err
        details = " ".join(err["details"])
        assert "localhost:%d" % parent.port in details and "deny_destinations" in details, err
        status, body = connect_status(p, "a.pac.test", origin.port)
        assert status == 403, body
        assert b"denied address" in body and b"deny_destinations" in body, body
        assert parent.accepted == 0, "the parent at a denied address received %d connections" % parent.accepted


def test_a_denied_pac_parent_is_skipped_for_the_next_by_requests_and_tunnels(proxy_factory, origin):
    denied = ForwardingProxy("denied", hosts=NAMES).start()
    # An allowed address (127.0.0.2) while 127.0.0.1, where `localhost` and the denied parent are, is denied.
    good = ForwardingProxy("good", hosts=NAMES, host="127.0.0.2").start()
    pac = PacServer("""
function FindProxyForURL(url, host) {
    if (host == "a.pac.test") return "PROXY localhost:%d; PROXY %s";
    return "DIRECT";
}
""" % (denied.port, good.address)).start()
    try:
        p = start_with_admin(proxy_factory, "", proxy={
            "upstream_pac": pac.url, "upstream_pac_refresh_seconds": 300, "upstream_timeout_seconds": 5,
            "connect_ports": [443, origin.port], "deny_destinations": ["127.0.0.1/32", "::1/128"]})
        assert wait_until(lambda: "PAC file loaded" in p.log_text(), timeout=10)
        r = get(p, "http://a.pac.test:%d/echo" % origin.port)
        assert r.status_code == 200, r.text
        status, inner = tunnel_get(p, "a.pac.test", origin.port)
        assert status == 200 and b" 200 " in inner.split(b"\r\n", 1)[0], inner
        assert good.saw() == ["http://a.pac.test:%d/echo" % origin.port, "a.pac.test:%d" % origin.port]
        assert denied.accepted == 0
        # Policy is no fault of the parent's: no failure recorded against it, so no backoff either.
        smp = samples(p)
        for cause in ("connect", "timeout", "auth", "refused"):
            assert value(smp, "authproxy_parent_failures_total", cause=cause,
                         parent="http://localhost:%d" % denied.port) == 0
    finally:
        pac.stop()
        denied.stop()
        good.stop()


def test_a_dead_parent_fails_over_the_same_way_for_a_request_and_a_tunnel(proxy_factory, origin):
    good = ForwardingProxy("good", hosts=NAMES).start()
    dead = "http://127.0.0.1:%d" % harness.closed_port()
    try:
        for first in ("request", "tunnel"):
            p = start_with_admin(proxy_factory, "", proxy={
                "upstream_proxy": [dead, "http://" + good.address], "upstream_proxy_backoff_seconds": 300,
                "upstream_timeout_seconds": 5, "connect_ports": [443, origin.port]})
            before = len(good.seen)
            steps = ["request", "tunnel"] if first == "request" else ["tunnel", "request"]
            for step in steps:
                if step == "request":
                    r = get(p, "http://a.pac.test:%d/echo" % origin.port)
                    assert r.status_code == 200, (first, r.text)
                else:
                    status, inner = tunnel_get(p, "a.pac.test", origin.port)
                    assert status == 200 and b" 200 " in inner.split(b"\r\n", 1)[0], (first, inner)
            assert len(good.seen) == before + 2
            smp = samples(p)
            # The first one found the dead parent and put it in backoff; the second went to the good one first.
            assert value(smp, "authproxy_parent_failures_total", cause="connect", parent=dead) == 1, first
            assert value(smp, "authproxy_parent_requests_total", parent=dead) == 1, first
            assert value(smp, "authproxy_parent_requests_total", parent="http://" + good.address) == 2, first
            p.stop()
    finally:
        good.stop()


def test_every_parent_down_is_answered_alike_by_a_request_and_a_tunnel(proxy_factory, origin):
    dead = ["http://127.0.0.1:%d" % harness.closed_port() for _ in range(2)]
    p = proxy_factory(proxy={
        "upstream_proxy": dead, "upstream_timeout_seconds": 5, "connect_ports": [443, origin.port]})
    r = get(p, "http://a.pac.test:%d/echo" % origin.port)
    assert r.status_code == 502, r.text
    message = r.json()["error"]["message"]
    assert message.startswith("Could not connect to parent proxy http://127.0.0.1:"), message
    status, body = connect_status(p, "a.pac.test", origin.port)
    assert status == 502, body
    assert b"Could not connect to parent proxy http://127.0.0.1:" in body, body


def test_a_parent_that_answers_407_is_left_for_the_next_and_the_body_goes_again(proxy_factory, origin):
    """A parent that wants a login authproxy has none for answers the request itself with 407: it is the parent's
    refusal, recorded, and the request (its body from the start) goes to the next parent; the client never sees it."""
    locked = ForwardingProxy("locked", hosts=NAMES, basic="someone:secret").start()
    good = ForwardingProxy("good", hosts=NAMES).start()
    try:
        p = start_with_admin(proxy_factory, "", proxy={
            "upstream_proxy": ["http://" + locked.address, "http://" + good.address],
            "upstream_proxy_backoff_seconds": 300, "upstream_timeout_seconds": 5})
        body = b"x" * 5000
        s = requests.Session()
        s.trust_env = False
        r = s.post("http://a.pac.test:%d/echo?m=after-407" % origin.port, data=body, proxies=p.proxies, timeout=20)
        assert r.status_code == 200, r.text
        echo = r.json()
        assert echo["body_sha256"] == hashlib.sha256(body).hexdigest(), echo
        assert any("1.1 good" in v for k, v in echo["headers"] if k.lower() == "via"), echo["headers"]
        assert ("POST", "http://a.pac.test:%d/echo?m=after-407" % origin.port) in good.seen, good.seen
        assert locked.seen == [] and locked.accepted >= 1, (locked.seen, locked.accepted)
        smp = samples(p)
        assert value(smp, "authproxy_parent_failures_total", cause="auth", parent="http://" + locked.address) == 1
        # The next request goes to the good parent first: the locked one is in backoff.
        before = locked.accepted
        r = get(p, "http://a.pac.test:%d/echo?m=second" % origin.port)
        assert r.status_code == 200, r.text
        assert locked.accepted == before
    finally:
        locked.stop()
        good.stop()


def test_every_parent_wanting_a_login_is_a_502_that_names_the_missing_setting(proxy_factory, origin):
    locked = ForwardingProxy("locked", hosts=NAMES, basic="someone:secret").start()
    try:
        p = proxy_factory(proxy={"upstream_proxy": "http://" + locked.address, "upstream_timeout_seconds": 5})
        r = get(p, "http://a.pac.test:%d/echo" % origin.port)
        err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
        assert locked.address in err["message"] and "no upstream_proxy_credential" in err["message"], err
        assert "Proxy-Authenticate" not in r.headers
    finally:
        locked.stop()


def test_a_basic_only_parent_login_goes_with_each_request(proxy_factory, origin):
    """`schemes = ["basic"]` for the parent's credential: sent with the request, never after a 407 first."""
    parent = ForwardingProxy("basic", hosts=NAMES, basic="alice:parent-pw").start()
    try:
        credential = ('\n[[credential]]\nname = "corp"\ntype = "password"\nusername = "alice"\n'
                      'password = "parent-pw"\nschemes = ["basic"]\nallow_basic_over_http = true\n')
        p = proxy_factory(extra_config=credential, proxy={
            "upstream_proxy": "http://" + parent.address, "upstream_proxy_credential": "corp"})
        for i in range(3):
            r = get(p, "http://a.pac.test:%d/echo?m=basic-%d" % (origin.port, i))
            assert r.status_code == 200, r.text
        expected = "Basic " + base64.b64encode(b"alice:parent-pw").decode()
        assert parent.authorizations == [expected] * 3, parent.authorizations
        assert len(parent.seen) == 3
        assert "parent-pw" not in p.log_text()
    finally:
        parent.stop()
