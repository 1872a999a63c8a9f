"""Access log (text and JSON)."""

import json
import re

import harness
from httpraw import RawConn, request_bytes, wait_until


def _access_text(proxy, path_fragment, timeout=3.0):
    return proxy.wait_for_log(
        lambda l: re.search(r"\baccess\b", l) and "method=" in l and path_fragment in l, timeout)


def test_text_access_log_fields_and_no_query(proxy, origin):
    r, data = harness.fetch(proxy, "GET", origin.url + "/bytes?n=5000&secret=hunter2&token=abc")
    assert r.status == 200 and len(data) == 5000
    lines = _access_text(proxy, "/bytes")
    assert len(lines) == 1, proxy.log_text()[-3000:]
    line = lines[0]
    kv = harness.parse_kv(line)
    assert re.search(r"\binfo\b", line), line
    assert kv.get("method") == "GET", line
    assert kv.get("url") == origin.url + "/bytes", "url must be logged without query: %r" % line
    assert kv.get("status") == "200", line
    assert re.fullmatch(r"127\.0\.0\.1:\d+", kv.get("client", "")), line
    assert 5000 <= int(kv["bytes_out"]) < 5000 + 4096, line
    assert int(kv["bytes_in"]) >= 0
    assert float(kv["duration_ms"]) >= 0
    assert "credential" in kv, line
    text = proxy.log_text()
    for secret in ("hunter2", "secret=", "token=abc", "?n=5000"):
        assert secret not in text, "query string leaked into the log: %r" % secret


def test_access_log_bytes_in_and_status(proxy, origin):
    r, _ = harness.fetch(proxy, "POST", origin.url + "/upload", body=b"u" * 7000)
    assert r.status == 200
    r, _ = harness.fetch(proxy, "GET", origin.url + "/status/404")
    assert r.status == 404
    up = _access_text(proxy, "/upload")
    assert len(up) == 1
    kv = harness.parse_kv(up[0])
    assert kv["method"] == "POST" and kv["status"] == "200"
    assert 7000 <= int(kv["bytes_in"]) < 7000 + 4096, up[0]
    nf = _access_text(proxy, "/status/404")
    assert len(nf) == 1 and harness.parse_kv(nf[0])["status"] == "404"


def test_one_access_line_per_request_on_keepalive(proxy, origin):
    conn = harness.proxied_conn(proxy)
    try:
        for i in range(4):
            conn.request("GET", origin.url + "/echo?i=%d" % i)
            conn.getresponse().read()
    finally:
        conn.close()
    wait_until(lambda: len(_access_text(proxy, "/echo", 0)) >= 4, 3)
    import time
    time.sleep(0.3)
    assert len(_access_text(proxy, "/echo", 0)) == 4, proxy.log_text()[-3000:]


def test_proxy_errors_are_access_logged(proxy):
    port = harness.closed_port()
    with RawConn(proxy.host, proxy.port) as c:
        c.send(request_bytes("GET", "http://127.0.0.1:%d/gone?q=1" % port,
                             [("Host", "127.0.0.1:%d" % port)]))
        assert c.read_response().status == 502
    lines = _access_text(proxy, "/gone")
    assert lines and harness.parse_kv(lines[0])["status"] == "502", proxy.log_text()[-2000:]
    assert "q=1" not in proxy.log_text()


def test_log_level_filters_access_lines(proxy_factory, origin):
    p = proxy_factory(log={"level": "warning"})
    r, _ = harness.fetch(p, "GET", origin.url + "/json")
    assert r.status == 200
    import time
    time.sleep(0.5)
    assert not [l for l in p.log_lines() if "method=" in l or '"access"' in l], p.log_text()


def test_json_log_format(proxy_factory, origin):
    p = proxy_factory(log={"format": "json"})
    r, _ = harness.fetch(p, "GET", origin.url + "/json?secret=hunter2")
    assert r.status == 200
    with RawConn(p.host, p.port) as c:  # a proxy-generated error too
        c.send(request_bytes("GET", "/nothing-here", [("Host", p.authority)]))
        c.read_response()

    def access_docs():
        out = []
        for line in p.log_lines():
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if isinstance(d, dict) and d.get("message") == "access":
                out.append(harness.flatten(d))
        return out

    wait_until(lambda: any(str(d.get("url", "")).endswith("/json") for d in access_docs()), 3)
    lines = p.log_lines()
    assert lines
    for line in lines:
        doc = json.loads(line)  # every stderr line must be a JSON object
        assert isinstance(doc, dict) and "level" in doc and "message" in doc, line
    docs = [d for d in access_docs() if str(d.get("url", "")).endswith("/json")]
    assert len(docs) == 1, lines
    d = docs[0]
    assert d["level"] == "info"
    assert d.get("method") == "GET"
    assert str(d.get("status")) == "200"
    assert d.get("url") == origin.url + "/json"
    for k in ("client", "bytes_in", "bytes_out", "duration_ms", "credential"):
        assert k in d, (k, d)
    assert "hunter2" not in p.log_text()
