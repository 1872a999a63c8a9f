"""`type = "query"` credentials against a GeoServer-like server with the authkey module (Tests/e2e/geoserver): the
proxy puts `authkey` on every request, and the key reaches no client in any byte — capabilities backlinks, GeoJSON
links, GML schema locations, HTML error pages and response headers are scrubbed, gzip or not, whatever the framing,
a key split across reads included. Read with GDAL (`ogrinfo WFS:`), QGIS-style WMS requests, OWSLib and curl, in
both `http_client` modes."""

import gzip
import json
import os
import re
import socket
import subprocess
import xml.etree.ElementTree as ET
import zlib
from urllib.parse import parse_qsl, quote, urlsplit

import pytest
import requests

import harness
from geoserver.server import GeoServer
from test_admin import admin_get, start_with_admin

KEY = "5d3c9e21-8b4f-4a7e-b1c6-0f2e7d9a4b13"
MASK = "*" * len(KEY)
MODES = ["native", "libcurl"]


@pytest.fixture(scope="module")
def gs():
    srv = GeoServer(keys={KEY: "admin"}).start()
    yield srv
    srv.stop()


def query_cred(gs, name="geoserver", **extra):
    lines = ["", "[[credential]]", 'name = "%s"' % name, 'type = "query"',
             'match = ["%s/geoserver/"]' % gs.url, 'params = { authkey = "${GEOSERVER_AUTHKEY}" }']
    for k, v in extra.items():
        lines.append("%s = %s" % (k, json.dumps(v)))
    return "\n".join(lines) + "\n"


@pytest.fixture(params=MODES)
def proxy(request, proxy_factory, gs):
    gs.reset()
    p = start_with_admin(proxy_factory, query_cred(gs), proxy={"http_client": request.param},
                         env={"GEOSERVER_AUTHKEY": KEY})
    p.mode = request.param
    return p


def key_forms(key=KEY):
    """Every form of the key a client could read it in (the scrubber's encodings of it)."""
    forms = {key, quote(key, safe=""), key.replace("-", "%2D"), key.replace("-", "%252D"),
             key.replace("-", "&#45;"), key.replace("-", "&#x2D;"), key.replace("-", "\\u002d")}
    # Its longer segments alone: a partly masked key is still a leak.
    forms |= {part for part in key.split("-") if len(part) >= 8}
    return forms


def assert_no_key(data, where=""):
    if isinstance(data, str):
        data = data.encode("utf-8", "replace")
    for form in key_forms():
        assert form.encode() not in data, "the key (%r) reached a client %s" % (form, where)


def assert_no_key_anywhere(p):
    """Not in the log (access lines included), /metrics, /status.json or the status page."""
    assert_no_key(p.log_text(), "in the log")
    for path in ("/metrics", "/status.json", "/"):
        assert_no_key(admin_get(p, path).content, "at " + path)


def served_by(gs):
    """The authkey values the server got, per request since the last reset."""
    return [e["authkeys"] for e in gs.received()]


def raw_get(p, url, headers=()):
    """GET `url` through the proxy on a connection that closes after it -> (head bytes, body bytes as framed)."""
    s = socket.create_connection((p.host, p.port), timeout=20)
    lines = ["GET %s HTTP/1.1" % url, "Host: %s" % urlsplit(url).netloc, "Connection: close"] + list(headers)
    s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    data = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        data += d
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return head, body


def unframe(head, body):
    """The body's bytes as the head frames them (chunked decoded, Content-Length checked)."""
    h = head.decode("latin-1").lower()
    if "transfer-encoding: chunked" in h:
        out, rest = b"", body
        while True:
            size, _, rest = rest.partition(b"\r\n")
            n = int(size.split(b";")[0], 16)
            if n == 0:
                return out
            out += rest[:n]
            assert rest[n:n + 2] == b"\r\n"
            rest = rest[n + 2:]
    m = re.search(r"content-length: *(\d+)", h)
    if m:
        assert len(body) == int(m.group(1)), (len(body), m.group(1))
    return body


