"""Regression tests for bugs found in review of the proxy core (each one failed before its fix)."""
import json
import socket
import struct
import subprocess
import threading
import time

import harness


_raw = harness.raw_exchange


def test_reset_after_local_answer_with_pipelined_request_does_not_crash(proxy, origin):
    """A client that resets while a request is queued behind a local answer must not revive the closed
    connection (that started a transfer on freed memory and crashed the proxy)."""
    req = (b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
           b"POST " + origin.url.encode() + b"/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
    for _ in range(300):
        s = socket.create_connection((proxy.host, proxy.port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.sendall(req)
        s.close()
    time.sleep(1)
    assert proxy.alive(), proxy.log_text()[-3000:]
    r, body = harness.fetch(proxy, "GET", origin.url + "/json")
    assert r.status == 200


def test_get_with_body_stays_get(proxy, origin):
    r, body = harness.fetch(proxy, "GET", origin.url + "/echo", body=b"abc", headers={"Content-Length": "3"})
    assert r.status == 200
    info = json.loads(body)
    assert info["method"] == "GET"
    assert info["body_length"] == 3


def test_upstream_transfer_encoding_wins_over_content_length(proxy):
    """An upstream sending both Transfer-Encoding and Content-Length: the client must not get the stale length."""
    port, close = harness.one_shot_backend(
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    out = _raw(proxy, b"GET http://127.0.0.1:%d/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % port)
    close()
    head, _, body = out.partition(b"\r\n\r\n")
    assert b"content-length: 100" not in head.lower(), head
    assert b"transfer-encoding: chunked" in head.lower()
    assert body.startswith(b"5\r\nhello\r\n0\r\n\r\n"), body


def test_half_closed_client_still_gets_its_response(proxy, origin):
    out = _raw(proxy, b"GET " + origin.url.encode() + b"/json HTTP/1.0\r\n\r\n", half_close=True)
    assert out.startswith(b"HTTP/1.1 200"), out[:200]
    assert out.endswith(b"}") or out.rstrip().endswith(b"}"), out[-100:]


def test_slow_steady_reader_is_not_cut_by_idle_timeout(proxy_factory, origin):
    """A client reading steadily (but slower than the idle timeout would allow for a full kernel buffer) must
    receive the whole body."""
    p = proxy_factory(proxy={"idle_timeout_seconds": 2})
    n = 3 * 1024 * 1024
    s = socket.create_connection((p.host, p.port), timeout=30)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    s.sendall(b"GET " + origin.url.encode() + b"/bytes?n=%d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % n)
    received = bytearray()
    deadline = time.time() + 60
    while time.time() < deadline:
        d = s.recv(16384)
        if not d:
            break
        received += d
        time.sleep(0.01)  # ~1.5 MB/s at most: a 3 MB body takes several idle timeouts
    s.close()
    head, sep, body = bytes(received).partition(b"\r\n\r\n")
    assert sep and head.startswith(b"HTTP/1.1 200"), head[:300]
    # The body's bytes, not the stream's: a cut shorter than the head would still leave more than n in all.
    assert len(body) == n, "received %d of %d body bytes" % (len(body), n)


def test_hostname_lookups_do_not_deafen_connections(proxy):
    """Every localhost:PORT is a DNS cache miss for libcurl, so its resolver socketpair comes and goes;
    no request may hang (each refused port answers 502 at once)."""
    codes = {}
    slow = []
    lock = threading.Lock()

    def worker(k):
        for i in range(k, 200, 10):
            port = harness.closed_port()
            t0 = time.time()
            out = _raw(proxy, b"GET http://localhost:%d/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % port, timeout=8)
            code = out.split(b" ")[1] if out else b"none"
            with lock:
                codes[code] = codes.get(code, 0) + 1
                if time.time() - t0 > 3:
                    slow.append(port)

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(10)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert codes == {b"502": 200}, codes
    assert not slow


def test_second_listener_failure_exits_cleanly(tmp_path):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    free = harness.free_port()
    conf = tmp_path / "p.conf"
    conf.write_text(harness.render_config(harness.default_proxy_section(free, str(tmp_path / "s")), harness.default_log_section()))
    r = subprocess.run([harness.proxy_bin(), "serve", "--config", str(conf), "--listen", "127.0.0.1:%d" % free,
                        "--listen", "127.0.0.1:%d" % port], capture_output=True, timeout=20, env=harness.clean_env())
    busy.close()
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    assert b"cannot listen on 127.0.0.1:%d" % port in r.stderr


# ---------------------------------------------------------------------------------------------------------
# Token lifecycle review findings
# ---------------------------------------------------------------------------------------------------------

def test_folded_header_keeps_earlier_fields_of_the_same_name(proxy):
    """An obs-fold continuation replaced every field of that name by the folded one (Set-Cookie lost)."""
    port, close = harness.one_shot_backend(
        b"HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2;\r\n Path=/x\r\nX-After: y\r\n"
        b"Content-Length: 2\r\nConnection: close\r\n\r\nok")
    out = _raw(proxy, b"GET http://127.0.0.1:%d/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % port)
    close()
    head = out.partition(b"\r\n\r\n")[0].lower().split(b"\r\n")
    assert b"set-cookie: a=1" in head, head
    assert b"set-cookie: b=2; path=/x" in head, head
    assert b"x-after: y" in head, head


def test_ssl_token_refusal_answers_a_pipelined_request(proxy_factory, origin):
    """The ssl:true-over-http 502 left a buffered pipelined request waiting for the idle timeout."""
    from arcgis import ArcGISServer
    from test_credentials import arcgis_cred
    s = ArcGISServer(role="server", ssl=True).start()
    try:
        p = proxy_factory(extra_config=arcgis_cred(s))
        req = (b"GET " + s.query_url().encode() + b"?f=json HTTP/1.1\r\nHost: x\r\n\r\n"
               b"GET " + origin.url.encode() + b"/json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        t0 = time.time()
        out = _raw(p, req, timeout=8)
        assert time.time() - t0 < 5, out[:300]
        assert out.startswith(b"HTTP/1.1 502"), out[:300]
        assert out.count(b"HTTP/1.1 ") == 2 and b"HTTP/1.1 200" in out, out[:600]
    finally:
        s.stop()
