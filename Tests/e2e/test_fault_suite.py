"""Fault-injection suite: broken token services, broken upstreams and vanishing clients.

Every scenario holds the proxy to one contract:
- the client gets a clear error (an ArcGIS-style JSON error naming the cause, or a cut connection once the
  response has started) within a bounded time, and nothing hangs;
- afterwards the proxy holds no descriptor for the fault (no socket to the faulty peer, none in CLOSE-WAIT, no
  deleted spill file), its descriptor count is back at its baseline and its thread count back at its baseline
  (both measured after a warm-up), and it still serves a healthy request.

fd exhaustion has its own tests (test_faults.py), since the proxy must run under a low `ulimit -n` there.
"""

import json
import os
import socket
import struct
import subprocess
import threading
import time

import pytest

import harness
from arcgis import ArcGISServer
from harness import ScriptedUpstream, cred

MB = 1024 * 1024


# ---------------------------------------------------------------------------------------------------------
# What the proxy holds
# ---------------------------------------------------------------------------------------------------------

TCP_STATES = {"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1", "05": "FIN_WAIT2",
              "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN",
              "0B": "CLOSING"}


def _tcp_table():
    """socket inode -> (local port, remote port, state) for every TCP socket on this host (IPv4 and IPv6)."""
    out = {}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    local, remote, st, inode = parts[1], parts[2], parts[3], parts[9]
                    out[inode] = (int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16),
                                  TCP_STATES.get(st, st))
        except FileNotFoundError:
            pass
    return out


def held(pid):
    """What the process holds: {"fds": n, "threads": n, "sockets": [(local, remote, state)], "deleted": [paths]}."""
    table = _tcp_table()
    sockets, deleted, n = [], [], 0
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        n += 1
        if target.startswith("socket:["):
            inode = target[8:-1]
            if inode in table:
                sockets.append(table[inode])
        elif target.endswith(" (deleted)"):
            deleted.append(target)
    with open("/proc/%d/status" % pid) as f:
        threads = int(next(l for l in f if l.startswith("Threads:")).split()[1])
    return {"fds": n, "threads": threads, "sockets": sockets, "deleted": deleted}


class Baseline:
    """The proxy's holdings after a warm-up, and the check that a fault left nothing behind.

    Pooled keep-alive connections to healthy upstreams (`pool_ports`: the origin, a recovered token service)
    are the proxy's to keep and are not counted; threads are compared with the count after a warm-up that
    touched every event loop, the token queue included when `token_warm_up` is given (libdispatch keeps one
    thread per serial queue that has run)."""

    def __init__(self, proxy, warm_up, pool_ports=(), token_warm_up=None):
        self.proxy = proxy
        self.warm_up = warm_up
        self.pool_ports = set(pool_ports)
        # Concurrent requests, so that every event loop's queue (and the token queue) runs at once: libdispatch
        # keeps a worker thread per queue that ran concurrently, busy with the loops' 1 s timers, so the
        # high-water mark of a burst is the steady count, not the count after one request.
        jobs = [warm_up] * 96 + ([token_warm_up] * 4 if token_warm_up else [])
        errors = []

        def run(job):
            try:
                job()
            except BaseException as e:  # noqa: BLE001 - reported by the main thread below
                errors.append(repr(e))
        for _ in range(2):
            threads = [threading.Thread(target=run, args=(j,)) for j in jobs]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            # A warm-up that failed or hung measured a proxy that never served: no baseline to compare with.
            assert not any(t.is_alive() for t in threads), "warm-up requests still running after 60 s"
            assert not errors, "%d of %d warm-up requests failed: %s" % (len(errors), len(jobs), errors[:3])
        time.sleep(0.3)
        self.before = held(proxy.pid)

    def _own(self, h):
        """Descriptors that are not pooled upstream connections to a healthy peer."""
        pooled = [s for s in h["sockets"] if s[1] in self.pool_ports and s[2] == "ESTABLISHED"]
        return h["fds"] - len(pooled)

    def assert_recovered(self, fault_ports=(), timeout=12.0):
        """Waits until nothing of the fault is held, then checks the counts and that the proxy still serves."""
        deadline = time.monotonic() + timeout
        while True:
            now = held(self.proxy.pid)
            lingering = [s for s in now["sockets"]
                         if s[1] in fault_ports or s[2] in ("CLOSE_WAIT", "LAST_ACK", "FIN_WAIT1", "FIN_WAIT2")]
            ok = (not lingering and not now["deleted"] and self._own(now) <= self._own(self.before)
                  and now["threads"] <= self.before["threads"])
            if ok or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert not lingering, "sockets left from the fault: %s" % lingering
        assert not now["deleted"], "deleted files still open: %s" % now["deleted"]
        assert self._own(now) <= self._own(self.before), "fds %d after the fault, %d before\n%s\nbefore: %s" % (
            self._own(now), self._own(self.before), now["sockets"], self.before["sockets"])
        assert now["threads"] <= self.before["threads"], "threads %d after the fault, %d before" % (
            now["threads"], self.before["threads"])
        self.warm_up()  # still serving


