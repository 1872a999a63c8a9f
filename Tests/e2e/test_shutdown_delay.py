"""Shutdown for shared deployments: min_shutdown_delay_seconds keeps accepting and serving new connections after
SIGTERM (while /readyz says 503), and the opt-in POST /quitquitquit on the admin listener starts the same
shutdown, under the admin listener's Host and cross-site rules."""

import signal
import socket
import time

import requests

import harness
from test_admin import start_with_admin


def session():
    s = requests.Session()
    s.trust_env = False
    return s


def wait_exit(p, timeout):
    deadline = time.time() + timeout
    while p.alive() and time.time() < deadline:
        time.sleep(0.05)
    return p.proc.poll()


def test_new_connections_are_served_during_the_delay(proxy_factory, origin):
    p = start_with_admin(proxy_factory, "", proxy={"min_shutdown_delay_seconds": 3, "shutdown_grace_seconds": 2})
    s = session()
    assert s.get(p.admin + "/readyz", timeout=5).status_code == 200
    p.signalled = True
    sent = time.time()
    p.signal(signal.SIGTERM)
    p.wait_for_log(lambda l: "min_shutdown_delay_seconds" in l, timeout=3)
    # A new connection, well inside the delay: accepted and served.
    time.sleep(1.0)
    c = session()
    r = c.get(origin.url + "/json", proxies=p.proxies, timeout=5)
    assert r.status_code == 200
    assert time.time() - sent < 3
    # Meanwhile /readyz tells the load balancer to stop sending.
    ready = s.get(p.admin + "/readyz", timeout=5)
    assert ready.status_code == 503
    # After the delay the listeners close and the process drains and exits.
    code = wait_exit(p, 10)
    assert code == 0, p.log_text()[-2000:]
    assert time.time() - sent >= 3
    port = int(p.authority.rsplit(":", 1)[1])
    with socket.socket() as k:
        k.settimeout(2)
        assert k.connect_ex(("127.0.0.1", port)) != 0


def test_without_a_delay_sigterm_stops_accepting_at_once(proxy_factory, origin):
    p = proxy_factory()
    p.signalled = True
    p.signal(signal.SIGTERM)
    assert wait_exit(p, 10) == 0


def test_quitquitquit_when_enabled(proxy_factory, origin):
    p = start_with_admin(proxy_factory, "quitquitquit = true\n")
    s = session()
    # Cross-site and simple-form requests are refused: a web page cannot stop the proxy.
    r = s.post(p.admin + "/quitquitquit", headers={"Origin": "http://evil.example"}, timeout=5)
    assert r.status_code == 403 and "cross-site" in r.text
    r = s.post(p.admin + "/quitquitquit", timeout=5)
    assert r.status_code == 403 and "X-Authproxy-Quit" in r.text
    r = s.post(p.admin + "/quitquitquit", headers={"X-Authproxy-Quit": "1", "Sec-Fetch-Site": "cross-site"}, timeout=5)
    assert r.status_code == 403
    # A name the admin listener is not known by (DNS rebinding): 421 before any route.
    r = s.post(p.admin + "/quitquitquit", headers={"X-Authproxy-Quit": "1", "Host": "evil.example"}, timeout=5)
    assert r.status_code == 421
    assert s.get(p.admin + "/quitquitquit", timeout=5).status_code == 405
    assert p.alive()
    assert s.get(origin.url + "/json", proxies=p.proxies, timeout=5).status_code == 200
    p.stopping = True
    r = s.post(p.admin + "/quitquitquit", headers={"X-Authproxy-Quit": "1"}, timeout=5)
    assert r.status_code == 200, r.text
    assert wait_exit(p, 10) == 0, p.log_text()[-2000:]
    assert "POST /quitquitquit" in p.log_text()


def test_quitquitquit_is_not_found_unless_enabled(proxy_factory):
    p = start_with_admin(proxy_factory, "")
    s = session()
    r = s.post(p.admin + "/quitquitquit", headers={"X-Authproxy-Quit": "1"}, timeout=5)
    assert r.status_code == 404
    time.sleep(0.3)
    assert p.alive()
    assert harness.healthz("127.0.0.1", int(p.authority.rsplit(":", 1)[1]))[0] == 200
