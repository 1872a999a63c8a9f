"""Errors produced by the proxy itself: request parsing limits, upstream failures,
origin-form endpoints."""

import json
import subprocess
import shutil
import os
import time

import pytest

import harness
from httpraw import ConnectionClosed, RawConn, request_bytes


def _send_and_read(proxy, data, timeout=8.0):
    c = RawConn(proxy.host, proxy.port, timeout=timeout)
    try:
        c.send(data)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the proxy may answer and close before reading everything
    try:
        r = c.read_response()
    except ConnectionResetError as e:
        c.close()
        raise AssertionError("connection reset before a response arrived: %r" % e)
    return c, r


def _bad_requests(o):
    url = o.url + "/echo"
    host = ("Host", o.authority)
    big_header = [("X-Big-%d" % i, "v" * 1000) for i in range(70)]          # ~71 KiB, 70 fields
    many_headers = [("X-Many-%d" % i, "v") for i in range(150)]              # 150 fields
    return {
        "garbage_request_line": (b"THIS IS NOT HTTP\r\n\r\n", 400),
        "header_without_colon": (request_bytes("GET", url, [host, ("NoColonHere", "")])
                                 .replace(b"NoColonHere: ", b"NoColonHere"), 400),
        "space_in_header_name": (request_bytes("GET", url, [host, ("Bad Name", "v")]), 400),
        "non_numeric_content_length": (request_bytes("POST", url, [host, ("Content-Length", "abc")],
                                                     b"abc"), 400),
        "content_length_and_transfer_encoding": (
            request_bytes("POST", url, [host, ("Content-Length", "5"),
                                        ("Transfer-Encoding", "chunked")], b"0\r\n\r\n"), 400),
        "transfer_coding_gzip_then_chunked": (
            request_bytes("POST", url, [host, ("Transfer-Encoding", "gzip, chunked")],
                          b"0\r\n\r\n"), 501),
        "transfer_coding_unknown_only": (
            request_bytes("POST", url, [host, ("Transfer-Encoding", "x-custom")], b""), 501),
        "request_line_over_8k": (request_bytes("GET", url + "?q=" + "A" * 9000, [host]), 414),
        "header_block_over_64k": (request_bytes("GET", url, [host] + big_header), 431),
        "over_100_header_fields": (request_bytes("GET", url, [host] + many_headers), 431),
    }


BAD_CASES = sorted(_bad_requests(type("O", (), {"url": "http://x:1", "authority": "x:1"})()).keys())


@pytest.mark.parametrize("case", BAD_CASES)
def test_request_parse_errors(proxy, origin, case):
    data, status = _bad_requests(origin)[case]
    c, r = _send_and_read(proxy, data)
    try:
        harness.assert_error_json(r.status, r.get, r.body, status)
        if status == 400:
            assert c.closed_by_peer(timeout=3), "connection must close after a 400"
    finally:
        c.close()
    time.sleep(0.3)
    s = origin.stats()
    assert s["requests"] == 0, "origin saw a request that the proxy should have rejected: %r" % s


def test_limits_positive_controls(proxy, origin):
    """Just below the limits must work (ensures the limits are not too strict)."""
    url = origin.url + "/echo"
    host = ("Host", origin.authority)
    cases = [
        request_bytes("GET", url + "?q=" + "A" * 7000, [host]),
        request_bytes("GET", url, [host] + [("X-Big-%d" % i, "v" * 1000) for i in range(50)]),
        request_bytes("GET", url, [host] + [("X-Many-%d" % i, "v") for i in range(80)]),
    ]
    for data in cases:
        c, r = _send_and_read(proxy, data)
        c.close()
        assert r.status == 200, r


def test_upstream_connection_refused_502(proxy, origin):
    port = harness.closed_port()
    c, r = _send_and_read(proxy, request_bytes("GET", "http://127.0.0.1:%d/json" % port,
                                               [("Host", "127.0.0.1:%d" % port)]))
    c.close()
    err = harness.assert_error_json(r.status, r.get, r.body, 502)
    assert "127.0.0.1" in err["message"], err


def test_upstream_refused_502_with_requests(proxy, session):
    port = harness.closed_port()
    r = session.get("http://127.0.0.1:%d/x" % port, proxies=proxy.proxies, timeout=15)
    harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)