def timed(fn):
    t0 = time.monotonic()
    out = fn()
    return out, time.monotonic() - t0


read_head = harness.read_head


def reset(c):
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    c.close()


# ---------------------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------------------

@pytest.fixture
def session():
    """A requests session that closes its connection after every request, so none counts against the
    proxy's descriptors."""
    import requests
    s = requests.Session()
    s.trust_env = False
    s.headers["Connection"] = "close"
    yield s
    s.close()


def get(p, session, url, timeout=20, **kw):
    return session.get(url, proxies=p.proxies, timeout=timeout, **kw)


def token_ok(p, ags):
    def warm():
        r, body = harness.fetch(p, "GET", ags.query_url() + "?f=json")
        assert r.status == 200, body[:300]
    return warm


def healthy(p, origin):
    def warm():
        r, body = harness.fetch(p, "GET", origin.url + "/json")
        assert r.status == 200, body
    return warm


# ---------------------------------------------------------------------------------------------------------
# Token service faults
# ---------------------------------------------------------------------------------------------------------

class TokenRig:
    """A proxy with an arcgis-token credential for the server under test (`ags`) and one for a healthy server
    (`healthy`), whose token warms up the proxy's token queue without touching `ags`."""

    def __init__(self, proxy_factory, origin, timeout=3, **extra):
        self.ags = ArcGISServer(role="server", ttl=60, **extra.pop("server", {})).start()
        self.healthy = ArcGISServer(role="server", ttl=60).start()
        self.proxy = proxy_factory(proxy={"upstream_timeout_seconds": timeout},
            extra_config=cred("gis", "arcgis-token", self.ags.server_root, username="alice", password="alice-pass",
                              **extra)
            + cred("other", "arcgis-token", self.healthy.server_root, username="alice", password="alice-pass"))
        self.base = Baseline(self.proxy, healthy(self.proxy, origin),
                             pool_ports=(origin.port, self.ags.port, self.healthy.port),
                             token_warm_up=token_ok(self.proxy, self.healthy))

    def stop(self):
        self.ags.stop()
        self.healthy.stop()


@pytest.mark.parametrize("mode, cause", [
    ("hang", "timed out"),
    ("reset", ""),
    ("error", "Token service is unavailable"),
    ("html", "503"),
    ("garbage", ""),
])
def test_token_service_fault_is_a_clear_502_and_leaves_nothing(proxy_factory, origin, session, mode, cause):
    rig = TokenRig(proxy_factory, origin)
    try:
        p, ags = rig.proxy, rig.ags
        ags.set_token_service(mode, seconds=30) if mode != "html" else ags.set_token_service("down", status=503)
        r, elapsed = timed(lambda: get(p, session, ags.query_url() + "?f=json"))
        err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
        text = json.dumps(err)
        assert "token" in text.lower(), err
        assert cause in text, err
        assert elapsed < 6, "answered after %.1f s" % elapsed
        ags.set_token_service("ok")
        rig.base.assert_recovered()
        # The token service recovered: after the backoff (1 s) the request succeeds.
        deadline = time.monotonic() + 6
        while True:
            r = get(p, session, ags.query_url() + "?f=json")
            if r.status_code == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert r.status_code == 200, r.text[:300]
    finally:
        rig.stop()


def test_token_service_refusing_connections(proxy_factory, origin, session):
    dead = harness.closed_port()
    rig = TokenRig(proxy_factory, origin, token_url="http://127.0.0.1:%d/arcgis/tokens/generateToken" % dead)
    try:
        r, elapsed = timed(lambda: get(rig.proxy, session, rig.ags.query_url() + "?f=json"))
        err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
        assert "token" in json.dumps(err).lower(), err
        assert elapsed < 3
        rig.base.assert_recovered(fault_ports=(dead,))
    finally:
        rig.stop()


def test_server_answering_498_to_every_token(proxy_factory, origin, session):
    rig = TokenRig(proxy_factory, origin, server={"reject_all": True})
    try:
        t0 = time.monotonic()
        for _ in range(20):
            r = get(rig.proxy, session, rig.ags.query_url() + "?f=json")
            assert r.status_code in (200, 498), r.status_code
            assert r.json()["error"]["code"] == 498
        assert time.monotonic() - t0 < 10
        assert len(rig.ags.token_calls()) <= 4, rig.ags.token_calls()
        rig.base.assert_recovered()
    finally:
        rig.stop()