def decoded(head, body):
    h = head.decode("latin-1").lower()
    if "content-encoding: gzip" in h:
        return gzip.decompress(body)
    if "content-encoding: deflate" in h:
        return zlib.decompress(body)
    return body


# ---------------------------------------------------------------------------------------------------------------
# Every document, every encoding and framing: the client gets the server's bytes with the key masked
# ---------------------------------------------------------------------------------------------------------------

DOCS = {
    "wms-capabilities": "/geoserver/ows?SERVICE=WMS&REQUEST=GetCapabilities&VERSION=1.3.0",
    "wfs-capabilities": "/geoserver/wfs?SERVICE=WFS&REQUEST=GetCapabilities",
    "geojson": "/geoserver/wfs?service=WFS&version=1.1.0&request=GetFeature&typeName=topp:states"
               "&outputFormat=application/json",
    "gml": "/geoserver/wfs?service=WFS&version=1.1.0&request=GetFeature&typeName=topp:states",
    "error-page": "/geoserver/web/missing-page",
}


def original(gs, path):
    """The document as the server writes it for this key (fetched directly, identity)."""
    s = requests.Session()
    s.trust_env = False
    sep = "&" if "?" in path else "?"
    r = s.get(gs.url + path + sep + "authkey=" + KEY, headers={"Accept-Encoding": "identity"}, timeout=10)
    return r.content


@pytest.mark.parametrize("coding,framing,piece", [
    ("auto", "length", 0), ("auto", "chunked", 13), ("always", "length", 13), ("always", "chunked", 0),
    ("deflate", "length", 5), ("never", "length", 1), ("never", "chunked", 3),
])
def test_no_document_carries_the_key_whatever_the_encoding_and_framing(proxy, gs, coding, framing, piece):
    for name, path in DOCS.items():
        gs.set(gzip="never", framing="length", piece=0)
        expected = original(gs, path).replace(KEY.encode(), MASK.encode())
        gs.set(gzip=coding, framing=framing, piece=piece)
        head, body = raw_get(proxy, gs.url + path, headers=["Accept-Encoding: gzip, deflate"])
        assert_no_key(head + body, "in %s (%s, %s, pieces of %d)" % (name, coding, framing, piece))
        # Asked for identity upstream, or decoded: the client gets it plain, with the key masked and nothing else
        # changed, and framed right.
        assert b"content-encoding" not in head.lower(), head
        got = unframe(head, body)
        assert got == expected, (name, coding, framing, piece, got[:300])
        assert got.count(MASK.encode()) >= 1
    # The server got the key, once per request, and only the proxy's.
    assert all(keys == [KEY] for keys in served_by(gs)[-len(DOCS):])
    assert_no_key_anywhere(proxy)


def test_a_megabyte_capabilities_document_split_in_pieces(proxy, gs):
    gs.set(gzip="never", big_capabilities=True)
    expected = original(gs, DOCS["wms-capabilities"]).replace(KEY.encode(), MASK.encode())
    assert len(expected) > 1024 * 1024
    for coding, framing, piece in (("never", "chunked", 4093), ("always", "length", 997)):
        gs.set(gzip=coding, framing=framing, piece=piece)
        head, body = raw_get(proxy, gs.url + DOCS["wms-capabilities"], headers=["Accept-Encoding: gzip"])
        assert_no_key(head + body)
        got = unframe(head, body)
        assert got == expected
        assert got.count(MASK.encode()) > 1000


