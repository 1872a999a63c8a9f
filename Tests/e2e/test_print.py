"""Printing a map with secured layers (issue 41): the print service loads every layer of `Web_Map_as_JSON` itself,
so the proxy puts each secured layer's token into the web map — only for the print services the layer's credential
lists in `print_services` — and the tokens never come back to the client.

The print service is the ArcGIS test server's faithful one (arcgis/printing.py): it loads each layer straight from
its server, without the proxy, and fails the whole print on a secured layer without a valid token."""
import json
import re
import urllib.parse

import pytest

import harness
from arcgis import ArcGISServer
from harness import cred
from test_credentials import via
from test_proxy_endpoint import BrowserApp

TASK = "/Export%20Web%20Map%20Task"
REFERER = "app://maps.example.test/print"
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def maps(federation):
    """A portal, a server federated with it (with the print service), a stand-alone secured server and a server of
    public layers: (portal, fed, solo, public)."""
    portal, fed = federation
    solo = ArcGISServer(role="server", ttl=60).start()
    public = ArcGISServer(role="server", ttl=60).start()
    try:
        yield portal, fed, solo, public
    finally:
        public.stop()
        solo.stop()


def _config(portal, fed, solo, print_services_solo=None):
    """`fed` covers the portal and its federated server, `solo` the stand-alone server; both let the federated
    server's print service receive their tokens (same referer: one print request carries one Referer)."""
    return (cred("fed", "arcgis-token", [portal.portal_url, fed.server_root], username="bob", password="bob-pass",
                 referer=REFERER, print_services=[fed.print_url()])
            + cred("solo", "arcgis-token", solo.server_root, username="alice", password="alice-pass",
                   referer=REFERER, print_services=print_services_solo or [fed.print_url()]))


def _web_map(fed, solo, public):
    return {
        "mapOptions": {"extent": {"xmin": -180, "ymin": -90, "xmax": 180, "ymax": 90,
                                  "spatialReference": {"wkid": 4326}}, "scale": 591657527.591555},
        "operationalLayers": [
            {"id": "fedPoints", "title": "On the federated server", "opacity": 1,
             "url": fed.service_url("Secure", "Points", "FeatureServer") + "/0"},
            {"id": "soloPoints", "title": "On the stand-alone server", "opacity": 0.8,
             "url": solo.service_url("Secure", "Points", "FeatureServer") + "/0"},
            {"id": "publicPoints", "title": "Public", "opacity": 1,
             "url": public.service_url("Public", "Points", "FeatureServer") + "/0"},
        ],
        "baseMap": {"title": "Basemap", "baseMapLayers": [
            {"id": "base", "url": fed.service_url("Secure", "Basemap", "MapServer")}]},
        "exportOptions": {"outputSize": [200, 100], "dpi": 96},
    }


def _tokens_seen(*servers):
    """Every token value the servers were sent (their request logs)."""
    out = set()
    for s in servers:
        for e in s.request_log():
            t = e.get("token")
            for v in (t if isinstance(t, list) else [t]):
                if v:
                    out.add(v)
    return out


def _layer_runs(server):
    return [(urllib.parse.urlsplit(l["url"]).port, l["token"], l["ok"]) for e in server.print_log()
            for l in e["layers"]]


def _assert_no_token(text, tokens, where):
    leaked = [t for t in tokens if t in text]
    assert not leaked, "a token the proxy handled reached the client in %s" % where