def _netns_available():
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    r = subprocess.run(["unshare", "-n", "true"], capture_output=True)
    return r.returncode == 0


_DNS_SCRIPT = r"""
set -e
ip link set lo up
"$BIN" serve --config "$CONF" 2>"$LOG" &
pid=$!
for i in $(seq 1 100); do
  curl -s --noproxy '*' -o /dev/null "http://127.0.0.1:$PORT/healthz" && break
  sleep 0.1
done
curl -s --noproxy '' -x "http://127.0.0.1:$PORT" -o "$OUT" -w '%{http_code}' "http://$HOST/arcgis/rest/info?f=json" > "$CODE" || true
kill -TERM $pid
wait $pid || true
"""


@pytest.mark.skipif(not _netns_available(), reason="needs unshare -n (root) to isolate DNS from the network")
def test_dns_failure_502(tmp_path):
    """The proxy runs in a private network namespace that has only loopback, so the failing name lookup
    cannot reach any resolver: no traffic leaves the machine."""
    host = "authproxy-e2e-does-not-exist.invalid"
    port = harness.free_port()
    conf = tmp_path / "proxy.conf"
    conf.write_text(harness.render_config(harness.default_proxy_section(port, str(tmp_path / "state")),
                                          harness.default_log_section()))
    env = harness.clean_env({"BIN": harness.proxy_bin(), "CONF": str(conf), "LOG": str(tmp_path / "log"),
                             "PORT": str(port), "HOST": host, "OUT": str(tmp_path / "body"),
                             "CODE": str(tmp_path / "code")})
    subprocess.run(["unshare", "-n", "bash", "-c", _DNS_SCRIPT], env=env, timeout=60, check=True)
    code = (tmp_path / "code").read_text()
    body = (tmp_path / "body").read_bytes()
    assert code == "502", (code, body, (tmp_path / "log").read_text()[-2000:])
    err = json.loads(body)["error"]
    assert err["code"] == 502
    assert host in err["message"], err
    assert "f=json" not in err["message"] + " ".join(err.get("details", []))


def test_upstream_stall_504(proxy_factory, origin):
    p = proxy_factory(proxy={"upstream_timeout_seconds": 2})
    t0 = time.monotonic()
    c, r = _send_and_read(p, request_bytes("GET", origin.url + "/stall?s=10",
                                           [("Host", origin.authority)]), timeout=15)
    elapsed = time.monotonic() - t0
    c.close()
    harness.assert_error_json(r.status, r.get, r.body, 504)
    assert 1.5 <= elapsed <= 7, "504 after %.1fs with upstream_timeout_seconds=2" % elapsed


def test_healthz(proxy):
    status, body = harness.healthz(proxy.host, proxy.port)
    assert status == 200
    assert json.loads(body) == {"status": "ok"}


def test_origin_form_unknown_path_404(proxy):
    with RawConn(proxy.host, proxy.port) as c:
        c.send(request_bytes("GET", "/definitely-not-here", [("Host", proxy.authority)]))
        r = c.read_response()
    harness.assert_error_json(r.status, r.get, r.body, 404)


def test_unmatched_deny(proxy_factory, origin):
    """With unmatched = "deny" (and no credential rules at all) nothing is relayed."""
    p = proxy_factory(proxy={"unmatched": "deny"})
    c, r = _send_and_read(p, request_bytes("GET", origin.url + "/json",
                                           [("Host", origin.authority)]))
    c.close()
    assert 400 <= r.status < 500, r
    harness.assert_error_json(r.status, r.get, r.body, r.status)
    time.sleep(0.3)
    assert origin.stats()["requests"] == 0
    status, _ = harness.healthz(p.host, p.port)
    assert status == 200


def test_proxy_survives_garbage(proxy, origin):
    """After a pile of broken connections the proxy still serves."""
    for data in (b"\x00\x01\x02\r\n\r\n", b"GET\r\n\r\n", b"G" * 20000 + b"\r\n\r\n"):
        try:
            with RawConn(proxy.host, proxy.port, timeout=3) as c:
                c.send(data)
                try:
                    c.read_response()
                except (ConnectionClosed, OSError, ValueError):
                    pass
        except OSError:
            pass
    r, data = harness.fetch(proxy, "GET", origin.url + "/json")
    assert r.status == 200
