"""WebSocket through the proxy, the ArcGIS case being stream services
(`.../StreamServer/subscribe?token=...`): absolute form (`GET http://...` and `GET ws://...` with Upgrade), CONNECT
with plain HTTP inside (Python `websockets` with `proxy=`), the credential applied to the handshake, a rejected
handshake retried once with a fresh token, unmatched hosts untouched, back-pressure, refusals and the access log."""
import json
import re
import socket
import time

import pytest

websockets = pytest.importorskip("websockets", minversion="15")
from websockets.sync.client import connect as ws_connect  # noqa: E402

import harness  # noqa: E402
from harness import cred  # noqa: E402
from arcgis import ArcGISServer  # noqa: E402
from wsecho import FLOOD_FRAME, FLOOD_FRAMES, PATH, EchoServer, frame, handshake_bytes, read_frame, read_head  # noqa: E402,E501


@pytest.fixture
def echo():
    s = EchoServer(accept=lambda t: t == "WS-KEY").start()
    yield s
    s.stop()


@pytest.fixture
def open_echo():
    s = EchoServer().start()
    yield s
    s.stop()


def api_key(echo, key="WS-KEY", scheme="ws"):
    return cred("stream", "api-key", echo.url(scheme, "/arcgis"), key=key)


# ---------------------------------------------------------------------------------------------------------
# A minimal client over a raw socket: handshake by hand, masked frames out, unmasked frames in
# ---------------------------------------------------------------------------------------------------------

def inside_connect(p, port, data):
    """CONNECT 127.0.0.1:`port` through the proxy (expecting its 200), send `data` inside the tunnel, and return
    everything that comes back until the proxy closes."""
    s = socket.create_connection((p.host, p.port), timeout=10)
    try:
        s.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (port, port))
        head, out = read_head(s)
        assert head.startswith("HTTP/1.1 200"), head
        s.sendall(data)
        while True:
            d = s.recv(65536)
            if not d:
                break
            out += d
        return out
    finally:
        s.close()


def raw_websocket(p, target, host):
    s = socket.create_connection((p.host, p.port), timeout=10)
    s.sendall(handshake_bytes(target, host))
    head, rest = read_head(s)
    return s, head, rest


def echo_once(s, rest, text=b"hello stream"):
    s.sendall(frame(text))
    op, payload, rest = read_frame(s, rest)
    assert (op, payload) == (1, text)
    s.sendall(frame(b"", opcode=8))  # close
    return rest


# ---------------------------------------------------------------------------------------------------------
# (a) (b) (d) absolute form, the credential applied
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("scheme", ["http", "ws"])
def test_absolute_form_upgrade_gets_the_token(proxy_factory, echo, scheme):
    p = proxy_factory(extra_config=api_key(echo))
    s, head, rest = raw_websocket(p, echo.url(scheme) + "?f=json", "127.0.0.1:%d" % echo.port)
    try:
        assert head.startswith("HTTP/1.1 101"), head
        assert re.search(r"(?im)^upgrade: websocket$", head) and re.search(r"(?im)^connection: upgrade$", head), head
        assert re.search(r"(?im)^sec-websocket-accept: ", head) and re.search(r"(?im)^via: ", head), head
        echo_once(s, rest)
    finally:
        s.close()
    # The client sent no token; the server saw the proxy's, and the client's own query kept.
    assert echo.tokens() == ["WS-KEY"], echo.handshakes
    path, headers, _ = echo.handshakes[0]
    assert "f=json" in path
    assert headers.get("Upgrade", "").lower() == "websocket"


def test_absolute_form_websockets_client_sends_get_ws(proxy_factory, echo):
    """curl <= 8.20 sends GET ws://...; websockets has no such mode, so the raw client stands in (b), and the
    refused handshake without a credential shows the token is what made the difference (d)."""
    p = proxy_factory()  # no credential: the server refuses the handshake and the client gets its answer
    s, head, _ = raw_websocket(p, echo.url("ws"), "127.0.0.1:%d" % echo.port)
    s.close()
    assert head.startswith("HTTP/1.1 498"), head
    assert echo.tokens() == [None]


