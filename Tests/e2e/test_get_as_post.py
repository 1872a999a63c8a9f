"""Long ArcGIS REST GETs sent as POST forms: a front end that answers 414 above 2 KB (the
ArcGIS test server's `max_url_bytes`, as IIS does), GDAL with a long `where` through the proxy, the token moved
into the form, downloads left as GET, and the switch turned off."""

import json
import shutil
import subprocess

import pytest
import requests

import harness
from arcgis import ArcGISServer
from harness import cred
from test_admin import samples, start_with_admin, value
from test_retries import CountingOrigin, answer

LIMIT = 2048


@pytest.fixture
def iis():
    """An ArcGIS Server behind a front end that refuses request lines longer than 2 KB with 414."""
    s = ArcGISServer(role="server", ttl=60, max_url_bytes=LIMIT).start()
    yield s
    s.stop()


@pytest.fixture
def client():
    s = requests.Session()
    s.trust_env = False
    yield s
    s.close()


def long_where(n=3000):
    """A `where` clause as GIS clients build them from a selection: many object ids."""
    ids = []
    i = 1000
    while len(",".join(ids)) < n:
        ids.append(str(i))
        i += 1
    return "OBJECTID IN (%s)" % ",".join(ids)


def server_log(srv, path_suffix):
    log = requests.get(srv.url + "/__requests", timeout=5).json()
    return [e for e in log if e["path"].endswith(path_suffix)]