def test_the_key_is_masked_in_response_headers(proxy_factory, gs):
    # Jetty's 404 page repeats the URI; a redirect GeoServer answers for a trailing slash repeats it in Location.
    p = proxy_factory(extra_config=query_cred(gs), env={"GEOSERVER_AUTHKEY": KEY})
    gs.reset()
    r = requests.get(gs.url + "/geoserver/web/nothing?x=1", proxies=p.proxies, timeout=10)
    assert r.status_code == 404 and MASK in r.text
    assert_no_key(r.content)
    # A header that echoes the request's URL: the server's 401 for a missing key cannot happen through the proxy,
    # so a scripted upstream stands in for one that sets Content-Location and Link.
    def behaviour(c):
        data = b""
        while b"\r\n\r\n" not in data:
            data += c.recv(65536)
        target = data.split(b" ")[1].decode()
        body = b"moved"
        c.sendall(("HTTP/1.1 302 Found\r\nLocation: %s&next=1\r\nContent-Location: %s\r\nLink: <%s>; rel=self\r\n"
                   "X-Echo: authkey%%3D%s\r\nContent-Length: %d\r\n\r\n"
                   % (target, target, target, quote(KEY, safe="").replace("-", "%2D"), len(body))).encode() + body)
        c.close()
    up = harness.ScriptedUpstream(behaviour)
    try:
        q = proxy_factory(extra_config=query_cred(gs).replace(gs.url, up.url), env={"GEOSERVER_AUTHKEY": KEY})
        head, body = raw_get(q, up.url + "/geoserver/wms?request=GetCapabilities")
        assert head.startswith(b"HTTP/1.1 302")
        assert_no_key(head + body, "in a response head")
        assert b"authkey=" + MASK.encode() in head
    finally:
        up.close()


# ---------------------------------------------------------------------------------------------------------------
# Real clients
# ---------------------------------------------------------------------------------------------------------------

def gdal_env(p, **extra):
    env = harness.clean_env({"GDAL_HTTP_PROXY": p.authority, "GDAL_HTTP_TIMEOUT": "20", "CPL_DEBUG": "ON",
                             "GDAL_DISABLE_READDIR_ON_OPEN": "EMPTY_DIR"})
    env.update(extra)
    return env


@pytest.mark.parametrize("coding", ["auto", "always"])
def test_gdal_ogrinfo_lists_and_reads_features(proxy, gs, coding):
    gs.set(gzip=coding)
    url = "WFS:%s/geoserver/wfs" % gs.url
    out = subprocess.run(["ogrinfo", "-ro", url], capture_output=True, timeout=60, env=gdal_env(proxy))
    listing = out.stdout + out.stderr
    assert out.returncode == 0, listing.decode(errors="replace")[-2000:]
    assert b"topp:states" in listing
    out = subprocess.run(["ogrinfo", "-ro", "-al", url, "topp:states"], capture_output=True, timeout=60,
                         env=gdal_env(proxy))
    text = (out.stdout + out.stderr).decode(errors="replace")
    assert out.returncode == 0, text[-2000:]
    assert "Feature Count: 3" in text and "STATE_NAME (String) = Illinois" in text, text[-2000:]
    assert "POINT (-105.5 39" in text, text[-2000:]
    # CPL_DEBUG prints the URLs GDAL requested and what it parsed: the key is in none of it.
    assert_no_key(out.stdout + out.stderr, "in GDAL's output")
    assert_no_key(listing, "in GDAL's output")
    assert served_by(gs) and all(keys == [KEY] for keys in served_by(gs))
    assert_no_key_anywhere(proxy)


QGIS_UA = "Mozilla/5.0 QGIS/32803/Ubuntu 22.04.3 LTS"


