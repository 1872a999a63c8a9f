"""The ArcGIS Maps SDK for JavaScript `proxyUrl` form (`/proxy?<url>`), for browser apps."""
import json
import urllib.parse

import harness
from harness import cred
from test_credentials import via

APP = "http://maps.example.test:8080"


def _get(p, session, path, **kw):
    return session.request(kw.pop("method", "GET"), p.url + path, timeout=15, **kw)


def test_endpoint_is_off_without_allowed_origins(proxy, origin, session):
    r = _get(proxy, session, "/proxy?" + origin.url + "/json", headers={"Origin": APP})
    err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 404)
    assert "allowed_origins" in " ".join(err["details"])


def test_allowed_origin_gets_the_response_with_credentials_and_cors(proxy_factory, origin, session):
    p = proxy_factory(proxy={"allowed_origins": [APP]}, extra_config=cred("k", "api-key", origin.url, key="JSKEY"))
    r = _get(p, session, "/proxy?" + origin.url + "/echo?f=json&where=1%3D1", headers={"Origin": APP})
    assert r.status_code == 200, r.text[:300]
    assert r.headers["Access-Control-Allow-Origin"] == APP
    q = urllib.parse.parse_qs(r.json()["query"])
    assert q["token"] == ["JSKEY"] and q["f"] == ["json"] and q["where"] == ["1=1"], q
    # POST bodies are forwarded too (the JS SDK posts long queries).
    r = _get(p, session, "/proxy?" + origin.url + "/echo", method="POST", data={"where": "1=1", "f": "json"},
             headers={"Origin": APP})
    assert r.status_code == 200 and r.json()["method"] == "POST"
    assert "credential=k" in p.log_text()


def test_other_origin_is_refused(proxy_factory, origin, session):
    p = proxy_factory(proxy={"allowed_origins": [APP]}, extra_config=cred("k", "api-key", origin.url, key="JSKEY"))
    r = _get(p, session, "/proxy?" + origin.url + "/echo", headers={"Origin": "https://evil.example"})
    harness.assert_error_json(r.status_code, r.headers.get, r.content, 403)
    assert not [e for e in origin.request_log() if "/echo" in e["target"]]


def test_unmatched_deny_limits_the_endpoint_to_matched_services(proxy_factory, origin, session):
    """/proxy reaches what the forward proxy reaches; with unmatched = "deny" only URLs a credential matches."""
    p = proxy_factory(proxy={"allowed_origins": [APP], "unmatched": "deny"},
                      extra_config=cred("k", "api-key", origin.url + "/echo", key="JSKEY"))
    r = _get(p, session, "/proxy?" + origin.url + "/echo?f=json", headers={"Origin": APP})
    assert r.status_code == 200, r.text[:300]
    r = _get(p, session, "/proxy?" + origin.url + "/json", headers={"Origin": APP})
    harness.assert_error_json(r.status_code, r.headers.get, r.content, 403)


def test_preflight(proxy_factory, origin, session):
    p = proxy_factory(proxy={"allowed_origins": [APP]})
    r = _get(p, session, "/proxy?" + origin.url + "/echo", method="OPTIONS",
             headers={"Origin": APP, "Access-Control-Request-Method": "POST",
                      "Access-Control-Request-Headers": "content-type, x-requested-with"})
    assert r.status_code == 204
    assert r.headers["Access-Control-Allow-Origin"] == APP
    assert "POST" in r.headers["Access-Control-Allow-Methods"]
    assert r.headers["Access-Control-Allow-Headers"] == "content-type, x-requested-with"
    assert not origin.request_log()


def test_bad_target_and_bad_config(proxy_factory, session, tmp_path):
    p = proxy_factory(proxy={"allowed_origins": ["*"]})
    r = _get(p, session, "/proxy?ftp://x/y", headers={"Origin": APP})
    harness.assert_error_json(r.status_code, r.headers.get, r.content, 400)
    conf = tmp_path / "c.conf"
    conf.write_text('[proxy]\nallowed_origins = ["https://maps.example.com/app"]\n')
    c = harness.run_cli(["check", "--config", str(conf)])
    assert c.returncode != 0 and "proxy.allowed_origins" in c.stderr


