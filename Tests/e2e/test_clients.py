"""Real-world clients through the proxy: curl -x, Python requests, GDAL ogrinfo."""

import json
import shutil
import subprocess

import pytest

import harness
from origin import JSON_DOC


def _via(headers_text):
    vals = []
    for line in headers_text.splitlines():
        k, _, v = line.partition(":")
        if k.strip().lower() == "via":
            vals.append(v.strip())
    return ", ".join(vals)


def _origin_saw_via(origin, path):
    hits = [r for r in origin.request_log() if r["target"].split("?")[0] == path]
    assert hits, "origin never saw %s: %r" % (path, origin.request_log())
    for r in hits:
        via = ", ".join(v for k, v in r["headers"] if k.lower() == "via")
        assert "1.1 authproxy" in via, r
    return hits


def test_curl_x_get(proxy, origin, tmp_path):
    body = tmp_path / "body"
    r = harness.curl("-x", proxy.url, "-D", "-", "-o", str(body), origin.url + "/json")
    assert r.returncode == 0, r.stderr
    head = r.stdout.decode("latin-1")
    assert head.startswith("HTTP/1.1 200"), head
    assert _via(head) == "1.1 authproxy", head
    assert json.loads(body.read_bytes()) == JSON_DOC
    _origin_saw_via(origin, "/json")


def test_curl_x_post_data(proxy, origin):
    r = harness.curl("-x", proxy.url, "--data-binary", "hello curl", origin.url + "/echo?via=curl")
    assert r.returncode == 0, r.stderr
    e = json.loads(r.stdout)
    assert e["method"] == "POST" and e["body_length"] == len("hello curl")
    assert e["query"] == "via=curl"


def test_requests_proxies(proxy, origin, session):
    r = session.get(origin.url + "/echo?a=1&b=two", proxies=proxy.proxies, timeout=10)
    assert r.status_code == 200
    assert r.headers.get("Via") == "1.1 authproxy"
    e = r.json()
    assert e["method"] == "GET" and e["query"] == "a=1&b=two"
    assert e["target"] == "/echo?a=1&b=two", "upstream request must be origin-form"
    _origin_saw_via(origin, "/echo")
    r2 = session.post(origin.url + "/upload", data=b"x" * 12345, proxies=proxy.proxies, timeout=10)
    assert r2.status_code == 200 and r2.json()["size"] == 12345


@pytest.mark.parametrize("summary", [True, False], ids=["so", "full"])
def test_gdal_ogrinfo_esri_featureserver(proxy, origin, summary):
    if not shutil.which("ogrinfo"):
        pytest.skip("ogrinfo (gdal-bin) not installed")
    url = origin.url + "/esri/query?where=1%3D1&outFields=*&f=json"
    env = harness.clean_env({
        "GDAL_HTTP_PROXY": proxy.authority,
        "GDAL_HTTP_TIMEOUT": "30",
        "GDAL_HTTP_MAX_RETRY": "0",
        "CPL_VSIL_CURL_ALLOWED_EXTENSIONS": "",
    })
    args = ["ogrinfo", "-ro", "-al"] + (["-so"] if summary else []) + [url]
    r = subprocess.run(args, capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "Geometry: Point" in out, out
    assert "Feature Count: 3" in out, out
    if not summary:
        for name in ("Alpha", "Bravo", "Charlie"):
            assert "name (String) = %s" % name in out, out
        assert out.count("POINT (") == 3, out
    # it really went through the proxy
    _origin_saw_via(origin, "/esri/query")
    hits = proxy.wait_for_log(lambda l: "/esri/query" in l and "method=" in l)
    assert hits, proxy.log_text()[-3000:]
    assert not any("outFields" in l or "where=" in l for l in proxy.log_lines()), \
        "query string leaked into the log"
