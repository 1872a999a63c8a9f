"""The PAC file the proxy serves: `/proxy.pac` and `/wpad.dat` on the proxy listener and on
the admin listener, fetched as a client fetches it (plain HTTP to the proxy's own address, not through it), with
its caching headers, revalidation and a tag that changes on reload; and the script evaluated by a real PAC engine
(Debian's python3-pacparser), as a browser would call FindProxyForURL.

Every test starts its own proxy on loopback, on ports it picks; credentials name hosts that are never contacted."""

import http.client
import sys

import pytest

import harness
from harness import cred

try:
    import pacparser
except ImportError:  # Debian's python3-pacparser, when the tests run under another interpreter of the same version
    sys.path.append("/usr/lib/python3/dist-packages")
    import pacparser

PAC_TYPE = "application/x-ns-proxy-autoconfig"

CREDENTIALS = (
    cred("portal", "api-key", ["https://gis.example.com/arcgis", "http://maps.corp:8080/"], key="K")
    + cred("farm", "password", ["https://*.farm.example.com/", "http://gisserver/"], username="u", password="p")
)


def get(host, port, path, method="GET", headers=None):
    """One origin-form request to host:port itself (the way a client fetches its PAC URL) -> (response, body)."""
    c = http.client.HTTPConnection(host, port, timeout=10)
    try:
        c.request(method, path, headers=headers or {})
        r = c.getresponse()
        return r, r.read()
    finally:
        c.close()


def evaluate(script, url, host=None):
    """FindProxyForURL(url, host) as pacparser's JavaScript engine runs it."""
    pacparser.init()
    try:
        pacparser.parse_pac_string(script)
        return pacparser.find_proxy(url, host or url.split("/")[2].split(":")[0])
    finally:
        pacparser.cleanup()


def admin_port_and_section():
    port = harness.free_port()
    return port, '\n[admin]\nlisten = "127.0.0.1:%d"\n' % port


def test_pac_file_headers_tag_revalidation_and_head(proxy_factory):
    p = proxy_factory(extra_config=CREDENTIALS)
    r, body = get(p.host, p.port, "/proxy.pac")
    assert r.status == 200, body
    assert r.getheader("Content-Type") == PAC_TYPE
    assert r.getheader("Cache-Control") == "max-age=300"
    tag = r.getheader("ETag")
    assert tag and tag.startswith('"') and tag.endswith('"'), tag
    assert int(r.getheader("Content-Length")) == len(body)
    assert b"FindProxyForURL" in body
    for blocking in (b"dnsResolve", b"isInNet", b"myIpAddress"):
        assert blocking not in body

    # The same file under the WPAD name, and a query string (cache busters) changes nothing.
    r2, body2 = get(p.host, p.port, "/wpad.dat?v=3")
    assert (r2.status, r2.getheader("ETag"), body2) == (200, tag, body)

    # Revalidation: the tag answers 304 without a body; a stale one gets the file.
    r3, body3 = get(p.host, p.port, "/proxy.pac", headers={"If-None-Match": tag})
    assert r3.status == 304 and body3 == b"", (r3.status, body3)
    assert r3.getheader("ETag") == tag
    assert r3.getheader("Content-Length") is None
    r4, body4 = get(p.host, p.port, "/proxy.pac", headers={"If-None-Match": '"stale"'})
    assert r4.status == 200 and body4 == body

    # HEAD: the GET's length, no body.
    r5, body5 = get(p.host, p.port, "/proxy.pac", method="HEAD")
    assert r5.status == 200 and body5 == b""
    assert int(r5.getheader("Content-Length")) == len(body)

    r6, _ = get(p.host, p.port, "/proxy.pac", method="POST")
    assert r6.status == 405


def test_pac_script_evaluated_by_a_real_engine(proxy_factory):
    p = proxy_factory(extra_config=CREDENTIALS)
    _, body = get(p.host, p.port, "/proxy.pac")
    script = body.decode()
    proxy = "PROXY 127.0.0.1:%d" % p.port
    cases = [
        # Matched host, with the credential's path and (as browsers pass https URLs) without it.
        ("https://gis.example.com/arcgis/rest/services?f=json", None, proxy),
        ("https://gis.example.com/", None, proxy),
        ("https://gis.example.com:443/other/path", None, proxy),
        # Rules are per host: another path on the same host goes through the proxy too.
        ("https://gis.example.com/portal/home", None, proxy),
        # The credential is for https: plain http to the same host goes directly.
        ("http://gis.example.com/arcgis", None, "DIRECT"),
        ("https://other.example.com/arcgis", None, "DIRECT"),
        # Port-specific credential: only that port.
        ("http://maps.corp:8080/wms?service=WMS", None, proxy),
        ("http://maps.corp/wms", None, "DIRECT"),
        ("http://maps.corp:8081/wms", None, "DIRECT"),
        ("https://maps.corp:8080/", None, "DIRECT"),
        # *.domain: its subdomains, not the domain itself.
        ("https://node1.farm.example.com/arcgis", None, proxy),
        ("https://a.b.farm.example.com/", None, proxy),
        ("https://farm.example.com/", None, "DIRECT"),
        ("https://evilfarm.example.com/", None, "DIRECT"),
        # A dotless (intranet) name.
        ("http://gisserver/arcgis/rest/services", None, proxy),
        ("http://gisserver.corp/arcgis", None, "DIRECT"),
        # Host case and a trailing dot do not matter.
        ("https://GIS.Example.COM/arcgis", "GIS.Example.COM", proxy),
        ("https://gis.example.com./arcgis", "gis.example.com.", proxy),
        ("https://NODE1.FARM.example.com./", "NODE1.FARM.example.com.", proxy),
        # Other schemes go directly.
        ("ftp://gis.example.com/", None, "DIRECT"),
    ]
    for url, host, expected in cases:
        assert evaluate(script, url, host) == expected, (url, host)


