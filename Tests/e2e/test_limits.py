"""Limits that protect an upstream: max_concurrent per upstream host and per credential with a bounded FIFO queue
(503 + Retry-After past the queue or its timeout), rate_limit scope = "credential" (one budget for all clients) and
daily_quota (429 + Retry-After). A counting origin records how many requests it has open at once."""

import json
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

import harness
from test_admin import admin_get, samples, start_with_admin, value


class CountingOrigin:
    """A slow origin on 127.0.0.1: each request waits `delay` seconds (or ?delay=S) before its answer; it counts
    requests open at once (the maximum seen) and in total."""

    def __init__(self, delay=0.5):
        self.delay = delay
        self.lock = threading.Lock()
        self.open = 0
        self.max_open = 0
        self.total = 0
        origin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                with origin.lock:
                    origin.open += 1
                    origin.total += 1
                    origin.max_open = max(origin.max_open, origin.open)
                try:
                    delay = origin.delay
                    if "delay=" in self.path:
                        delay = float(self.path.split("delay=", 1)[1].split("&", 1)[0])
                    time.sleep(delay)
                finally:
                    # Done before the answer goes out: once the proxy has the whole answer it may send the next
                    # request, possibly before this thread runs again.
                    with origin.lock:
                        origin.open -= 1
                body = json.dumps({"path": self.path}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 256

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def slow_origin():
    o = CountingOrigin()
    yield o
    o.stop()


def header_cred(name, match, value, extra=""):
    """A `header` credential setting X-Key, with `extra` TOML lines (its limits)."""
    return ('\n[[credential]]\nname = "%s"\ntype = "header"\nmatch = ["%s"]\nheaders = { "X-Key" = "%s" }\n%s'
            % (name, match, value, extra))


def get(p, url, timeout=60):
    s = requests.Session()
    s.trust_env = False
    try:
        return s.get(url, proxies=p.proxies, timeout=timeout)
    finally:
        s.close()


def upstream_cap(port, max_concurrent, max_queued, timeout):
    return ('\n[[upstream]]\nhost = "127.0.0.1"\nport = %d\nmax_concurrent = %d\nmax_queued = %d\n'
            'queue_timeout_seconds = %d\n' % (port, max_concurrent, max_queued, timeout))


def sample(smp, metric, **labels):
    """A sample of `metric` with exactly `labels` (test_admin.value names its first parameter `name`, a label here)."""
    return smp.get((metric, frozenset(labels.items())), 0.0)


def status_limit(p, scope, name):
    st = admin_get(p, "/status.json").json()
    for l in st.get("limits", []):
        if l["scope"] == scope and l["name"] == name:
            return l
    raise AssertionError("no limit %s %s in %s" % (scope, name, st.get("limits")))


def test_host_cap_of_4_with_100_clients(proxy_factory, slow_origin):
    """100 clients at once against a 0.5 s origin behind max_concurrent = 4, max_queued = 40: the origin never has
    more than 4 open, the queued requests complete, the rest get 503 with Retry-After; metrics and status count."""
    p = start_with_admin(proxy_factory, upstream_cap(slow_origin.port, 4, 40, 30))
    name = "127.0.0.1:%d" % slow_origin.port
    barrier = threading.Barrier(100, timeout=30)

    def one(i):
        barrier.wait()
        return get(p, slow_origin.url + "/item/%d" % i)

    with ThreadPoolExecutor(100) as pool:
        answers = list(pool.map(one, range(100)))
    ok = [r for r in answers if r.status_code == 200]
    refused = [r for r in answers if r.status_code == 503]
    assert len(ok) + len(refused) == 100, sorted({r.status_code for r in answers})
    assert slow_origin.max_open <= 4, slow_origin.max_open
    assert slow_origin.max_open == 4  # the cap was reached, not merely respected by a trickle
    # At least the 4 open and the 40 queued when the burst arrived completed; every one of them reached the origin.
    assert len(ok) >= 44, len(ok)
    assert slow_origin.total == len(ok)
    assert refused, "the burst should overflow a queue of 40"
    for r in refused:
        assert int(r.headers["Retry-After"]) >= 1
        assert "max_concurrent" in r.json()["error"]["message"] or "max_concurrent" in r.text
    m = samples(p)
    assert sample(m, "authproxy_upstream_queue_refused_total", name=name, scope="host",
                 reason="queue_full") == len(refused)
    assert sample(m, "authproxy_upstream_open", name=name, scope="host") == 0
    assert sample(m, "authproxy_upstream_queued", name=name, scope="host") == 0
    lim = status_limit(p, "host", name)
    assert lim["maxConcurrent"] == 4 and lim["open"] == 0 and lim["queued"] == 0
    assert lim["refusedQueueFull"] == len(refused)


def test_queue_timeout(proxy_factory, slow_origin):
    """A queued request past queue_timeout_seconds gets 503 with Retry-After and never reaches the origin."""
    p = start_with_admin(proxy_factory, upstream_cap(slow_origin.port, 1, 10, 1))
    name = "127.0.0.1:%d" % slow_origin.port
    holder = ThreadPoolExecutor(1).submit(get, p, slow_origin.url + "/hold?delay=4")
    deadline = time.time() + 5
    while slow_origin.total < 1 and time.time() < deadline:
        time.sleep(0.02)
    started = time.time()
    r = get(p, slow_origin.url + "/waits")
    waited = time.time() - started
    assert r.status_code == 503, r.text
    assert int(r.headers["Retry-After"]) >= 1
    assert "queue_timeout_seconds" in r.text
    assert 0.8 <= waited < 3.5, waited

    assert holder.result(timeout=10).status_code == 200
    assert slow_origin.total == 1  # the timed-out request never went upstream
    m = samples(p)
    assert sample(m, "authproxy_upstream_queue_refused_total", name=name, scope="host", reason="queue_timeout") == 1


def test_a_client_that_leaves_the_queue(proxy_factory, slow_origin):
    """A client that disconnects while queued leaves the queue at once (not at its timeout), and the origin never
    sees its request."""
    p = start_with_admin(proxy_factory, upstream_cap(slow_origin.port, 1, 10, 60))
    name = "127.0.0.1:%d" % slow_origin.port
    holder = ThreadPoolExecutor(1).submit(get, p, slow_origin.url + "/hold?delay=4")
    deadline = time.time() + 5
    while slow_origin.total < 1 and time.time() < deadline:
        time.sleep(0.02)
    port = int(p.authority.rsplit(":", 1)[1])
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(("GET %s/leaves HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (slow_origin.url, slow_origin.port)).encode())
    deadline = time.time() + 3
    while status_limit(p, "host", name)["queued"] != 1 and time.time() < deadline:
        time.sleep(0.05)
    assert status_limit(p, "host", name)["queued"] == 1
    s.close()
    deadline = time.time() + 2
    while status_limit(p, "host", name)["queued"] != 0 and time.time() < deadline:
        time.sleep(0.05)
    lim = status_limit(p, "host", name)
    assert lim["queued"] == 0 and lim["open"] == 1
    assert lim["refusedQueueTimeout"] == 0 and lim["refusedQueueFull"] == 0
    assert holder.result(timeout=10).status_code == 200
    assert slow_origin.total == 1
    assert status_limit(p, "host", name)["open"] == 0


def test_credential_cap_counts_retries(proxy_factory):
    """A credential's max_concurrent = 2 holds across upstream retries: the origin answers 503 to every first
    attempt, the proxy retries, and the origin never has more than 2 requests of the credential open."""
    lock = threading.Lock()
    state = {"open": 0, "max": 0, "total": 0, "seen": set()}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_GET(self):
            with lock:
                state["open"] += 1
                state["total"] += 1
                state["max"] = max(state["max"], state["open"])
                first = self.path not in state["seen"]
                state["seen"].add(self.path)
            try:
                time.sleep(0.3)
            finally:
                with lock:
                    state["open"] -= 1
            status = 503 if first else 200
            body = b"busy" if first else b"ok"
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = "http://127.0.0.1:%d" % server.server_address[1]
    try:
        config = header_cred("svc", url + "/", "k-123",
                             "max_concurrent = 2\nmax_queued = 50\nqueue_timeout_seconds = 30\n")
        p = start_with_admin(proxy_factory, config, proxy={"upstream_retries": 2, "retry_budget_percent": 100})
        with ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(lambda i: get(p, url + "/r%d" % i), range(12)))
        assert [r.status_code for r in answers] == [200] * 12, [r.text for r in answers]
        assert state["total"] == 24  # every request was retried once
        assert state["max"] <= 2, state["max"]
        assert state["max"] == 2
        lim = status_limit(p, "credential", "svc")
        assert lim["maxConcurrent"] == 2 and lim["open"] == 0
    finally:
        server.shutdown()
        server.server_close()


def test_rate_limit_scope_credential_and_daily_quota(proxy_factory, origin):
    """scope = "credential": two clients share one budget of 3; daily_quota = 5: the 6th request of the day is
    refused 429 with a Retry-After to UTC midnight."""
    config = (
        header_cred("shared", origin.url + "/json", "k-1",
                    'rate_limit = { requests = 3, per_seconds = 3600, scope = "credential" }\n')
        + header_cred("metered", origin.url + "/echo", "k-2", "daily_quota = 5\n")
    )
    p = start_with_admin(proxy_factory, config, proxy={"allow_clients": ["127.0.0.0/8"]})

    def curl(source, path):
        """GET through the proxy from `source` (requests cannot bind a source address; curl can)."""
        out = subprocess.run(
            ["curl", "-s", "-o", "/dev/null", "-D", "-", "--interface", source, "-x", "http://" + p.authority,
             origin.url + path], capture_output=True, text=True, timeout=20)
        head = out.stdout
        status = int(head.split(" ", 2)[1])
        retry = None
        for line in head.splitlines():
            if line.lower().startswith("retry-after:"):
                retry = int(line.split(":", 1)[1])
        return status, retry

    # Two clients (127.0.0.1 and 127.0.0.2), one budget of 3.
    got = [curl("127.0.0.1", "/json"), curl("127.0.0.2", "/json"), curl("127.0.0.1", "/json"),
           curl("127.0.0.2", "/json")]
    assert [s for s, _ in got] == [200, 200, 200, 429], got
    assert got[3][1] >= 1

    got = [curl("127.0.0.%d" % (1 + i % 2), "/echo") for i in range(6)]
    assert [s for s, _ in got] == [200] * 5 + [429], got
    midnight = 86400 - int(time.time()) % 86400
    assert abs(got[5][1] - midnight) <= 5
    m = samples(p)
    assert value(m, "authproxy_rate_limited_total", credential="shared", reason="rate") == 1
    assert value(m, "authproxy_rate_limited_total", credential="metered", reason="daily_quota") == 1
    lim = status_limit(p, "credential", "metered")
    assert lim["dailyQuota"] == 5 and lim["dailyQuotaUsed"] == 5
    assert status_limit(p, "credential", "shared")["rateLimitScope"] == "credential"
