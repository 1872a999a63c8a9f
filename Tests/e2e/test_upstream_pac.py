"""[proxy] upstream_pac: a PAC file, served over HTTP on loopback, chooses the parent per
destination; the parents are two small forwarding proxies (forwarding_proxy.py) that record what they saw.

Names: a.pac.test goes to parent A, b.pac.test to parent B, f.pac.test to a dead parent then B, localhost to a
dead parent then DIRECT, everything else (127.0.0.1) DIRECT. Only the parents know the *.pac.test names
(they map them to 127.0.0.1), so a request that reached the origin by one of them went through a parent.
"""

import json
import signal
import socket
import time

import pytest
import requests

import harness
from forwarding_proxy import ForwardingProxy, PacServer
from test_admin import admin_get, samples, value, start_with_admin

NAMES = {"a.pac.test": "127.0.0.1", "b.pac.test": "127.0.0.1", "f.pac.test": "127.0.0.1"}


def pac_text(a, b, dead, a_to="A"):
    first = a if a_to == "A" else b
    return """
function FindProxyForURL(url, host) {
    if (host == "a.pac.test") return "PROXY %s";
    if (host == "b.pac.test") return "PROXY %s";
    if (host == "f.pac.test") return "PROXY %s; PROXY %s";
    if (host == "localhost") return "PROXY %s; DIRECT";
    return "DIRECT";
}
""" % (first.address, b.address, dead, b.address, dead)


@pytest.fixture
def parents():
    a = ForwardingProxy("parentA", hosts=NAMES).start()
    b = ForwardingProxy("parentB", hosts=NAMES).start()
    yield a, b
    a.stop()
    b.stop()


def via_of(body):
    return [v for k, v in json.loads(body)["headers"] if k.lower() == "via"]


def get(proxy, url):
    s = requests.Session()
    s.trust_env = False
    return s.get(url, proxies=proxy.proxies, timeout=20)