# ---------------------------------------------------------------------------------------------------------
# Upstream faults
# ---------------------------------------------------------------------------------------------------------

def through_resetting_upstream(proxy_factory, origin, response_start):
    """A GET through the proxy to an upstream that sends `response_start` and then resets; checks the fault
    contract and returns what the client received."""
    def behaviour(c):
        read_head(c)
        c.sendall(response_start)
        time.sleep(0.1)
        reset(c)
    up = ScriptedUpstream(behaviour)
    try:
        p = proxy_factory()
        base = Baseline(p, healthy(p, origin), pool_ports=(origin.port,))
        out, elapsed = timed(lambda: harness.raw_exchange(
            p, b"GET %s/x HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (up.url.encode(), up.port), timeout=10))
        assert elapsed < 3
        base.assert_recovered(fault_ports=(up.port,))
        return out
    finally:
        up.close()


def test_upstream_reset_mid_response(proxy_factory, origin):
    out = through_resetting_upstream(proxy_factory, origin,
        b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\nContent-Type: application/octet-stream\r\n\r\n" + b"x" * 30000)
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), out[:200]
    assert len(body) < 100000, "a cut response must not look complete"


def test_upstream_reset_mid_chunk(proxy_factory, origin):
    out = through_resetting_upstream(proxy_factory, origin,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
        + b"5\r\nhello\r\n1000\r\n" + b"y" * 100)
    assert out.startswith(b"HTTP/1.1 200"), out[:200]
    assert not out.endswith(b"0\r\n\r\n"), "a cut chunked response must not end with the last chunk"


def test_upstream_reset_mid_upload(proxy_factory, origin):
    def behaviour(c):
        read_head(c)
        got = 0
        while got < MB:
            d = c.recv(65536)
            if not d:
                return
            got += len(d)
        reset(c)
    up = ScriptedUpstream(behaviour)
    try:
        p = proxy_factory()
        base = Baseline(p, healthy(p, origin), pool_ports=(origin.port,))
        s = socket.create_connection((p.host, p.port), timeout=10)
        n = 20 * MB
        s.sendall(b"PUT %s/up HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Length: %d\r\n\r\n" % (up.url.encode(), up.port, n))
        t0 = time.monotonic()
        # The answer is read while the upload goes on: once the proxy closes with upload bytes unread, the
        # kernel resets the connection, and a reset that arrives first would discard an answer read afterwards.
        answer = bytearray()

        def read_answer():
            try:
                while True:
                    d = s.recv(65536)
                    if not d:
                        break
                    answer.extend(d)
            except OSError:
                pass
        reader = threading.Thread(target=read_answer)
        reader.start()
        sent = 0
        try:
            chunk = b"z" * 65536
            while sent < n:
                s.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass  # the proxy may stop reading and close once the upstream is gone
        reader.join(15)
        assert not reader.is_alive(), "the proxy neither answered nor closed within 15 s"
        s.close()
        elapsed = time.monotonic() - t0
        answer = bytes(answer)
        assert answer.startswith(b"HTTP/1.1 502"), answer[:300]
        assert b"connection: close" in answer.split(b"\r\n\r\n", 1)[0].lower(), answer[:300]
        assert elapsed < 10
        base.assert_recovered(fault_ports=(up.port,))
    finally:
        up.close()


def test_upstream_stall_beyond_the_timeout(proxy_factory, origin):
    stop = threading.Event()

    def behaviour(c):
        read_head(c)
        stop.wait(30)
    up = ScriptedUpstream(behaviour)
    try:
        p = proxy_factory(proxy={"upstream_timeout_seconds": 2})
        base = Baseline(p, healthy(p, origin), pool_ports=(origin.port,))
        (r, body), elapsed = timed(lambda: harness.fetch(p, "GET", up.url + "/slow", timeout=15))
        harness.assert_error_json(r.status, r.getheader, body, 504)
        assert 1.5 < elapsed < 5, elapsed
        stop.set()
        base.assert_recovered(fault_ports=(up.port,))
    finally:
        stop.set()
        up.close()


def test_tls_upstream_stalled_in_the_handshake(proxy_factory, origin):
    """The upstream accepts TCP and never answers the ClientHello (upgrade_to_https makes the proxy speak TLS)."""
    stop = threading.Event()

    def behaviour(c):
        c.recv(4096)
        stop.wait(30)
    up = ScriptedUpstream(behaviour)
    try:
        p = proxy_factory(proxy={"upstream_timeout_seconds": 2},
                          extra_config=cred("k", "api-key", up.url, key="K", upgrade_to_https=True))
        base = Baseline(p, healthy(p, origin), pool_ports=(origin.port,))
        (r, body), elapsed = timed(lambda: harness.fetch(p, "GET", up.url + "/tile", timeout=15))
        err = harness.assert_error_json(r.status, r.getheader, body, 504)
        assert elapsed < 5, elapsed
        assert err
        stop.set()
        base.assert_recovered(fault_ports=(up.port,))
    finally:
        stop.set()
        up.close()


# ---------------------------------------------------------------------------------------------------------
# Clients that vanish
# ---------------------------------------------------------------------------------------------------------

def open_request(p, head, body=b""):
    s = socket.create_connection((p.host, p.port), timeout=10)
    s.sendall(head + body)
    return s


def test_clients_aborting_mid_download(proxy_factory, origin):
    p = proxy_factory()
    base = Baseline(p, healthy(p, origin), pool_ports=(origin.port,))
    head = b"GET %s/bytes?n=%d HTTP/1.1\r\nHost: %s\r\n\r\n" % (origin.url.encode(), 64 * MB, origin.authority.encode())
    socks = []
    for _ in range(20):
        s = open_request(p, head)
        got = 0
        while got < MB:
            got += len(s.recv(65536))
        socks.append(s)
    for s in socks:
        reset(s)
    base.assert_recovered()


def test_clients_aborting_mid_upload(proxy_factory, origin):
    p = proxy_factory()
    base = Baseline(p, healthy(p, origin), pool_ports=(origin.port,))
    head = b"PUT %s/upload HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n" % (
        origin.url.encode(), origin.authority.encode(), 200 * MB)
    socks = [open_request(p, head, b"u" * (2 * MB)) for _ in range(10)]
    time.sleep(0.3)
    for s in socks:
        reset(s)
    base.assert_recovered()


def test_clients_vanishing_during_a_token_wait(proxy_factory, origin):
    rig = TokenRig(proxy_factory, origin, timeout=10)
    try:
        p, ags = rig.proxy, rig.ags
        ags.set_token_service("hang", seconds=3)
        request = b"GET %s?f=json HTTP/1.1\r\nHost: x\r\n\r\n" % ags.query_url().encode()
        socks = [open_request(p, request) for _ in range(500)]
        time.sleep(0.5)
        for s in socks:
            s.close()
        ags.set_token_service("ok")
        rig.base.assert_recovered()
        deadline = time.monotonic() + 6
        while True:
            r, body = harness.fetch(p, "GET", ags.query_url() + "?f=json")
            if r.status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert r.status == 200, body[:300]
    finally:
        rig.stop()


# ---------------------------------------------------------------------------------------------------------
# The state directory is full
# ---------------------------------------------------------------------------------------------------------

def test_state_directory_full_replay_spill(proxy_factory, origin, tmp_path):
    """A token credential keeps a replay copy of uploads, spilled to the state directory past 1 MiB; on a full
    file system the upload still goes through (without the copy) or gets a clear error, never a hang."""
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs unshare -m (root)")
    ags = ArcGISServer(role="server", ttl=60).start()
    state = tmp_path / "tiny-state"
    state.mkdir()
    wrapper = tmp_path / "authproxy-tiny-state"
    wrapper.write_text("#!/bin/sh\nmount -t tmpfs -o size=64k tmpfs %s && exec %s \"$@\"\n" % (state, harness.proxy_bin()))
    wrapper.chmod(0o755)
    try:
        port = harness.free_port()
        cfg = tmp_path / "tiny.toml"
        psec = harness.default_proxy_section(port, str(state))
        cfg.write_text(harness.render_config(psec, harness.default_log_section())
                       + cred("gis", "arcgis-token", ags.server_root, username="alice", password="alice-pass"))
        p = harness.Proxy("unshare", str(cfg), str(tmp_path / "tiny.log"), "127.0.0.1", port,
                          env=harness.clean_env(), args=["-m", str(wrapper), "serve", "--config", str(cfg)],
                          healthz=False)
        p.start()
        try:
            p.wait_ready()
            base = Baseline(p, healthy(p, origin), pool_ports=(origin.port, ags.port), token_warm_up=token_ok(p, ags))
            import requests
            s = requests.Session()
            s.trust_env = False
            s.headers["Connection"] = "close"
            data = os.urandom(8 * MB)
            r, elapsed = timed(lambda: s.post(ags.upload_url(),
                                              data=data, proxies=p.proxies, timeout=30))
            assert elapsed < 15
            if r.status_code == 200:
                assert r.json()["size"] == len(data)
            else:
                err = harness.assert_error_json(r.status_code, r.headers.get, r.content, r.status_code)
                assert r.status_code >= 500 and ("space" in json.dumps(err).lower() or "state" in json.dumps(err).lower()), err
            base.assert_recovered()
        finally:
            p.stop()
    finally:
        ags.stop()