def test_qgis_style_wms_capabilities_then_getmap_from_the_advertised_url(proxy, gs):
    s = requests.Session()
    s.trust_env = False
    s.headers.update({"User-Agent": QGIS_UA, "Accept-Encoding": "gzip, deflate"})
    r = s.get(gs.url + "/geoserver/wms?SERVICE=WMS&REQUEST=GetCapabilities&VERSION=1.3.0", proxies=proxy.proxies,
              timeout=10)
    assert r.status_code == 200
    assert_no_key(r.content)
    root = ET.fromstring(r.content)
    ns = {"w": "http://www.opengis.net/wms", "x": "http://www.w3.org/1999/xlink"}
    get_map = root.find("w:Capability/w:Request/w:GetMap/w:DCPType/w:HTTP/w:Get/w:OnlineResource", ns)
    href = get_map.get("{http://www.w3.org/1999/xlink}href")
    assert "authkey=" + MASK in href
    # QGIS appends its parameters to the advertised GetMap URL as it is, masked key included: the proxy replaces
    # the client's authkey with its own.
    params = ("SERVICE=WMS&VERSION=1.3.0&REQUEST=GetMap&BBOX=24.9,-124.7,49.3,-66.9&CRS=EPSG:4326&WIDTH=256"
              "&HEIGHT=128&LAYERS=topp:states&STYLES=&FORMAT=image/png&DPI=96&MAP_RESOLUTION=96"
              "&FORMAT_OPTIONS=dpi:96&TRANSPARENT=TRUE")
    r = s.get(href + params, proxies=proxy.proxies, timeout=10)
    assert r.status_code == 200 and r.headers["Content-Type"] == "image/png"
    assert r.content[:8] == b"\x89PNG\r\n\x1a\n" and r.content[16:24] == (256).to_bytes(4, "big") + (128).to_bytes(4, "big")
    legend = root.find(".//w:Layer/w:Style/w:LegendURL/w:OnlineResource", ns).get("{http://www.w3.org/1999/xlink}href")
    r = s.get(legend, proxies=proxy.proxies, timeout=10)
    assert r.status_code == 200 and r.content[:4] == b"\x89PNG"
    assert [keys for keys in served_by(gs)] == [[KEY]] * 3
    assert_no_key_anywhere(proxy)