def test_absolute_form_wss_goes_upstream_over_tls(proxy_factory, tls_cert):
    """`GET wss://...` to the proxy in plain text: the proxy speaks TLS upstream (libcurl-made, with the host's
    server-trust) and relays the frames over it."""
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tls_cert[0], tls_cert[1])
    s = EchoServer(accept=lambda t: t == "WSS-KEY", ssl_context=ctx).start()
    try:
        p = proxy_factory(extra_config=cred("stream", "api-key", s.url("wss", "/arcgis"), key="WSS-KEY")
                          + cred("trust", "server-trust", s.url("https", "/"), ca_file=tls_cert[0]))
        sock, head, rest = raw_websocket(p, s.url("wss"), "127.0.0.1:%d" % s.port)
        try:
            assert head.startswith("HTTP/1.1 101"), head
            echo_once(sock, rest, b"over tls " * 100)
        finally:
            sock.close()
        assert s.tokens() == ["WSS-KEY"], s.handshakes
    finally:
        s.stop()


# ---------------------------------------------------------------------------------------------------------
# (c) CONNECT with plain HTTP inside, on a port outside connect_ports
# ---------------------------------------------------------------------------------------------------------

def test_websockets_client_through_connect_gets_the_token(proxy_factory, echo):
    p = proxy_factory(proxy={"connect_ports": [443]}, extra_config=api_key(echo))
    assert echo.port != 443
    with ws_connect(echo.url(), proxy=p.url, open_timeout=10) as ws:
        ws.send("ping")
        assert ws.recv(timeout=10) == "ping"
    assert echo.tokens() == ["WS-KEY"], echo.handshakes


def test_plain_http_inside_a_matched_connect_is_served(proxy_factory, echo, origin):
    """A matched CONNECT carrying ordinary HTTP: the requests inside go to http://host:port with the credential."""
    p = proxy_factory(extra_config=cred("o", "api-key", origin.url + "/echo", key="IN-TUNNEL"))
    port = int(origin.url.rsplit(":", 1)[1])
    out = inside_connect(p, port, b"GET /echo?f=json HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n" % port)
    assert out.startswith(b"HTTP/1.1 200"), out[:300]
    log = origin.request_log()
    assert "token=IN-TUNNEL" in json.dumps(log[-1]), log[-1]


# ---------------------------------------------------------------------------------------------------------
# (e) a rejected handshake is retried once with a fresh token
# ---------------------------------------------------------------------------------------------------------

def ags_valid(ags):
    def accept(token):
        with ags.state.lock:
            t = ags.state.tokens.get(token)
            epoch = ags.state.expire_epoch
        return t is not None and not t.revoked and time.time() < t.expires and t.issued > epoch
    return accept


@pytest.mark.parametrize("status", [498, 401])
def test_rejected_handshake_is_retried_once_with_a_fresh_token(proxy_factory, status):
    ags = ArcGISServer(role="server", ttl=60).start()
    s = EchoServer(accept=ags_valid(ags), status=status).start()
    try:
        p = proxy_factory(extra_config=cred("stream", "arcgis-token", s.url("ws", "/arcgis"), username="alice",
                                            password="alice-pass", token_url=ags.server_root + "/tokens/generateToken"))
        with ws_connect(s.url(), proxy=p.url, open_timeout=15) as ws:
            ws.send("one")
            assert ws.recv(timeout=10) == "one"
        first = s.tokens()[0]
        assert first and s.outcomes() == ["ok"], s.handshakes
        ags.expire_all()  # the cached token is now rejected by the server
        sock, head, rest = raw_websocket(p, s.url("http"), "127.0.0.1:%d" % s.port)
        try:
            assert head.startswith("HTTP/1.1 101"), head
            echo_once(sock, rest)
        finally:
            sock.close()
        tokens = s.tokens()
        assert s.outcomes() == ["ok", str(status), "ok"], s.handshakes
        assert tokens[1] == first and tokens[2] not in (None, first), tokens
        # Each handshake, the retried one too, carries the referer the token is bound to (issue 36).
        referers = [{k.lower(): v for k, v in h.items()}.get("referer") for _, h, _ in s.handshakes]
        assert referers == ["app://authproxy/stream"] * 3, referers
        assert p.wait_for_log(lambda l: "token rejected, refreshing and retrying" in l)
    finally:
        s.stop()
        ags.stop()


# ---------------------------------------------------------------------------------------------------------
# (f) unmatched hosts: no token, still works
# ---------------------------------------------------------------------------------------------------------