def send_connect(c, host, port):
    """CONNECT host:port on the open connection `c` to the proxy: (status, the head as read)."""
    c.sendall(b"CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (host.encode(), port, host.encode(), port))
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = c.recv(4096)
        if not chunk:
            break
        head += chunk
    return (int(head.split(b" ", 2)[1]) if head else 0), head


def tunnel_get(proxy, host, port):
    """CONNECT host:port through the proxy, then a plain GET /echo inside: (CONNECT status, inner response)."""
    c = socket.create_connection((proxy.host, proxy.port), timeout=20)
    try:
        status, head = send_connect(c, host, port)
        if status != 200:
            return status, head
        c.sendall(b"GET /echo HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n" % (host.encode(), port))
        out = b""
        while True:
            chunk = c.recv(65536)
            if not chunk:
                break
            out += chunk
        return status, out
    finally:
        c.close()


def start(proxy_factory, pac_url, origin, refresh=300, admin=False, **proxy):
    section = {"upstream_pac": pac_url, "upstream_pac_refresh_seconds": refresh,
               "connect_ports": [443, origin.port], "upstream_timeout_seconds": 5, **proxy}
    if admin:
        return start_with_admin(proxy_factory, "", proxy=section)
    return proxy_factory(proxy=section)


def wait_until(pred, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.2)
    return False


def test_relayed_requests_and_tunnels_go_where_the_pac_file_says(proxy_factory, origin, parents):
    a, b = parents
    dead = "127.0.0.1:%d" % harness.closed_port()
    pac = PacServer(pac_text(a, b, dead)).start()
    try:
        p = start(proxy_factory, pac.url, origin)
        r = get(p, "http://a.pac.test:%d/echo" % origin.port)
        assert r.status_code == 200, r.text
        assert "1.1 parentA" in via_of(r.content)
        assert a.saw("GET") == ["http://a.pac.test:%d/echo" % origin.port]
        r = get(p, "http://b.pac.test:%d/echo?x=1" % origin.port)
        assert r.status_code == 200, r.text
        assert "1.1 parentB" in via_of(r.content)
        assert b.saw("GET") == ["http://b.pac.test:%d/echo?x=1" % origin.port]
        # Everything else: DIRECT, neither parent sees it.
        r = get(p, "http://127.0.0.1:%d/echo" % origin.port)
        assert r.status_code == 200
        assert not any("parent" in v for v in via_of(r.content))
        assert len(a.seen) == 1 and len(b.seen) == 1
        # Blind CONNECT tunnels take the same routes.
        status, inner = tunnel_get(p, "a.pac.test", origin.port)
        assert status == 200 and b" 200 " in inner.split(b"\r\n", 1)[0]
        assert a.saw("CONNECT") == ["a.pac.test:%d" % origin.port]
        status, inner = tunnel_get(p, "b.pac.test", origin.port)
        assert status == 200 and b" 200 " in inner.split(b"\r\n", 1)[0]
        assert b.saw("CONNECT") == ["b.pac.test:%d" % origin.port]
        status, inner = tunnel_get(p, "127.0.0.1", origin.port)
        assert status == 200
        assert len(a.seen) == 2 and len(b.seen) == 2
        # The PAC file was read once, at start: the rest came from its cached answers or the engine.
        assert pac.fetches == 1
        assert "PAC file loaded" in p.log_text()
    finally:
        pac.stop()


def test_a_dead_parent_fails_over_to_the_next_and_a_trailing_direct_goes_direct(proxy_factory, origin, parents):
    a, b = parents
    dead = "127.0.0.1:%d" % harness.closed_port()
    pac = PacServer(pac_text(a, b, dead)).start()
    try:
        p = start(proxy_factory, pac.url, origin)
        # PROXY dead; PROXY B
        r = get(p, "http://f.pac.test:%d/echo" % origin.port)
        assert r.status_code == 200, r.text
        assert "1.1 parentB" in via_of(r.content)
        status, inner = tunnel_get(p, "f.pac.test", origin.port)
        assert status == 200 and b" 200 " in inner.split(b"\r\n", 1)[0]
        assert b.saw() == ["http://f.pac.test:%d/echo" % origin.port, "f.pac.test:%d" % origin.port]
        # PROXY dead; DIRECT: after the parent failed, the destination itself (relayed and tunnelled).
        r = get(p, "http://localhost:%d/echo" % origin.port)
        assert r.status_code == 200, r.text
        assert not any("parent" in v for v in via_of(r.content))
        status, inner = tunnel_get(p, "localhost", origin.port)
        assert status == 200 and b" 200 " in inner.split(b"\r\n", 1)[0]
        assert len(b.seen) == 2 and a.seen == []
    finally:
        pac.stop()


def test_a_trailing_direct_still_honours_deny_destinations(proxy_factory, origin, parents):
    _, b = parents
    # The parent itself must be at an allowed address (a PAC-named parent is checked against deny_destinations
    # too: test_security_findings_35_pac), so it listens on 127.0.0.2 while 127.0.0.1 is denied.
    a = ForwardingProxy("parentA", hosts=NAMES, host="127.0.0.2").start()
    dead = "127.0.0.1:%d" % harness.closed_port()
    pac = PacServer(pac_text(a, b, dead)).start()
    try:
        p = start(proxy_factory, pac.url, origin, deny_destinations=["127.0.0.1/32", "::1/128"])
        r = get(p, "http://localhost:%d/echo" % origin.port)
        assert r.status_code == 403, r.text
        # Through a parent the destination's address is the parent's business (a name it resolves).
        r = get(p, "http://a.pac.test:%d/echo" % origin.port)
        assert r.status_code == 200, r.text
    finally:
        pac.stop()
        a.stop()


def test_no_pac_file_at_start_refuses_with_a_502_naming_it_until_one_loads(proxy_factory, origin, parents):
    a, b = parents
    dead = "127.0.0.1:%d" % harness.closed_port()
    port = harness.free_port()
    url = "http://127.0.0.1:%d/proxy.pac" % port
    p = start(proxy_factory, url, origin, refresh=1, admin=True)
    assert "PAC file could not be loaded and none was loaded before" in p.log_text()
    r = get(p, "http://127.0.0.1:%d/echo" % origin.port)
    assert r.status_code == 502
    err = r.json()["error"]
    assert url in err["message"], err
    ready = admin_get(p, "/readyz")
    assert ready.status_code == 503
    assert any("no PAC file loaded from " + url in reason for reason in ready.json()["reasons"]), ready.text
    smp = samples(p)
    assert value(smp, "authproxy_pac_loaded") == 0
    assert value(smp, "authproxy_pac_load_failures_total") >= 1
    # A CONNECT is refused the same way.
    status, head = tunnel_get(p, "127.0.0.1", origin.port)
    assert status == 502 and url.encode() in head
    # The PAC server comes up: within the retry period requests are routed by it.
    pac = PacServer(pac_text(a, b, dead), port=port).start()
    try:
        assert wait_until(lambda: get(p, "http://a.pac.test:%d/echo" % origin.port).status_code == 200), p.log_text()[-3000:]
        assert a.saw("GET")
        assert admin_get(p, "/readyz").status_code == 200
        assert value(samples(p), "authproxy_pac_loaded") == 1
    finally:
        pac.stop()


def test_a_pac_file_that_fails_later_keeps_the_last_good_one(proxy_factory, origin, parents):
    a, b = parents
    dead = "127.0.0.1:%d" % harness.closed_port()
    pac = PacServer(pac_text(a, b, dead)).start()
    stopped = False
    try:
        p = start(proxy_factory, pac.url, origin, refresh=1, admin=True)
        assert get(p, "http://a.pac.test:%d/echo" % origin.port).status_code == 200
        # Broken JavaScript on the server: warned, the old file stays in force.
        pac.text = "function FindProxyForURL(url, host) { return "
        assert p.wait_for_log(lambda l: "the last good one stays in force" in l and "does not evaluate" in l, timeout=10)
        r = get(p, "http://a.pac.test:%d/echo" % origin.port)
        assert r.status_code == 200 and "1.1 parentA" in via_of(r.content)
        # The server gone: the same.
        pac.stop()
        stopped = True
        before = p.log_text().count("the last good one stays in force")
        assert wait_until(lambda: p.log_text().count("the last good one stays in force") > before + 1)
        r = get(p, "http://b.pac.test:%d/echo" % origin.port)
        assert r.status_code == 200 and "1.1 parentB" in via_of(r.content)
        assert admin_get(p, "/readyz").status_code == 200
        smp = samples(p)
        assert value(smp, "authproxy_pac_loaded") == 1
        assert value(smp, "authproxy_pac_load_failures_total") >= 2
    finally:
        if not stopped:
            pac.stop()


def test_a_changed_pac_file_is_picked_up_after_the_refresh_period_and_on_reload(proxy_factory, origin, parents):
    a, b = parents
    dead = "127.0.0.1:%d" % harness.closed_port()
    pac = PacServer(pac_text(a, b, dead)).start()
    try:
        p = start(proxy_factory, pac.url, origin, refresh=1)
        r = get(p, "http://a.pac.test:%d/echo" % origin.port)
        assert "1.1 parentA" in via_of(r.content)
        # a.pac.test now goes to B: the new file clears the old answers.
        pac.text = pac_text(a, b, dead, a_to="B")
        assert wait_until(lambda: "1.1 parentB" in via_of(get(p, "http://a.pac.test:%d/echo" % origin.port).content))
    finally:
        pac.stop()

    # With a long refresh period, a reload (SIGHUP) reads the file again.
    pac = PacServer(pac_text(a, b, dead)).start()
    try:
        p = start(proxy_factory, pac.url, origin, refresh=3600)
        assert "1.1 parentA" in via_of(get(p, "http://a.pac.test:%d/echo" % origin.port).content)
        fetches = pac.fetches
        pac.text = pac_text(a, b, dead, a_to="B")
        loads = p.log_text().count("PAC file loaded")
        p.proc.send_signal(signal.SIGHUP)
        assert wait_until(lambda: p.log_text().count("PAC file loaded") > loads), p.log_text()[-3000:]
        assert pac.fetches == fetches + 1
        assert "1.1 parentB" in via_of(get(p, "http://a.pac.test:%d/echo" % origin.port).content)
    finally:
        pac.stop()


def test_a_pac_file_from_disk_and_no_proxy_before_it(proxy_factory, origin, parents, tmp_path):
    a, b = parents
    f = tmp_path / "proxy.pac"
    f.write_text('function FindProxyForURL(url, host) { return "PROXY %s"; }' % a.address)
    p = start(proxy_factory, "file://" + str(f), origin, no_proxy=["127.0.0.1"])
    r = get(p, "http://b.pac.test:%d/echo" % origin.port)
    assert r.status_code == 200 and "1.1 parentA" in via_of(r.content)
    # no_proxy is authproxy's own decision: the PAC file would send it to A.
    r = get(p, "http://127.0.0.1:%d/echo" % origin.port)
    assert r.status_code == 200 and not any("parent" in v for v in via_of(r.content))
    assert a.saw() == ["http://b.pac.test:%d/echo" % origin.port]


def test_token_requests_take_the_pac_route_too(proxy_factory, parents, ags):
    """The token service's own fetches (rest/info, generateToken) ask the PAC file from the token queue."""
    from test_credentials import arcgis_cred
    a, b = parents
    pac = PacServer('function FindProxyForURL(url, host) { return host == "127.0.0.1" ? "PROXY %s" : "DIRECT"; }'
                    % a.address).start()
    try:
        p = proxy_factory(proxy={"upstream_pac": pac.url}, extra_config=arcgis_cred(ags))
        r = get(p, ags.query_url() + "?f=json")
        assert r.status_code == 200 and r.json().get("features"), r.text[:300]
        seen = a.saw()
        assert any(t.startswith(ags.server_root + "/rest/info") for t in seen), seen
        assert any("generateToken" in t for t in a.saw("POST")), seen
        assert any(t.startswith(ags.query_url()) for t in a.saw("GET")), seen
    finally:
        pac.stop()