def test_browser_prints_a_map_with_secured_layers_through_proxy(proxy_factory, maps, tmp_path):
    """A web app posts the print form to /proxy?<print service>/execute (as ArcGIS JS's PrintTask does) and downloads
    the result through /proxy; the secured layers (one on a federated server) get their tokens, the public one none,
    and no response the page received carries a token."""
    portal, fed, solo, public = maps
    app = BrowserApp()
    p = proxy_factory(proxy={"allowed_origins": [app.origin]}, extra_config=_config(portal, fed, solo))
    proxy = p.url + "/proxy?"
    app.page = """<html><body><script>
const proxy = %s, printUrl = %s, webMap = %s;
const out = {bodies: []};
(async () => {
  try {
    const form = new URLSearchParams({Web_Map_as_JSON: JSON.stringify(webMap), Format: "PNG32",
                                      Layout_Template: "MAP_ONLY", f: "json"});
    const r = await fetch(proxy + printUrl + "/execute", {method: "POST", body: form});
    const text = await r.text();
    out.bodies.push(text);
    out.status = r.status;
    const doc = JSON.parse(text);
    out.doc = doc;
    if (doc.results) {
      const img = await fetch(proxy + doc.results[0].value.url);
      const bytes = new Uint8Array(await img.arrayBuffer());
      out.image = {status: img.status, type: img.headers.get("content-type"), size: bytes.length,
                   head: Array.from(bytes.slice(0, 8))};
    }
  } catch (e) { out.error = String(e); }
  await fetch("/result", {method: "POST", body: JSON.stringify(out)});
})();
</script></body></html>""" % (json.dumps(proxy), json.dumps(fed.print_url() + TASK), json.dumps(_web_map(fed, solo, public)))
    out = app.run(tmp_path)
    assert "error" not in out, out
    assert out["status"] == 200 and "results" in out["doc"], out["doc"]
    assert out["image"]["status"] == 200 and out["image"]["type"] == "image/png", out["image"]
    assert bytes(out["image"]["head"]) == PNG and out["image"]["size"] > 100
    # The print service loaded every layer: the secured ones with a token, the public one without.
    runs = _layer_runs(fed)
    assert (solo.url.rsplit(":", 1)[1], ) and runs, runs
    by_port = {port: (token, ok) for port, token, ok in runs}
    assert by_port[urllib.parse.urlsplit(solo.url).port] == (True, True), runs
    assert by_port[urllib.parse.urlsplit(public.url).port] == (False, True), runs
    assert all(ok for _, _, ok in runs) and sum(1 for port, t, _ in runs
                                                if port == urllib.parse.urlsplit(fed.url).port and t) == 2, runs
    # The federated server's layers carried a server token (from the federation exchange), not the portal token.
    assert portal.stats()["tokens_issued"].get("generate_federated", 0) >= 1, portal.stats()["tokens_issued"]
    # The job messages echo the web map: what reached the page has no token in it.
    tokens = _tokens_seen(fed, solo, public)
    assert tokens, "the servers saw no token"
    for i, body in enumerate(out["bodies"]):
        _assert_no_token(body, tokens, "response %d" % i)
    assert "Executing (Export Web Map Task)" in out["bodies"][0]
    assert "print job: layer tokens put into the web map" in p.log_text()
    _assert_no_token(p.log_text(), tokens, "the proxy's log")


def test_a_print_service_not_listed_gets_no_token(proxy_factory, maps, session):
    """The stand-alone server's own print service is listed by no credential: its web map is forwarded untouched and
    the print fails on the first secured layer, as ArcGIS answers it."""
    portal, fed, solo, public = maps
    p = proxy_factory(extra_config=_config(portal, fed, solo))
    form = {"Web_Map_as_JSON": json.dumps(_web_map(fed, solo, public)), "Format": "PNG32", "f": "json"}
    r = via(p, session, "POST", solo.print_url() + TASK + "/execute", data=form)
    assert r.status_code == 200, r.text[:300]
    err = r.json()["error"]
    assert err["code"] == 400 and "Failed to create layer from service" in err["details"][0], err
    runs = [l for e in solo.print_log() for l in e["layers"]]
    assert runs and not any(l["token"] for l in runs), runs
    # The request itself carried solo's token (its own service), as any request to solo does.
    assert [e for e in solo.request_log() if e["kind"] == "print" and e.get("token")]


