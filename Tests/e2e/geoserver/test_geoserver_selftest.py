"""Self-tests of the GeoServer-like test server (no proxy involved).

Run from the repo root:  python3 -m pytest Tests/e2e/geoserver -q -p no:cacheprovider
"""

import gzip
import json
import socket
import subprocess
import sys
import os
import xml.etree.ElementTree as ET
import zlib

import pytest
import requests

from geoserver.server import GeoServer

KEY = "7c2b1a40-6f0e-4d2a-9b7c-3e5f1d2a8c90"
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def gs():
    srv = GeoServer(keys={KEY: "admin"}).start()
    yield srv
    srv.stop()


@pytest.fixture
def http(gs):
    gs.reset()
    s = requests.Session()
    s.trust_env = False
    yield s
    s.close()


def test_the_authkey_is_required_on_every_request(gs, http):
    for path in ("/geoserver/ows?service=WMS&request=GetCapabilities", "/geoserver/wfs?request=GetFeature",
                 "/geoserver/nope"):
        r = http.get(gs.url + path, timeout=5)
        assert r.status_code == 401, path
        assert r.headers["WWW-Authenticate"] == 'Basic realm="GeoServer Realm"'
        assert http.get(gs.url + path + ("&" if "?" in path else "?") + "authkey=wrong", timeout=5).status_code == 403
    # in a POST form too
    r = http.post(gs.url + "/geoserver/wfs", data={"service": "WFS", "request": "GetCapabilities", "authkey": KEY},
                  timeout=5)
    assert r.status_code == 200 and b"WFS_Capabilities" in r.content


def test_capabilities_echo_the_key_in_every_backlink(gs, http):
    r = http.get(gs.url + "/geoserver/ows", params={"service": "WMS", "request": "GetCapabilities",
                                                    "authkey": KEY}, timeout=5)
    assert r.status_code == 200
    root = ET.fromstring(r.content)
    hrefs = [e.get("{http://www.w3.org/1999/xlink}href") for e in root.iter("{http://www.opengis.net/wms}OnlineResource")]
    assert len(hrefs) >= 6
    assert all("authkey=" + KEY in h for h in hrefs), hrefs
    r = http.get(gs.url + "/geoserver/wfs", params={"request": "GetCapabilities", "authkey": KEY}, timeout=5)
    assert r.content.count(KEY.encode()) == 6
    r = http.get(gs.url + "/geoserver/wfs", params={"request": "GetFeature", "typeName": "topp:states",
                                                    "outputFormat": "application/json", "authkey": KEY}, timeout=5)
    doc = r.json()
    assert len(doc["features"]) == 3 and KEY in doc["links"][0]["href"]
    r = http.get(gs.url + "/geoserver/wfs", params={"request": "GetFeature", "typeName": "topp:states",
                                                    "authkey": KEY}, timeout=5)
    assert r.content.count(b"<topp:states ") == 3 and KEY.encode() in r.content
    r = http.get(gs.url + "/geoserver/nothing-here?authkey=" + KEY, timeout=5)
    assert r.status_code == 404 and r.content.count(KEY.encode()) == 2


def test_getmap_is_a_png_of_the_asked_size(gs, http):
    r = http.get(gs.url + "/geoserver/wms", params={"request": "GetMap", "layers": "topp:states", "width": 64,
                                                    "height": 32, "format": "image/png", "authkey": KEY}, timeout=5)
    assert r.headers["Content-Type"] == "image/png"
    assert r.content[:8] == b"\x89PNG\r\n\x1a\n"
    assert r.content[16:24] == (64).to_bytes(4, "big") + (32).to_bytes(4, "big")


def raw_get(gs, path, accept_gzip=False):
    """The response's raw bytes (head and body), on a connection that closes after it."""
    s = socket.create_connection(("127.0.0.1", gs.port), timeout=5)
    head = "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n" % (path, gs.port)
    if accept_gzip:
        head += "Accept-Encoding: gzip\r\n"
    s.sendall((head + "\r\n").encode())
    data = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        data += d
    s.close()
    return data


def test_gzip_modes_and_framing(gs, http):
    path = "/geoserver/ows?service=WMS&request=GetCapabilities&authkey=" + KEY
    assert b"Content-Encoding" not in raw_get(gs, path)
    raw = raw_get(gs, path, accept_gzip=True)
    head, body = raw.split(b"\r\n\r\n", 1)
    assert b"Content-Encoding: gzip" in head and KEY.encode() in gzip.decompress(body)
    gs.set(gzip="always")
    head, body = raw_get(gs, path).split(b"\r\n\r\n", 1)
    assert b"Content-Encoding: gzip" in head and KEY.encode() not in body
    gs.set(gzip="deflate")
    head, body = raw_get(gs, path).split(b"\r\n\r\n", 1)
    assert b"Content-Encoding: deflate" in head and KEY.encode() in zlib.decompress(body)
    gs.set(gzip="never", framing="chunked", piece=7)
    head, body = raw_get(gs, path).split(b"\r\n\r\n", 1)
    assert b"Transfer-Encoding: chunked" in head and body.startswith(b"7\r\n") and body.endswith(b"0\r\n\r\n")
    gs.set(framing="length", piece=0, big_capabilities=True)
    r = http.get(gs.url + path, timeout=10)
    assert len(r.content) > 1024 * 1024 and r.content.count(KEY.encode()) > 1000


def test_it_runs_as_a_process():
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "server.py"), "--port", "0", "--print-port",
                          "--key", KEY], stdout=subprocess.PIPE, text=True)
    try:
        port = int(p.stdout.readline())
        r = requests.get("http://127.0.0.1:%d/geoserver/wms?request=GetCapabilities&authkey=%s" % (port, KEY),
                         timeout=5, proxies={"http": None})
        assert r.status_code == 200 and b"WMS_Capabilities" in r.content
    finally:
        p.terminate()
        p.wait(10)