def test_owslib_wms_and_wfs_through_the_proxy(proxy, gs, monkeypatch):
    owslib_wms = pytest.importorskip("owslib.wms")
    owslib_wfs = pytest.importorskip("owslib.wfs")
    for k in ("no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("http_proxy", proxy.url)
    wms = owslib_wms.WebMapService(gs.url + "/geoserver/wms", version="1.3.0", timeout=20)
    assert "topp:states" in wms.contents
    img = wms.getmap(layers=["topp:states"], srs="EPSG:4326", bbox=(24.9, -124.7, 49.3, -66.9), size=(64, 32),
                     format="image/png")
    data = img.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    # OWSLib took the GetMap URL from the capabilities, with the masked key: the proxy put the real one in.
    assert MASK in wms.getOperationByName("GetMap").methods[0]["url"]
    wfs = owslib_wfs.WebFeatureService(gs.url + "/geoserver/wfs", version="1.1.0", timeout=20)
    assert "topp:states" in wfs.contents
    doc = json.loads(wfs.getfeature(typename=["topp:states"], outputFormat="application/json").read())
    assert [f["properties"]["STATE_NAME"] for f in doc["features"]] == ["Illinois", "Colorado", "Oregon"]
    assert doc["links"][0]["href"].endswith("authkey=" + MASK)
    assert served_by(gs) and all(keys == [KEY] for keys in served_by(gs))
    assert_no_key_anywhere(proxy)


def test_curl_raw_bytes(proxy, gs):
    for coding in ("auto", "always"):
        gs.set(gzip=coding, framing="chunked", piece=11)
        out = harness.curl("-i", "--raw", "-H", "Accept-Encoding: gzip", "-x", proxy.url,
                           gs.url + DOCS["wms-capabilities"])
        assert out.returncode == 0, out.stderr
        assert b"WMS_Capabilities" in out.stdout and MASK.encode() in out.stdout
        assert_no_key(out.stdout, "to curl")


# ---------------------------------------------------------------------------------------------------------------
# Requests: the proxy's key always wins, in the query, a POST form and a WebSocket handshake
# ---------------------------------------------------------------------------------------------------------------

def test_the_clients_authkey_is_replaced_in_the_query_and_in_a_form(proxy, gs):
    s = requests.Session()
    s.trust_env = False
    r = s.get(gs.url + "/geoserver/wfs?request=GetCapabilities&%61uthkey=guess&AUTHKEY=" + MASK,
              proxies=proxy.proxies, timeout=10)
    assert r.status_code == 200
    last = gs.received()[-1]
    assert last["authkeys"] == [KEY]
    assert [k for k, _ in last["query"] if k.lower() == "authkey"] == ["authkey"]
    r = s.post(gs.url + "/geoserver/wfs", data={"service": "WFS", "request": "GetFeature", "typeName": "topp:states",
                                                "outputFormat": "application/json", "authkey": "client-key"},
               proxies=proxy.proxies, timeout=10)
    assert r.status_code == 200 and len(r.json()["features"]) == 3
    last = gs.received()[-1]
    assert last["authkeys"] == [KEY]
    assert b"authkey" not in last["body"] and b"request=GetFeature" in last["body"]
    assert_no_key(r.content)


def test_a_websocket_handshake_gets_the_key(proxy_factory):
    seen = []

    def behaviour(c):
        data = b""
        while b"\r\n\r\n" not in data:
            data += c.recv(65536)
        seen.append(data.split(b"\r\n")[0].decode())
        c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n")
        c.close()
    up = harness.ScriptedUpstream(behaviour)
    try:
        cfg = ('\n[[credential]]\nname = "ws"\ntype = "query"\nmatch = ["%s/"]\n'
               'params = { key = "${TILE_KEY}" }\n' % up.url)
        p = proxy_factory(extra_config=cfg, env={"TILE_KEY": KEY})
        s = socket.create_connection((p.host, p.port), timeout=10)
        s.sendall(("GET %s/live?key=mine HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
                   % (up.url, up.url[7:])).encode())
        head = harness.read_head(s)
        s.close()
        assert head.startswith(b"HTTP/1.1 101"), head
        assert seen == ["GET /live?key=%s HTTP/1.1" % KEY]
        assert_no_key(p.log_text())
    finally:
        up.close()


# ---------------------------------------------------------------------------------------------------------------
# scrub_responses, configuration errors
# ---------------------------------------------------------------------------------------------------------------

def test_scrub_responses_false_relays_bodies_as_they_are_but_heads_stay_masked(proxy_factory, gs):
    gs.reset()
    p = proxy_factory(extra_config=query_cred(gs, scrub_responses=False), env={"GEOSERVER_AUTHKEY": KEY})
    head, body = raw_get(p, gs.url + DOCS["wms-capabilities"], headers=["Accept-Encoding: gzip"])
    # Not scrubbing, the proxy does not touch Accept-Encoding either: the server's gzip reaches the client.
    assert b"Content-Encoding: gzip" in head
    assert KEY.encode() in decoded(head, unframe(head, body))
    assert_no_key(p.log_text())


def test_configuration_errors_name_the_key_never_the_value(tmp_path):
    for params, expect in ((' params = { "auth key" = "SECRETVALUE-123" }', "params.auth key"),
                           (' params = { authkey = "SECRET\\u0001VALUE-123" }', "params.authkey"),
                           (" params = {}", "params"),
                           ('', "params")):
        conf = tmp_path / "bad.conf"
        conf.write_text('[proxy]\nlisten = ["127.0.0.1:3128"]\n\n[[credential]]\nname = "gs"\ntype = "query"\n'
                        'match = ["http://gs.example/geoserver/"]\n' + params.strip() + "\n")
        out = harness.run_cli(["check", "--config", str(conf)])
        assert out.returncode == 2, (params, out.stdout, out.stderr)
        assert expect in out.stderr, out.stderr
        assert "SECRET" not in out.stderr + out.stdout
