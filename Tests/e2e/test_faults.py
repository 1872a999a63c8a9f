"""Reproducers of the defects a fault campaign found, kept as tests: a client resetting mid-upload,
descriptor exhaustion, refused connections over max_connections, shutdown edge cases, malformed upstream
response heads, and a chunk extension sent in small writes."""

import json
import os
import re
import resource
import signal
import socket
import struct
import threading
import time

import pytest

import harness
from harness import cred
from httpraw import ConnectionClosed, RawConn, request_bytes, wait_until


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

def open_fds(pid):
    """What the process's descriptors point at (sockets, files, `... (deleted)` for unlinked files)."""
    d = "/proc/%d/fd" % pid
    out = []
    for n in os.listdir(d):
        try:
            out.append(os.readlink(os.path.join(d, n)))
        except OSError:
            pass  # closed meanwhile
    return out


def deleted_files(pid):
    return [f for f in open_fds(pid) if f.endswith("(deleted)")]


def access_statuses(p):
    return [harness.parse_kv(l).get("status") for l in harness.access_lines_text(p)]


def reset(sock):
    """Closes `sock` with a TCP reset (SO_LINGER 0)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


# ---------------------------------------------------------------------------
# chunk extensions are limited per chunk, not per read
# ---------------------------------------------------------------------------

def test_chunk_extension_sent_in_small_writes_is_refused(proxy, origin):
    """200 KB of chunk extension in 1 KB writes: 400, as when the same bytes come in one write (the 4 KiB limit
    was counted per decode call, so small writes slipped through)."""
    c = RawConn(proxy.host, proxy.port, timeout=10)
    c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c.send(request_bytes("POST", origin.url + "/echo", [("Host", origin.authority),
                                                         ("Transfer-Encoding", "chunked")]))
    c.send(b"5;")
    try:
        for _ in range(200):
            c.send(b"a" * 1000)
            time.sleep(0.002)
        c.send(b"\r\nhello\r\n0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass  # the proxy answered and closed while we were still sending
    r = c.read_response()
    harness.assert_error_json(r.status, r.get, r.body, 400)
    assert "extension" in r.json()["error"]["message"]
    assert r.get("Connection") == "close"
    c.close()
    # The proxy still serves.
    resp, body = harness.fetch(proxy, "GET", origin.url + "/json")
    assert resp.status == 200


# ---------------------------------------------------------------------------
# response-head hygiene (RFC 9112): heads a lenient client could read differently are never relayed
# ---------------------------------------------------------------------------

MALFORMED_HEADS = {
    "space-before-colon": b"HTTP/1.1 200 OK\r\nContent-Length : 99\r\nContent-Length: 5\r\n\r\nhello",
    "tab-before-colon": b"HTTP/1.1 200 OK\r\nX-A\t: 1\r\nContent-Length: 5\r\n\r\nhello",
    "bare-cr-in-value": b"HTTP/1.1 200 OK\r\nX-A: a\rContent-Length: 99\r\nContent-Length: 5\r\n\r\nhello",
    "two-content-lengths": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\nhello12",
    "content-length-list": b"HTTP/1.1 200 OK\r\nContent-Length: 7, 5\r\n\r\nhello12",
    "content-length-sign": b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello",
    "name-with-space": b"HTTP/1.1 200 OK\r\nX A: 1\r\nContent-Length: 5\r\n\r\nhello",
}


@pytest.fixture
def scripted():
    made = []

    def make(respond):
        b = harness.ScriptedBackend(respond)
        made.append(b)
        return b

    yield make
    for b in made:
        b.close()


def _good(path):
    body = ("answer for %s" % path).encode()
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


@pytest.mark.parametrize("case", list(MALFORMED_HEADS))
def test_malformed_upstream_head_is_refused_without_desync(proxy, scripted, case):
    backend = scripted(lambda path: MALFORMED_HEADS[case] if path == "/bad" else _good(path))
    with RawConn(proxy.host, proxy.port, timeout=10) as c:
        c.send(request_bytes("GET", backend.url("/bad"), [("Host", "127.0.0.1:%d" % backend.port)]))
        r = c.read_response()
        err = harness.assert_error_json(r.status, r.get, r.body, 502)
        assert "invalid response" in err["message"], err
        assert r.get("Connection") != "close"
        # The next request on the same client connection gets its own answer, nothing of the refused one.
        c.send(request_bytes("GET", backend.url("/next"), [("Host", "127.0.0.1:%d" % backend.port)]))
        r2 = c.read_response()
        assert (r2.status, r2.body) == (200, b"answer for /next"), r2
        assert r2.get_all("Content-Length") == ["16"]
        c.settimeout(0.5)
        with pytest.raises(socket.timeout):
            c.read_some()  # no stray bytes after the answer
    # The refused response's upstream connection was closed, not reused for /next.
    assert [conn for conn in backend.connections if conn] == [["GET /bad HTTP/1.1"], ["GET /next HTTP/1.1"]]
    assert proxy.wait_for_log(r"upstream response refused.*cause=")
    assert access_statuses(proxy)[-2:] == ["502", "200"]


def test_identical_content_lengths_are_collapsed(proxy, scripted):
    backend = scripted(lambda path: b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5, 5\r\n\r\nhello")
    with RawConn(proxy.host, proxy.port, timeout=10) as c:
        c.send(request_bytes("GET", backend.url("/x"), [("Host", "127.0.0.1:%d" % backend.port)]))
        r = c.read_response()
        assert (r.status, r.body) == (200, b"hello")
        assert r.get_all("Content-Length") == ["5"]


# ---------------------------------------------------------------------------
# a client that resets in the middle of its upload
# ---------------------------------------------------------------------------

def _start_upload(p, url, declared=200 << 20):
    s = socket.create_connection((p.host, p.port))
    s.sendall(("POST %s HTTP/1.1\r\nHost: upload.test\r\nContent-Type: application/octet-stream\r\n"
               "Content-Length: %d\r\n\r\n" % (url, declared)).encode())
    return s


def _send_until_blocked(s, limit, stall=1.0):
    """Sends zeros until `limit` bytes are out or a send blocks for `stall` seconds -> bytes sent."""
    s.settimeout(stall)
    chunk = b"\0" * 65536
    sent = 0
    try:
        while sent < limit:
            sent += s.send(chunk)
    except socket.timeout:
        pass
    return sent


def _back_to(p, baseline, timeout):
    """Waits until the proxy holds no more descriptors than `baseline` -> seconds it took, or None."""
    t0 = time.monotonic()
    ok = wait_until(lambda: len(open_fds(p.pid)) <= len(baseline), timeout)
    return time.monotonic() - t0 if ok else None


@pytest.mark.parametrize("mb", [2, 8, 20])
def test_client_reset_mid_upload_is_noticed_at_once(proxy_factory, ags, session, mb):
    """Declares 200 MB, sends a few MB with a refreshable token (so the body is copied to a replay spill file),
    then resets: the proxy drops the client socket, the upstream transfer and the spill file within ~2 s (they
    stayed until the 60 s idle timeout) and logs 499."""
    p = proxy_factory(extra_config=cred("gis", "arcgis-token", ags.server_root, username="alice",
                                        password="alice-pass"))
    assert session.get(ags.query_url() + "?f=json", proxies=p.proxies, timeout=10).status_code == 200
    time.sleep(0.3)
    baseline = open_fds(p.pid)
    assert not deleted_files(p.pid)
    for i in range(3):
        s = _start_upload(p, ags.upload_url())
        s.sendall(b"\0" * (mb << 20))
        t0 = time.monotonic()
        reset(s)
        # Within seconds, not at the 60 s idle timeout (room for a loaded debug build).
        assert wait_until(lambda: access_statuses(p).count("499") == i + 1, 10), p.log_text()[-2000:]
        assert _back_to(p, baseline, 5.0) is not None, "descriptors still open: %r" % sorted(open_fds(p.pid))
        assert time.monotonic() - t0 < 10
        assert not deleted_files(p.pid), "replay spill file still open"
    uploads = [harness.parse_kv(l) for l in harness.access_lines_text(p) if "/upload" in l]
    assert [u["status"] for u in uploads] == ["499"] * 3
    # And the proxy still serves, token and all.
    assert session.get(ags.query_url() + "?f=json", proxies=p.proxies, timeout=10).status_code == 200


def test_client_reset_while_upload_is_held_back_by_the_upstream(proxy, scripted):
    """The upstream takes nothing, so the proxy stops reading the client (back-pressure); a reset is still found
    (a probe of the paused socket) and everything is released at once."""
    stalled = socket.socket()
    stalled.bind(("127.0.0.1", 0))
    stalled.listen(4)
    held = []
    threading.Thread(target=lambda: held.append(stalled.accept()), daemon=True).start()
    try:
        time.sleep(0.3)
        baseline = open_fds(proxy.pid)
        s = _start_upload(proxy, "http://127.0.0.1:%d/upload" % stalled.getsockname()[1])
        sent = _send_until_blocked(s, 64 << 20)
        assert sent > 256 * 1024 and sent < 64 << 20, sent
        t0 = time.monotonic()
        reset(s)
        # Within seconds, not at the 60 s idle timeout (room for a loaded debug build).
        lines = proxy.wait_for_log(r"status=499", timeout=10)
        assert lines, proxy.log_text()[-2000:]
        assert time.monotonic() - t0 < 10
        assert _back_to(proxy, baseline, 2) is not None, sorted(open_fds(proxy.pid))
    finally:
        stalled.close()
        for c, _ in held:
            c.close()


# ---------------------------------------------------------------------------
# shutdown
# ---------------------------------------------------------------------------

def _exit_code(p, timeout=15):
    try:
        return p.proc.wait(timeout)
    except Exception:  # noqa: BLE001
        pytest.fail("proxy still running %d s after SIGTERM" % timeout)


def test_request_cut_by_the_grace_period_is_logged(proxy_factory, origin):
    """Exchanges still running when the grace period ends are logged: one waiting for its answer gets a 503 (it
    had no access-log line), one whose body is streaming is cut and logged with its status."""
    p = proxy_factory(proxy={"shutdown_grace_seconds": 2})
    waiting = RawConn(p.host, p.port, timeout=15)
    waiting.send(request_bytes("GET", origin.url + "/stall?s=30", [("Host", origin.authority)]))
    streaming = RawConn(p.host, p.port, timeout=15)
    streaming.send(request_bytes("GET", origin.url + "/stall?s=30&phase=body", [("Host", origin.authority)]))
    head = streaming.read_head()
    assert head[1] == 200
    assert wait_until(lambda: origin.stats()["paths"].get("/stall") == 2, 5)
    t0 = time.monotonic()
    p.signal(signal.SIGTERM)
    assert _exit_code(p) == 0
    assert time.monotonic() - t0 < 6
    r = waiting.read_response()
    harness.assert_error_json(r.status, r.get, r.body, 503)
    assert "shutting down" in r.json()["error"]["message"]
    assert r.get("Connection") == "close"
    with pytest.raises(ConnectionClosed):
        streaming.read_exact(10)  # cut: the body never completes
    stalls = [harness.parse_kv(l) for l in harness.access_lines_text(p) if "url=%s/stall" % origin.url in l]
    assert sorted(s["status"] for s in stalls) == ["200", "503"], p.log_text()[-2000:]
    waiting.close()
    streaming.close()


def test_connect_tunnel_gets_the_grace_period(proxy_factory, halfclose_server):
    """A blind CONNECT tunnel keeps relaying after SIGTERM (both ways, half-close included) until it ends or the
    grace period does; its access line is written either way."""
    p = proxy_factory(proxy={"connect_ports": [halfclose_server.port], "shutdown_grace_seconds": 4})
    target = "127.0.0.1:%d" % halfclose_server.port

    def tunnel():
        c = RawConn(p.host, p.port, timeout=15)
        c.send(request_bytes("CONNECT", target, [("Host", target)]))
        assert c.read_response(method="CONNECT").status == 200
        return c

    finishing = tunnel()
    idle = tunnel()
    finishing.send(b"before")
    t0 = time.monotonic()
    p.signal(signal.SIGTERM)
    time.sleep(1.0)
    finishing.send(b" after")
    finishing.sock.shutdown(socket.SHUT_WR)
    data = finishing.read_to_eof()
    assert data.startswith(b"got 12 ") and data.endswith(b"before after"), data
    # The other tunnel stays open until the grace period ends, then the proxy exits.
    assert _exit_code(p) == 0
    assert 3 < time.monotonic() - t0 < 8
    connects = [harness.parse_kv(l) for l in harness.access_lines_text(p) if "method=CONNECT" in l]
    assert [c["status"] for c in connects] == ["200", "200"], p.log_text()[-2000:]
    assert sorted(int(c["bytes_in"]) for c in connects) == [0, 12]
    finishing.close()
    idle.close()


def test_request_just_after_sigterm_gets_connection_close(proxy_factory, origin):
    """Kept-alive clients that send a request just after SIGTERM get their answer with Connection: close (they got a
    reset); connections that stay idle are closed gracefully and the proxy exits well within the grace period."""
    p = proxy_factory(proxy={"shutdown_grace_seconds": 10})
    conns = [RawConn(p.host, p.port, timeout=10) for _ in range(4)]
    for c in conns:
        c.send(request_bytes("GET", origin.url + "/json", [("Host", origin.authority)]))
        assert c.read_response().status == 200
    t0 = time.monotonic()
    p.signal(signal.SIGTERM)
    time.sleep(0.1)
    for c in conns[:3]:
        c.send(request_bytes("GET", origin.url + "/json", [("Host", origin.authority)]))
    for c in conns[:3]:
        r = c.read_response()
        assert r.status == 200 and r.json()["hello"] == "world"
        assert r.get("Connection") == "close"
        assert c.closed_by_peer(3)
    # The idle one is closed without a word.
    assert conns[3].closed_by_peer(6)
    assert _exit_code(p) == 0
    assert time.monotonic() - t0 < 7
    for c in conns:
        c.close()


# ---------------------------------------------------------------------------
# connections refused over max_connections
# ---------------------------------------------------------------------------

def _held_connection(p):
    """A connection the proxy adopted (proved by a kept-alive /healthz exchange)."""
    c = RawConn(p.host, p.port, timeout=5)
    c.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert c.read_response().status == 200
    return c


def _refused(p):
    """True when the proxy closes a new connection without answering."""
    try:
        c = RawConn(p.host, p.port, timeout=5)
    except OSError:
        return True
    try:
        c.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        return c.read_some() == b""
    except OSError:
        return True
    finally:
        c.close()


def test_refusals_over_max_connections_are_logged_and_counted(proxy_factory):
    """One log line per 10 s however many connections are refused, with the number held back and the running
    total the server keeps."""
    p = proxy_factory(proxy={"max_connections": 3, "max_connections_per_client": 3})

    def refusal_lines():
        return [l for l in p.log_lines() if "connection refused" in l and "max_connections (3)" in l]

    time.sleep(1.5)  # the readiness probe's connection is given back
    held = [_held_connection(p) for _ in range(3)]
    try:
        assert all(_refused(p) for _ in range(20))
        assert wait_until(refusal_lines, 3), p.log_text()[-2000:]
        lines = refusal_lines()
        assert len(lines) == 1, lines
        assert harness.parse_kv(lines[0])["refused_total"] == "1"
        time.sleep(10.2)  # the throttle's interval
        assert _refused(p)
        assert wait_until(lambda: len(refusal_lines()) == 2, 3), p.log_text()[-2000:]
        lines = refusal_lines()
        kv = harness.parse_kv(lines[1])
        assert (kv["refused_total"], kv["refused_since_last_report"]) == ("21", "19"), lines[1]
    finally:
        for c in held:
            c.close()
    # Slots come back: the proxy serves again.
    assert wait_until(lambda: not _refused(p), 5)


# ---------------------------------------------------------------------------
# running out of file descriptors
# ---------------------------------------------------------------------------

def test_descriptor_exhaustion_is_503_logged_and_recovers(proxy_factory, origin):
    """`ulimit -n 64` and 150 concurrent clients: the proxy's own descriptor shortage is reported as 503 with
    Retry-After (it was 502 "connection refused or unreachable" about a healthy upstream), logged clearly and
    rate-limited, no client waits long, and the proxy serves normally once the clients are gone."""
    p = proxy_factory(proxy={"workers": 2})
    time.sleep(0.3)
    assert len(open_fds(p.pid)) < 40
    resource.prlimit(p.pid, resource.RLIMIT_NOFILE, (64, 64))
    results = []
    lock = threading.Lock()

    def client():
        t0 = time.monotonic()
        try:
            with RawConn(p.host, p.port, timeout=60) as c:
                c.send(request_bytes("GET", origin.url + "/stall?s=0.5", [("Host", origin.authority)]))
                r = c.read_response()
            out = (r, time.monotonic() - t0)
        except (OSError, ConnectionClosed) as e:
            out = (e, time.monotonic() - t0)
        with lock:
            results.append(out)

    threads = [threading.Thread(target=client) for _ in range(150)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert len(results) == 150
    errors = [r for r, _ in results if not hasattr(r, "status")]
    assert not errors, errors[:3]
    # Which clients meet the shortage depends on timing: a client refused at accept() waits in the backlog and
    # is served once descriptors come back (200); one accepted just before may find no descriptor for its
    # upstream socket (503). Nothing else may happen; the 503 itself is pinned down deterministically below.
    statuses = {r.status for r, _ in results}
    assert statuses <= {200, 503} and 200 in statuses, statuses
    for r, _ in results:
        if r.status == 503:
            err = harness.assert_error_json(r.status, r.get, r.body, 503)
            assert "out of file descriptors" in err["message"]
            assert r.get("Retry-After") == "1"
    assert max(took for _, took in results) < 15
    lines = p.wait_for_log(r"error out of file descriptors")
    assert lines and "limit=64" in lines[0] and "EMFILE" in lines[0], p.log_text()[-2000:]
    assert len(lines) <= 3, lines  # at most one line per 5 s, with counts
    assert not [l for l in harness.access_lines_text(p) if "status=502" in l]
    # The clients are gone: the proxy serves normally.
    for _ in range(5):
        resp, body = harness.fetch(p, "GET", origin.url + "/json")
        assert resp.status == 200


def test_no_descriptor_for_the_upstream_socket_is_503_not_502(proxy_factory, origin):
    """Deterministic: a client already adopted, and not one descriptor left for its upstream socket. The answer
    is the proxy's own 503 with Retry-After naming the shortage (not 502 about a healthy upstream), it is
    logged, and the same proxy serves once the limit allows again."""
    p = proxy_factory()
    time.sleep(0.3)
    held = _held_connection(p)
    try:
        time.sleep(0.3)  # settled: nothing left over from the readiness probe
        soft, hard = resource.prlimit(p.pid, resource.RLIMIT_NOFILE)
        n = len(open_fds(p.pid))
        resource.prlimit(p.pid, resource.RLIMIT_NOFILE, (n, hard))
        held.send(request_bytes("GET", origin.url + "/json", [("Host", origin.authority)]))
        r = held.read_response()
        err = harness.assert_error_json(r.status, r.get, r.body, 503)
        assert "out of file descriptors" in err["message"], err
        assert r.get("Retry-After") == "1"
        lines = p.wait_for_log(r"error out of file descriptors")
        assert lines and "limit=%d" % n in lines[0] and "EMFILE" in lines[0], p.log_text()[-2000:]
        resource.prlimit(p.pid, resource.RLIMIT_NOFILE, (soft, hard))
    finally:
        held.close()
    resp, _ = harness.fetch(p, "GET", origin.url + "/json")
    assert resp.status == 200
    assert not [l for l in harness.access_lines_text(p) if "status=502" in l]


def _max_open_files(pid):
    with open("/proc/%d/limits" % pid) as f:
        for line in f:
            if line.startswith("Max open files"):
                soft, hard = line.split()[3:5]
                return int(soft), int(hard)
    raise AssertionError("no Max open files in /proc/%d/limits" % pid)


def test_soft_descriptor_limit_is_raised_to_the_hard_one(proxy_binary, tmp_path):
    """A soft limit of 256 under a higher hard one (systemd's default is 1024 soft) is raised at start, and the
    budget is checked against max_connections."""
    port = harness.free_port()
    cfg = tmp_path / "p.toml"
    cfg.write_text(harness.render_config(harness.default_proxy_section(port, str(tmp_path / "state")),
                                         harness.default_log_section()))
    _, hard = _max_open_files(os.getpid())
    p = harness.Proxy("bash", str(cfg), str(tmp_path / "p.log"), "127.0.0.1", port, healthz=True,
                      args=["-c", 'ulimit -Sn 256 && exec "$0" serve --config "$1"', proxy_binary, str(cfg)])
    try:
        p.start()
        assert _max_open_files(p.pid) == (hard, hard)
        assert p.wait_for_log(r"descriptor limit raised from=256 to=%d" % hard)
        budget_warning = p.wait_for_log(r"allows fewer connections than max_connections", timeout=0.2)
        assert bool(budget_warning) == (hard // 2 < 10000), p.log_text()
    finally:
        p.stop()
