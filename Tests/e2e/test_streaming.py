"""Big transfers, memory bounds, back-pressure and cancellation."""

import hashlib
import json
import time

import pytest

import harness
from harness import MB
from httpraw import RawConn, request_bytes, wait_until
from origin import iter_pattern, pattern_sha256

RSS_LIMIT = 100 * MB
GB = 1024 * MB


def test_download_1gb_curl_bounded_memory(proxy, origin):
    n = GB
    t0 = time.monotonic()
    r = harness.curl("-x", proxy.url, "-o", "/dev/null", "-w", "%{http_code} %{size_download}",
                     origin.url + "/bytes?n=%d" % n, timeout=180)
    elapsed = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    code, size = r.stdout.decode().split()
    assert code == "200" and int(size) == n, r.stdout
    peak = proxy.hwm()
    print("1 GiB download: %.1fs (%.0f MB/s), proxy VmHWM %.1f MB"
          % (elapsed, n / MB / elapsed, peak / MB))
    assert peak < RSS_LIMIT, "proxy peak RSS %.1f MB" % (peak / MB)


def test_upload_200mb_chunked_streamed_bounded_memory(proxy, origin, session):
    n = 200 * MB
    gen = (bytes(c) for c in iter_pattern(n, 1 << 20))
    t0 = time.monotonic()
    r = session.post(origin.url + "/upload", data=gen, proxies=proxy.proxies, timeout=(10, 180))
    elapsed = time.monotonic() - t0
    assert r.status_code == 200, r.text[:500]
    assert r.json()["size"] == n and r.json()["sha256"] == pattern_sha256(n)
    peak = proxy.hwm()
    print("200 MiB chunked upload: %.1fs, proxy VmHWM %.1f MB" % (elapsed, peak / MB))
    assert peak < RSS_LIMIT, "proxy peak RSS %.1f MB" % (peak / MB)


def test_upload_200mb_fixed_length_curl_bounded_memory(proxy, origin, tmp_path):
    n = 200 * MB
    f = tmp_path / "upload.bin"
    with open(f, "wb") as fh:
        for c in iter_pattern(n, 1 << 20):
            fh.write(c)
    try:
        r = harness.curl("-x", proxy.url, "-T", str(f), origin.url + "/upload", timeout=180)
        assert r.returncode == 0, r.stderr
        e = json.loads(r.stdout)
        assert e["method"] == "PUT"
        assert e["size"] == n and e["sha256"] == pattern_sha256(n)
        assert [v for k, v in e["headers"] if k.lower() == "content-length"] in ([str(n)], []), \
            e["headers"]
    finally:
        f.unlink()
    peak = proxy.hwm()
    print("200 MiB fixed-length upload: proxy VmHWM %.1f MB" % (peak / MB))
    assert peak < RSS_LIMIT, "proxy peak RSS %.1f MB" % (peak / MB)


def test_slow_client_backpressure(proxy, origin):
    """A slow reader of a 300 MB response: the proxy must stop reading upstream
    (origin blocked) instead of buffering."""
    n = 300 * MB
    # warm up so allocator/first-request growth is not counted
    harness.fetch(proxy, "GET", origin.url + "/bytes?n=1000000")
    base_rss = proxy.rss()
    c = RawConn(proxy.host, proxy.port, timeout=15, rcvbuf=64 * 1024)
    try:
        c.send(request_bytes("GET", origin.url + "/bytes?n=%d" % n, [("Host", origin.authority)]))
        r = c.read_response(body=False)
        assert r.status == 200
        received = len(c.buf)
        c.buf.clear()
        t0 = time.monotonic()
        mid = None
        max_rss = 0
        while time.monotonic() - t0 < 5.0:
            b = c.sock.recv(64 * 1024)
            assert b, "connection closed early"
            received += len(b)
            time.sleep(0.05)  # <= ~1.3 MB/s
            max_rss = max(max_rss, proxy.rss())
            if mid is None and time.monotonic() - t0 >= 3.0:
                mid = (origin.stats()["body_bytes_sent"], received)
        end = (origin.stats()["body_bytes_sent"], received)
    finally:
        c.close()
    sent_end, recv_end = end
    sent_mid, recv_mid = mid
    in_flight = sent_end - recv_end
    growth = max_rss - base_rss
    print("slow client: origin sent %.1f MB, client got %.1f MB, in flight %.1f MB, "
          "RSS growth %.1f MB" % (sent_end / MB, recv_end / MB, in_flight / MB, growth / MB))
    assert in_flight < 64 * MB, \
        "origin was not throttled: sent %.1f MB while the client read %.1f MB" % (sent_end / MB, recv_end / MB)
    assert (sent_end - sent_mid) <= (recv_end - recv_mid) + 16 * MB, \
        "origin kept sending while the client was slow (%.1f MB in the last 2 s)" % ((sent_end - sent_mid) / MB)
    assert growth < 64 * MB, "proxy RSS grew by %.1f MB" % (growth / MB)


@pytest.mark.parametrize("path", ["/bytes", "/chunked"])
def test_client_disconnect_aborts_upstream(proxy, origin, path):
    n = GB
    c = RawConn(proxy.host, proxy.port, timeout=10)
    try:
        c.send(request_bytes("GET", origin.url + "%s?n=%d" % (path, n), [("Host", origin.authority)]))
        r = c.read_response(body=False)
        assert r.status == 200
        got = len(c.buf)
        while got < 2 * MB:
            b = c.sock.recv(65536)
            assert b
            got += len(b)
        assert origin.stats()["aborted"] == 0
    finally:
        c.close()
    t0 = time.monotonic()
    ok = wait_until(lambda: origin.stats()["aborted"] >= 1, 3.0)
    elapsed = time.monotonic() - t0
    s = origin.stats()
    assert ok, "origin transfer not aborted within 3s of the client disconnecting: %r" % s
    print("upstream aborted %.2fs after client disconnect; origin sent %.1f MB"
          % (elapsed, s["body_bytes_sent"] / MB))
    assert s["body_bytes_sent"] < 512 * MB
    # proxy is fine afterwards
    r2, data = harness.fetch(proxy, "GET", origin.url + "/json")
    assert r2.status == 200


def test_many_medium_downloads_memory_stable(proxy, origin):
    """Sequential 20 MB downloads on one keep-alive connection must not leak."""
    conn = harness.proxied_conn(proxy, timeout=30)
    n = 20 * MB
    try:
        for i in range(10):
            conn.request("GET", origin.url + "/bytes?n=%d" % n)
            r = conn.getresponse()
            h = hashlib.sha256()
            while True:
                b = r.read(1 << 20)
                if not b:
                    break
                h.update(b)
            assert h.hexdigest() == pattern_sha256(n)
            if i == 1:
                after_two = proxy.rss()
        assert proxy.rss() - after_two < 32 * MB
    finally:
        conn.close()