def test_preflight_is_a_proper_204(proxy_factory, origin):
    """The preflight answered "204 Status 204" with a Content-Length (and a body) that a 204 must not have."""
    p = proxy_factory(proxy={"allowed_origins": [APP]})
    out = harness.raw_exchange(p, b"OPTIONS /proxy?" + origin.url.encode() + b"/echo HTTP/1.1\r\nHost: x\r\nOrigin: "
                               + APP.encode() + b"\r\nAccess-Control-Request-Method: POST\r\n\r\n"
                               + b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", timeout=5)
    first, _, rest = out.partition(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 204 No Content\r\n"), first
    assert b"content-length" not in first.lower() and b"content-type" not in first.lower(), first
    # Nothing between the 204 head and the next response.
    assert rest.startswith(b"HTTP/1.1 200 OK\r\n"), rest[:100]


# ---------------------------------------------------------------------------------------------------------
# In a real browser (headless Chromium), as a web app uses proxyUrl
# ---------------------------------------------------------------------------------------------------------

class BrowserApp:
    """A web app's origin on loopback (`host`, any 127.x): serves `page` at / and collects the JSON the page POSTs to
    /result (`results`, `done`). Also used by test_web_apps.py, several at once for several origins."""

    def __init__(self, page="", host="127.0.0.1"):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        self.results = None
        self.done = threading.Event()
        app = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                body = app.page.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                app.results = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(204)
                self.end_headers()
                app.done.set()

        self.page = page
        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.origin = "http://%s:%d" % (host, self.httpd.server_port)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def run(self, tmp_path, timeout=60):
        """Opens the page in headless Chromium and returns what it reported."""
        import subprocess
        from test_admin import chromium
        browser = subprocess.Popen([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-proxy-server",
                                    "--user-data-dir=%s" % (tmp_path / "chromium"), self.origin + "/"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            assert self.done.wait(timeout), "the page reported nothing within %d s" % timeout
            return self.results
        finally:
            browser.kill()
            browser.wait(10)
            self.httpd.shutdown()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_browser_reuses_no_cached_answer_without_cors_for_a_cors_request(proxy_factory, tmp_path):
    """A map app shows a tile with <img> (no Origin: allowed by its Referer, answered without
    Access-Control-Allow-Origin) and then fetches the same URL with fetch() (CORS). The first answer was cacheable
    and did not say `Vary: Origin`, so Chromium reused it for the CORS request and failed it ("Failed to fetch")
    without asking the proxy again. Every /proxy answer now says `Vary: Origin`."""
    from arcgis.server import tile_png
    png = tile_png(0, 0, 0)
    seen = []

    def tiles(c):
        while True:
            head = harness.read_head(c)
            if not head:
                return
            seen.append(head.split(b" ")[1].decode())
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nCache-Control: max-age=600\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (len(png), png))

    upstream = harness.ScriptedUpstream(tiles)
    try:
        tile = upstream.url + "/arcgis/rest/services/Basemap/MapServer/tile/0/0/0"
        app = BrowserApp()
        p = proxy_factory(proxy={"allowed_origins": [app.origin]},
                          extra_config=cred("k", "api-key", upstream.url + "/arcgis", key="TILEKEY"))
        app.page = """<html><body><script>
const url = %s;
const out = {};
const img = new Image();
img.onload = async () => {
  out.img = img.naturalWidth;
  try { const r = await fetch(url); out.fetch = r.status + " " + (await r.arrayBuffer()).byteLength; }
  catch (e) { out.fetch = String(e); }
  await fetch("/result", {method: "POST", body: JSON.stringify(out)});
};
img.onerror = () => fetch("/result", {method: "POST", body: JSON.stringify({img: "error"})});
img.src = url;
</script></body></html>""" % json.dumps(p.url + "/proxy?" + tile)
        out = app.run(tmp_path)
        assert out == {"img": 256, "fetch": "200 %d" % len(png)}, out
        assert seen and all("token=TILEKEY" in t for t in seen), seen
    finally:
        upstream.close()


def test_the_url_may_come_percent_encoded(proxy_factory, ags, session):
    """Apps that build the proxied URL with encodeURIComponent (OpenLayers/Leaflet recipes written for Esri's
    resource-proxy, which decodes it) send /proxy?https%3A%2F%2F...; it was answered 400. Both forms now name the
    same URL; an encoded form that decodes to something a request line cannot carry is still refused."""
    p = proxy_factory(proxy={"allowed_origins": [APP]},
                      extra_config=cred("gis", "arcgis-token", ags.server_root, username="alice", password="alice-pass"))
    url = ags.query_url() + "?where=1%3D1&outFields=*&f=json"
    r = _get(p, session, "/proxy?" + urllib.parse.quote(url, safe=""), headers={"Origin": APP})
    assert r.status_code == 200, r.text[:300]
    assert len(r.json()["features"]) == 3 and r.headers["Access-Control-Allow-Origin"] == APP
    e = ags.request_log()[-1]
    assert e["outcome"] == "ok" and e["path"].endswith("/FeatureServer/0/query"), e
    r = _get(p, session, "/proxy?" + urllib.parse.quote(ags.query_url() + "?f=json\r\nX-Injected: 1", safe=""),
             headers={"Origin": APP})
    harness.assert_error_json(r.status_code, r.headers.get, r.content, 400)
