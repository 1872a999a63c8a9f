"""Signals, graceful shutdown, multiple / IPv6 listeners."""

import json
import signal
import socket
import threading
import time

import pytest

import harness
from httpraw import wait_until


def _new_request_refused(p):
    """True if the proxy no longer serves new connections."""
    try:
        status, _ = harness.healthz(p.host, p.port, timeout=2)
    except (OSError, Exception):  # refused, reset, EOF, timeout, bad status line
        return True
    return status != 200


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_signal_idle_exits_zero(proxy, sig):
    proxy.signal(sig)
    try:
        code = proxy.proc.wait(8)
    except Exception:
        pytest.fail("proxy did not exit within 8s of %s" % sig.name)
    assert code == 0, proxy.log_text()[-2000:]


def test_sigterm_lets_inflight_request_finish(proxy_factory, origin, session):
    p = proxy_factory(proxy={"shutdown_grace_seconds": 10})
    result = {}

    def client():
        try:
            r = session.get(origin.url + "/stall?s=3", proxies=p.proxies, timeout=20)
            result["status"] = r.status_code
            result["body"] = r.content
        except Exception as e:  # noqa: BLE001
            result["error"] = e

    t = threading.Thread(target=client)
    t.start()
    assert wait_until(lambda: origin.stats()["paths"].get("/stall"), 5), "request never reached origin"
    t_sig = time.monotonic()
    p.signal(signal.SIGTERM)
    time.sleep(0.7)
    assert _new_request_refused(p), "proxy still accepts new requests after SIGTERM"
    t.join(20)
    assert "error" not in result, "in-flight request failed: %r" % result.get("error")
    assert result.get("status") == 200
    assert json.loads(result["body"]) == {"stalled": 3.0}
    try:
        code = p.proc.wait(10)
    except Exception:
        pytest.fail("proxy did not exit after the in-flight request completed")
    assert code == 0, p.log_text()[-2000:]
    assert time.monotonic() - t_sig < 10


def test_sigterm_grace_is_bounded(proxy_factory, origin):
    p = proxy_factory(proxy={"shutdown_grace_seconds": 2})
    s = socket.create_connection((p.host, p.port), timeout=30)
    try:
        s.sendall(("GET %s/stall?s=30 HTTP/1.1\r\nHost: %s\r\n\r\n"
                   % (origin.url, origin.authority)).encode())
        assert wait_until(lambda: origin.stats()["paths"].get("/stall"), 5)
        t0 = time.monotonic()
        p.signal(signal.SIGTERM)
        try:
            p.proc.wait(10)
        except Exception:
            pytest.fail("proxy still running 10s after SIGTERM with shutdown_grace_seconds=2")
        assert time.monotonic() - t0 < 7
    finally:
        s.close()


def test_multiple_listeners(proxy_factory, origin):
    p1, p2 = harness.free_port(), harness.free_port()
    p = proxy_factory(proxy={"listen": ["127.0.0.1:%d" % p1, "127.0.0.1:%d" % p2]}, ready_port=p1)
    harness.Proxy.wait_ready(p, port=p2)
    for port in (p1, p2):
        p.port = port
        r, data = harness.fetch(p, "GET", origin.url + "/json")
        assert r.status == 200


def test_ipv6_listener(proxy_factory, origin):
    if not harness.ipv6_available():
        pytest.skip("::1 not available")
    p4, p6 = harness.free_port(), harness.free_port("::1")
    p = proxy_factory(proxy={"listen": ["127.0.0.1:%d" % p4, "[::1]:%d" % p6]}, ready_port=p4)
    p.wait_ready(host="::1", port=p6)
    status, body = harness.healthz("::1", p6)
    assert status == 200 and json.loads(body) == {"status": "ok"}
    p.host, p.port = "::1", p6
    r, data = harness.fetch(p, "GET", origin.url + "/echo")
    assert r.status == 200
    assert r.getheader("Via") == "1.1 authproxy"
