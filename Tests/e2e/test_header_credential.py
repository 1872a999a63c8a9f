"""`type = "header"` credentials: static fields set on matched requests, and `layer = "gateway"` stacking them
on top of the service credential of the same request (an identity-aware proxy in front of ArcGIS)."""

import json

import harness


def echo_headers(e, name):
    return [v for k, v in e["headers"] if k.lower() == name.lower()]


def header_cred(name, match, headers, layer=None):
    lines = ['[[credential]]', 'name = "%s"' % name, 'type = "header"', 'match = ["%s"]' % match]
    if layer:
        lines.append('layer = "%s"' % layer)
    lines.append("headers = { %s }" % ", ".join('"%s" = "%s"' % kv for kv in headers.items()))
    return "\n".join(lines) + "\n"


def get(proxy, url, headers=None):
    r, data = harness.fetch(proxy, "GET", url, headers=headers)
    assert r.status == 200, data
    return json.loads(data)


def test_static_headers_replace_the_clients_and_apply_only_where_matched(proxy_factory, origin, tmp_path):
    secret = tmp_path / "id"
    secret.write_text("client-id-from-file\n")
    p = proxy_factory(env={"GW_SECRET": "s3cr3t"}, extra_config=header_cred(
        "gw", origin.url + "/echo", {"CF-Access-Client-Id": "file:%s" % secret, "CF-Access-Client-Secret": "${GW_SECRET}"}))
    e = get(p, origin.url + "/echo?x=1", headers={"CF-Access-Client-Secret": "the-clients-own"})
    assert echo_headers(e, "CF-Access-Client-Id") == ["client-id-from-file"]
    # the client's field of the same name is replaced, not added to
    assert echo_headers(e, "CF-Access-Client-Secret") == ["s3cr3t"]
    # outside the match nothing is added
    e = get(p, origin.url + "/upload")
    assert echo_headers(e, "CF-Access-Client-Id") == []
    line = [l for l in harness.access_lines_text(p) if "/echo" in l][-1]
    assert "credential=gw" in line
    # the secret never reaches the log
    assert "s3cr3t" not in p.log_text() and "client-id-from-file" not in p.log_text()


def test_a_gateway_header_stacks_on_an_api_key(proxy_factory, origin):
    # The service credential puts its key into the URL; the gateway credential adds its bearer on the same
    # request, and an Authorization the proxy set is not taken for the client's own token.
    cfg = header_cred("iap", origin.url + "/", {"Authorization": "Bearer iap-token"}, layer="gateway")
    cfg += '[[credential]]\nname = "svc"\ntype = "api-key"\nkey = "svc-key"\nmatch = ["%s/echo"]\n' % origin.url
    p = proxy_factory(extra_config=cfg)
    e = get(p, origin.url + "/echo?f=json")
    assert echo_headers(e, "Authorization") == ["Bearer iap-token"]
    assert "token=svc-key" in e["query"], e["query"]
    # elsewhere on the host only the gateway applies
    e = get(p, origin.url + "/upload?f=json")
    assert echo_headers(e, "Authorization") == ["Bearer iap-token"]
    assert "token=" not in e["query"], e["query"]


def test_bad_header_names_are_configuration_errors(proxy_binary, tmp_path):
    for name in ("Host", "Content-Length", "Proxy-Authorization", "Bad Name"):
        conf = tmp_path / "bad.conf"
        conf.write_text('[proxy]\nlisten = ["127.0.0.1:3128"]\n' + header_cred("h", "https://x.example/", {name: "v"}))
        out = harness.run_cli(["check", "--config", str(conf)])
        assert out.returncode == 2, (name, out.stdout, out.stderr)
        assert "headers" in out.stderr, out.stderr