def ogrinfo(proxy, url):
    if not shutil.which("ogrinfo"):
        pytest.skip("ogrinfo (gdal-bin) not installed")
    env = harness.clean_env({
        "GDAL_HTTP_PROXY": proxy.authority,
        "GDAL_HTTP_TIMEOUT": "30",
        "GDAL_HTTP_MAX_RETRY": "0",
        "CPL_VSIL_CURL_ALLOWED_EXTENSIONS": "",
    })
    return subprocess.run(["ogrinfo", "-ro", "-al", url], capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize("cause", ["length", "414"])
def test_gdal_reads_features_with_a_long_where(proxy_factory, iis, cause):
    """`length`: the proxy sees the URL is too long and never sends it as a GET. `414`: the limit is set high, the
    front end refuses the GET, and the proxy sends the form at once."""
    creds = cred("gis", "arcgis-token", iis.server_root, username="alice", password="alice-pass")
    proxy = {"get_as_post_above_bytes": 100000} if cause == "414" else {}
    p = start_with_admin(proxy_factory, creds, proxy=proxy)
    url = (iis.server_root + "/rest/services/Parcels/FeatureServer/0/query?where=%s&outFields=*&f=json"
           % requests.utils.quote(long_where()))
    assert len(url) > LIMIT
    r = ogrinfo(p, url)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Feature Count: 3" in r.stdout and r.stdout.count("POINT (") == 3, r.stdout
    seen = server_log(iis, "/FeatureServer/0/query")
    posts = [e for e in seen if e["method"] == "POST"]
    assert posts and all(e["outcome"] == "ok" and e["token_sources"] == ["form"] for e in posts), seen
    assert all(e["body_size"] > 3000 for e in posts), seen
    refused = [e for e in seen if e["status"] == 414]
    if cause == "length":
        assert not refused and all(e["method"] == "POST" for e in seen), seen
    else:
        assert refused and all(e["method"] == "GET" for e in refused), seen
    line = p.wait_for_log(lambda l: " access " in l and "/FeatureServer/0/query" in l, timeout=5)
    assert line, p.log_text()[-2000:]
    lines = [l for l in p.log_lines() if " access " in l and "/FeatureServer/0/query" in l]
    assert all("get_as_post=%s" % cause in l and "status=200" in l and "method=GET" in l for l in lines), lines
    assert not any("OBJECTID" in l for l in p.log_lines()), "the query leaked into the log"
    assert value(samples(p), "authproxy_get_as_post_total", cause=cause) == len(lines)


def test_without_a_credential_the_get_goes_as_it_is(proxy_factory, iis, client):
    """Only hosts a credential matches get the conversion (issue 35): elsewhere the client's GET, and the front
    end's 414, are relayed as they are."""
    p = proxy_factory()
    url = iis.server_root + "/rest/services/Public/Parcels/FeatureServer/0/query"
    params = {"where": long_where(), "outFields": "*", "f": "json"}
    r = client.get(url, params=params, proxies=p.proxies, timeout=10)
    assert r.status_code == 414
    seen = server_log(iis, "/FeatureServer/0/query")
    assert [e["method"] for e in seen] == ["GET"], seen


def test_an_edit_stays_get(proxy_factory, iis, client):
    """A long GET to an edit operation is not the proxy's to turn into a POST (issue 35)."""
    p = proxy_factory(extra_config=cred("gis", "arcgis-token", iis.server_root, username="alice",
                                        password="alice-pass"))
    url = iis.server_root + "/rest/services/Parcels/FeatureServer/0/deleteFeatures"
    r = client.get(url, params={"where": long_where(), "f": "json"}, proxies=p.proxies, timeout=10)
    assert r.status_code == 414
    seen = server_log(iis, "/FeatureServer/0/deleteFeatures")
    assert seen and all(e["method"] == "GET" for e in seen), seen


def test_a_short_query_stays_get(proxy_factory, iis, client):
    p = proxy_factory(extra_config=cred("gis", "arcgis-token", iis.server_root, username="alice",
                                        password="alice-pass"))
    r = client.get(iis.server_root + "/rest/services/Parcels/FeatureServer/0/query",
                   params={"where": "1=1", "f": "json"}, proxies=p.proxies, timeout=10)
    assert r.status_code == 200 and len(r.json()["features"]) == 3
    seen = server_log(iis, "/FeatureServer/0/query")
    assert [(e["method"], e["token_sources"]) for e in seen] == [("GET", ["query"])], seen


def test_a_tile_above_the_limit_stays_get(proxy_factory, iis, client):
    p = proxy_factory(extra_config=cred("gis", "arcgis-token", iis.server_root, username="alice",
                                        password="alice-pass"))
    url = iis.server_root + "/rest/services/Basemap/MapServer/tile/3/2/1?cache=" + "x" * 3000
    r = client.get(url, proxies=p.proxies, timeout=10)
    # The front end's 414 goes to the client: a download is never turned into a form.
    assert r.status_code == 414
    seen = server_log(iis, "/tile/3/2/1")
    assert seen and all(e["method"] == "GET" for e in seen), seen
    line = [l for l in p.log_lines() if " access " in l and "/tile/3/2/1" in l]
    assert not any("get_as_post" in l for l in line), line


def test_turned_off(proxy_factory, iis, client):
    p = proxy_factory(proxy={"get_as_post_above_bytes": 0})
    url = iis.server_root + "/rest/services/Public/Parcels/FeatureServer/0/query"
    r = client.get(url, params={"where": long_where(), "f": "json"}, proxies=p.proxies, timeout=10)
    assert r.status_code == 414
    assert [e["method"] for e in server_log(iis, "/FeatureServer/0/query")] == ["GET"]


def test_the_post_made_from_a_get_is_retried(proxy_factory, client):
    """A form made from a long GET is as harmless to repeat as the GET: a 503 is retried, body and all."""
    bodies = []

    def script(n, c, data):
        # read_head() returns what the first reads brought: the head and the start of the body.
        head, _, body = data.partition(b"\r\n\r\n")
        length = int([l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")][0].split(b":")[1])
        while len(body) < length:
            body += c.recv(65536)
        bodies.append((head.split(b" ")[0], head.split(b" ")[1], body))
        answer(c, 503) if n == 0 else answer(c, 200, b'{"features":[]}')

    o = CountingOrigin(script)
    try:
        p = proxy_factory(extra_config=cred("gis", "api-key", o.url + "/arcgis", key="AAPK-key"))
        url = o.url + "/arcgis/rest/services/x/FeatureServer/0/query"
        r = client.get(url, params={"where": long_where(), "f": "json"}, proxies=p.proxies, timeout=10)
        assert r.status_code == 200 and r.json() == {"features": []}
        assert len(bodies) == 2
        for method, target, body in bodies:
            assert method == b"POST" and target == b"/arcgis/rest/services/x/FeatureServer/0/query"
            assert body.startswith(b"where=OBJECTID+IN+%281000%2C1001") and body.endswith(b"&token=AAPK-key"), body[-80:]
    finally:
        o.close()