def test_submit_job_status_and_result_through_the_forward_proxy(proxy_factory, maps, session):
    """A Python client drives submitJob, the job status and its result through the forward proxy, then downloads the
    output file; the job messages that echo the web map come back without the tokens."""
    portal, fed, solo, public = maps
    p = proxy_factory(extra_config=_config(portal, fed, solo))
    task = fed.print_url() + TASK
    form = {"Web_Map_as_JSON": json.dumps(_web_map(fed, solo, public)), "Format": "PNG32", "f": "json"}
    r = via(p, session, "POST", task + "/submitJob", data=form)
    assert r.status_code == 200 and r.json()["jobStatus"] == "esriJobSubmitted", r.text[:300]
    job = r.json()["jobId"]
    status = via(p, session, "GET", task + "/jobs/" + job + "?f=json")
    assert status.status_code == 200 and status.json()["jobStatus"] == "esriJobSucceeded", status.text[:500]
    result = via(p, session, "GET", task + "/jobs/" + job + "/results/Output_File?f=json")
    url = result.json()["value"]["url"]
    png = via(p, session, "GET", url)
    assert png.status_code == 200 and png.content.startswith(PNG)
    tokens = _tokens_seen(fed, solo, public)
    assert tokens
    for what, body in (("submitJob", r.text), ("job status", status.text), ("result", result.text)):
        _assert_no_token(body, tokens, what)
    messages = " ".join(m["description"] for m in status.json()["messages"])
    assert "Executing (Export Web Map Task)" in messages and '"token":"**' in messages, messages[:300]


def test_get_execute_and_a_layer_with_its_own_token(proxy_factory, maps, session):
    """The web map may come in the query of a GET; a layer that already carries a token keeps it (an invalid one
    here: the print fails on it, which proves it was not replaced)."""
    portal, fed, solo, public = maps
    p = proxy_factory(extra_config=_config(portal, fed, solo))
    wm = _web_map(fed, solo, public)
    q = urllib.parse.urlencode({"Web_Map_as_JSON": json.dumps(wm), "f": "json"})
    r = via(p, session, "GET", fed.print_url() + TASK + "/execute?" + q)
    assert r.status_code == 200 and "results" in r.json(), r.text[:300]
    wm["operationalLayers"][1]["token"] = "the-clients-own"
    q = urllib.parse.urlencode({"Web_Map_as_JSON": json.dumps(wm), "f": "json"})
    r = via(p, session, "GET", fed.print_url() + TASK + "/execute?" + q)
    assert r.status_code == 200 and "error" in r.json(), r.text[:300]
    last = fed.print_log()[-1]["layers"]
    solo_port = urllib.parse.urlsplit(solo.url).port
    assert [l for l in last if urllib.parse.urlsplit(l["url"]).port == solo_port and l["token"] and not l["ok"]]
    assert "the-clients-own" in {e.get("token") for e in solo.request_log()}


def test_print_services_is_validated(tmp_path):
    conf = tmp_path / "c.conf"
    conf.write_text('[proxy]\nlisten = ["127.0.0.1:0"]\n'
                    + cred("k", "api-key", "https://gis.example.com/arcgis", key="K",
                           print_services=["https://gis.example.com/arcgis/rest/services/Utilities/PrintingTools/GPServer"])
                    + cred("h", "header", "https://other.example.com",
                           print_services=["https://gis.example.com/arcgis/rest/services/Utilities/PrintingTools/GPServer"])
                    + 'headers = { "X-Key" = "V" }\n')
    c = harness.run_cli(["check", "--config", str(conf)])
    assert c.returncode != 0 and "credential[1].print_services" in c.stderr and "ArcGIS tokens" in c.stderr, c.stderr
    conf.write_text('[proxy]\nlisten = ["127.0.0.1:0"]\n'
                    + cred("k", "api-key", "https://gis.example.com/arcgis", key="K", print_services=["gis.example.com"]))
    c = harness.run_cli(["check", "--config", str(conf)])
    assert c.returncode != 0 and "print_services" in c.stderr and re.search(r"line \d+", c.stderr), c.stderr


def test_a_print_job_that_cannot_be_held_goes_as_sent_with_a_warning(proxy_factory, maps, session):
    """A chunked print form (no Content-Length) is not held: it reaches the print service as sent, its secured layers
    fail there, and the log says why."""
    portal, fed, solo, public = maps
    p = proxy_factory(extra_config=_config(portal, fed, solo))
    body = urllib.parse.urlencode({"Web_Map_as_JSON": json.dumps(_web_map(fed, solo, public)), "f": "json"}).encode()
    r = via(p, session, "POST", fed.print_url() + TASK + "/execute", data=iter([body[:100], body[100:]]),
            headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 200 and r.json()["error"]["code"] == 400, r.text[:300]
    runs = [l for e in fed.print_log() for l in e["layers"]]
    assert runs and not any(l["token"] for l in runs), runs
    assert "print job forwarded as sent" in p.log_text() and "chunked" in p.log_text()