def test_pac_names_the_proxy_by_the_host_it_was_fetched_with(proxy_factory):
    # A name is answered when it is listed (pac_hosts): a guard against DNS rebinding (test_security_findings_35_pac).
    p = proxy_factory(proxy={"pac_hosts": ["proxy.corp.example"]}, extra_config=CREDENTIALS)
    _, body = get(p.host, p.port, "/proxy.pac", headers={"Host": "Proxy.Corp.example:3128"})
    assert evaluate(body.decode(), "https://gis.example.com/") == "PROXY proxy.corp.example:3128"
    # Without a port in Host: the default port of http.
    _, body = get(p.host, p.port, "/proxy.pac", headers={"Host": "proxy.corp.example"})
    assert evaluate(body.decode(), "https://gis.example.com/") == "PROXY proxy.corp.example:80"


def test_pac_address_and_fallback_direct(proxy_factory):
    p = proxy_factory(proxy={"pac_address": "gw.corp.example:8080", "pac_fallback": "direct"}, extra_config=CREDENTIALS)
    _, body = get(p.host, p.port, "/proxy.pac")
    script = body.decode()
    assert evaluate(script, "https://gis.example.com/") == "PROXY gw.corp.example:8080; DIRECT"
    assert evaluate(script, "https://other.example.com/") == "DIRECT"


def test_pac_needs_no_proxy_authentication(proxy_factory):
    p = proxy_factory(extra_config=CREDENTIALS + '\n[[client]]\nname = "alice"\npassword = "alice-secret"\n')
    # Proxying needs the client's credentials ...
    r, _ = harness.fetch(p, "GET", "http://127.0.0.1:1/x")
    assert r.status == 407
    # ... the PAC file, fetched before the proxy is used, does not.
    r, body = get(p.host, p.port, "/proxy.pac")
    assert r.status == 200, body
    assert evaluate(body.decode(), "https://gis.example.com/") == "PROXY 127.0.0.1:%d" % p.port


def test_tag_changes_when_a_reload_changes_the_rules(proxy_factory):
    admin_port, admin = admin_port_and_section()
    p = proxy_factory(extra_config=admin + CREDENTIALS)
    assert p.wait_for_log(lambda l: "admin listener" in l, timeout=5)
    r, body = get(p.host, p.port, "/proxy.pac")
    tag = r.getheader("ETag")
    assert evaluate(body.decode(), "https://new.example.com/") == "DIRECT"

    with open(p.config_path, "a") as f:
        f.write(cred("new", "api-key", "https://new.example.com/", key="N"))
    r, out = get("127.0.0.1", admin_port, "/reload", method="POST", headers={"X-Authproxy-Reload": "1"})
    assert r.status == 200, out

    r, body2 = get(p.host, p.port, "/proxy.pac", headers={"If-None-Match": tag})
    assert r.status == 200, "the old tag must not revalidate the changed file"
    new_tag = r.getheader("ETag")
    assert new_tag != tag
    assert evaluate(body2.decode(), "https://new.example.com/") == "PROXY 127.0.0.1:%d" % p.port
    r, _ = get(p.host, p.port, "/proxy.pac", headers={"If-None-Match": new_tag})
    assert r.status == 304

    # A reload that changes nothing the file depends on keeps its tag.
    r, out = get("127.0.0.1", admin_port, "/reload", method="POST", headers={"X-Authproxy-Reload": "1"})
    assert r.status == 200, out
    r, _ = get(p.host, p.port, "/proxy.pac")
    assert r.getheader("ETag") == new_tag


def test_admin_listener_serves_the_same_file_naming_the_proxy_port(proxy_factory):
    admin_port, admin = admin_port_and_section()
    p = proxy_factory(extra_config=admin + CREDENTIALS)
    assert p.wait_for_log(lambda l: "admin listener" in l, timeout=5)
    r, body = get("127.0.0.1", admin_port, "/proxy.pac")
    assert r.status == 200, body
    assert r.getheader("Content-Type") == PAC_TYPE
    assert r.getheader("Cache-Control") == "max-age=300"
    script = body.decode()
    # The proxy listener's address, never the admin port.
    assert evaluate(script, "https://gis.example.com/") == "PROXY 127.0.0.1:%d" % p.port
    assert evaluate(script, "https://other.example.com/") == "DIRECT"
    # The proxy listener fetched by the same address serves the same text, so the same tag.
    r2, body2 = get(p.host, p.port, "/proxy.pac")
    assert body2 == body and r2.getheader("ETag") == r.getheader("ETag")
    r3, body3 = get("127.0.0.1", admin_port, "/wpad.dat", headers={"If-None-Match": r.getheader("ETag")})
    assert r3.status == 304 and body3 == b""
    r4, body4 = get("127.0.0.1", admin_port, "/proxy.pac", method="HEAD")
    assert r4.status == 200 and body4 == b"" and int(r4.getheader("Content-Length")) == len(body)