def test_unmatched_websocket_gets_no_token(proxy_factory, open_echo):
    other = harness.free_port()
    p = proxy_factory(proxy={"connect_ports": [open_echo.port]},
                      extra_config=cred("elsewhere", "api-key", "ws://127.0.0.1:%d/arcgis" % other, key="NOPE"))
    s, head, rest = raw_websocket(p, open_echo.url("ws"), "127.0.0.1:%d" % open_echo.port)
    try:
        assert head.startswith("HTTP/1.1 101"), head
        echo_once(s, rest)
    finally:
        s.close()
    with ws_connect(open_echo.url(), proxy=p.url, open_timeout=10) as ws:  # a blind CONNECT tunnel
        ws.send("x")
        assert ws.recv(timeout=10) == "x"
    assert open_echo.tokens() == [None, None], open_echo.handshakes


def test_unmatched_connect_outside_connect_ports_is_still_refused(proxy_factory, open_echo):
    p = proxy_factory(proxy={"connect_ports": [443]})
    with pytest.raises(websockets.exceptions.InvalidProxyStatus) as refused:
        with ws_connect(open_echo.url(), proxy=p.url, open_timeout=10):
            pass
    assert refused.value.response.status_code == 403, refused.value
    assert open_echo.handshakes == []


# ---------------------------------------------------------------------------------------------------------
# (g) back-pressure: 50 MB of frames to a slow reader
# ---------------------------------------------------------------------------------------------------------

def test_large_stream_to_a_slow_reader_keeps_memory_bounded(proxy_factory, echo):
    p = proxy_factory(extra_config=api_key(echo))
    before = p.rss()
    s, head, rest = raw_websocket(p, echo.url("http"), "127.0.0.1:%d" % echo.port)
    got = 0
    try:
        assert head.startswith("HTTP/1.1 101"), head
        s.sendall(frame(b"flood"))
        # Read slowly until the server has sent everything: the proxy may only hold its bounded buffers.
        s.settimeout(30)
        buf = rest
        for _ in range(FLOOD_FRAMES):
            while True:
                op, payload, buf = read_frame(s, buf) if len(buf) >= 2 else (None, None, buf)
                if op is not None:
                    break
                d = s.recv(64 * 1024)
                if not d:
                    raise EOFError
                buf += d
                time.sleep(0.002)
            assert op == 2
            got += len(payload)
    finally:
        s.close()
    assert got == FLOOD_FRAMES * FLOOD_FRAME
    grew = p.hwm() - before
    assert grew < 24 * 1024 * 1024, "proxy peak RSS grew by %d bytes" % grew


# ---------------------------------------------------------------------------------------------------------
# (h) a matched CONNECT carrying neither TLS nor HTTP
# ---------------------------------------------------------------------------------------------------------

def test_garbage_inside_a_matched_connect_is_refused(proxy_factory, echo):
    p = proxy_factory(extra_config=api_key(echo))
    out = inside_connect(p, echo.port, b"\x00\x01\x02 not a protocol\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400"), out[:200]
    assert echo.handshakes == []


# ---------------------------------------------------------------------------------------------------------
# (i) the access-log line at the end, and the metrics
# ---------------------------------------------------------------------------------------------------------

def test_access_log_line_and_metrics_when_a_websocket_ends(proxy_factory, echo):
    admin = harness.free_port()
    p = proxy_factory(extra_config=api_key(echo) + '\n[admin]\nlisten = "127.0.0.1:%d"\n' % admin)
    s, head, rest = raw_websocket(p, echo.url("http") + "?f=json", "127.0.0.1:%d" % echo.port)
    try:
        assert head.startswith("HTTP/1.1 101"), head
        import urllib.request
        metrics = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % admin, timeout=5).read().decode()
        assert re.search(r"^authproxy_websockets_open 1(\.0)?$", metrics, re.M), metrics
        echo_once(s, rest, b"x" * 1000)
        time.sleep(0.2)
    finally:
        s.close()
    assert p.wait_for_log(lambda l: "upgrade=websocket" in l, timeout=10)
    line = [l for l in p.log_lines() if "upgrade=websocket" in l][-1]
    kv = harness.parse_kv(line)
    assert kv["status"] == "101" and kv["method"] == "GET" and kv["credential"] == "stream", line
    assert kv["url"] == "http://127.0.0.1:%d%s" % (echo.port, PATH), line   # never the query (the token)
    assert int(kv["bytes_in"]) >= 1000 and int(kv["bytes_out"]) >= 1000, line
    assert "WS-KEY" not in p.log_text()
    metrics = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % admin, timeout=5).read().decode()
    assert re.search(r"^authproxy_websockets_open 0(\.0)?$", metrics, re.M), metrics
    assert re.search(r'^authproxy_websocket_upgrades_total\{credential="stream",result="upgraded"\} 1', metrics, re.M), metrics
