"""Client-side header/idle timeouts and upstream stall timeout semantics."""

import select
import time

import harness
from httpraw import ConnectionClosed, RawConn, request_bytes
from origin import pattern


def test_header_timeout_408(proxy_factory, origin):
    p = proxy_factory(proxy={"header_timeout_seconds": 2})
    with RawConn(p.host, p.port, timeout=10) as c:
        c.send(("GET %s/json HTTP/1.1\r\nHost: %s\r\n" % (origin.url, origin.authority)).encode())
        t0 = time.monotonic()
        r = c.read_response()
        elapsed = time.monotonic() - t0
        harness.assert_error_json(r.status, r.get, r.body, 408)
        assert 1.5 <= elapsed <= 6, "408 after %.1fs with header_timeout_seconds=2" % elapsed
        assert c.closed_by_peer(3)
    assert origin.stats()["requests"] == 0


def test_header_timeout_is_total_not_per_byte(proxy_factory, origin):
    """A slowloris client trickling header bytes must still hit the header timeout."""
    p = proxy_factory(proxy={"header_timeout_seconds": 2})
    with RawConn(p.host, p.port, timeout=10) as c:
        c.send(("GET %s/json HTTP/1.1\r\nHost: %s\r\n" % (origin.url, origin.authority)).encode())
        t0 = time.monotonic()
        readable = False
        try:
            for ch in b"X-Slow: " + b"a" * 60:
                if time.monotonic() - t0 > 8:
                    break
                c.send(bytes([ch]))
                readable, _, _ = select.select([c.sock], [], [], 0.25)
                if readable:
                    break
        except (BrokenPipeError, ConnectionResetError):
            readable = True
        elapsed = time.monotonic() - t0
        assert readable and elapsed < 7, "slow header trickle was not cut off (%.1fs)" % elapsed
        try:
            r = c.read_response()
        except (ConnectionClosed, ConnectionResetError):
            r = None
        if r is not None:
            harness.assert_error_json(r.status, r.get, r.body, 408)
    assert origin.stats()["requests"] == 0


def test_idle_keepalive_connection_closed_quietly(proxy_factory, origin):
    p = proxy_factory(proxy={"idle_timeout_seconds": 2, "header_timeout_seconds": 30})
    with RawConn(p.host, p.port, timeout=10) as c:
        c.send(request_bytes("GET", origin.url + "/json", [("Host", origin.authority)]))
        r = c.read_response()
        assert r.status == 200
        assert "close" not in (r.get("Connection") or "").lower(), r.headers
        t0 = time.monotonic()
        # closed_by_peer raises if any bytes (e.g. a 408) arrive
        assert c.closed_by_peer(timeout=8), "idle connection not closed"
        elapsed = time.monotonic() - t0
        assert p.alive(), "proxy process died (exit %s)" % p.proc.poll()
        assert 1.5 <= elapsed <= 6, "idle close after %.1fs with idle_timeout_seconds=2" % elapsed


def test_connection_not_closed_before_idle_timeout(proxy_factory, origin):
    p = proxy_factory(proxy={"idle_timeout_seconds": 4, "header_timeout_seconds": 30})
    with RawConn(p.host, p.port, timeout=10) as c:
        c.send(request_bytes("GET", origin.url + "/json", [("Host", origin.authority)]))
        assert c.read_response().status == 200
        time.sleep(2)
        c.send(request_bytes("GET", origin.url + "/json", [("Host", origin.authority)]))
        assert c.read_response().status == 200


def test_upstream_stall_mid_body_aborts_client(proxy_factory, origin):
    """Head already relayed, then the upstream goes silent: the proxy can't send a
    504, it must cut the client connection about upstream_timeout_seconds after
    the last upstream byte (spec: "stall (no bytes for N s)")."""
    p = proxy_factory(proxy={"upstream_timeout_seconds": 2})
    with RawConn(p.host, p.port, timeout=25) as c:
        c.send(request_bytes("GET", origin.url + "/stall?s=15&phase=body",
                             [("Host", origin.authority)]))
        r = c.read_response(body=False)
        assert r.status == 200
        first = c.read_exact(5)  # the 5 bytes sent before the stall
        assert first == b"01234"
        t0 = time.monotonic()
        try:
            rest = c.read_exact(5)
        except (ConnectionClosed, ConnectionResetError):
            rest = None
        elapsed = time.monotonic() - t0
        assert rest is None, "full body arrived although upstream stalled for 15s (> 2s timeout)"
        assert elapsed <= 5.0, ("client connection cut %.1fs after the last upstream byte; "
                                "expected ~2s (upstream_timeout_seconds=2)" % elapsed)
    assert p.alive()


def test_slow_but_steady_upstream_is_not_a_stall(proxy_factory, origin):
    """upstream_timeout is an inactivity timeout, not a total-duration limit."""
    p = proxy_factory(proxy={"upstream_timeout_seconds": 2})
    r, data = harness.fetch(p, "GET", origin.url + "/drip?count=9&size=1000&interval=0.6",
                            timeout=20)
    assert r.status == 200
    assert data == pattern(9000)
