"""OpenTelemetry traces through the real binary (issue 40, part 2): spans exported over OTLP/HTTP to a test
receiver that decodes them with the official protobuf definitions (otlp_receiver.py), W3C trace context from the
client continued and sent upstream (token requests included), the trace id in the access log, and no secret in any
span."""
import json
import os
import re
import signal
import time

import pytest

import harness
from harness import cred
from arcgis import ArcGISServer
from forwarding_proxy import ForwardingProxy
from otlp_receiver import OTLPReceiver
from test_credentials import arcgis_cred, via
from parents.fixtures import ntlm_parent, parents_dir  # noqa: F401

MODES = ["native", "libcurl"]
CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"


@pytest.fixture
def receiver():
    r = OTLPReceiver().start()
    yield r
    r.stop()
    assert not r.errors, r.errors


def otel_env(receiver, **extra):
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100",
           "OTEL_SERVICE_NAME": "authproxy-e2e"}
    env.update(extra)
    return env


def trace_ids_in_access_log(p, count):
    """The trace ids of the access-log lines, once `count` of them are written (a line follows its answer)."""
    deadline = time.monotonic() + 5
    while True:
        ids = [m.group(1) for l in harness.access_lines_text(p)
               for m in [re.search(r"trace_id=([0-9a-f]{32})", l)] if m]
        if len(ids) >= count or time.monotonic() > deadline:
            return ids
        time.sleep(0.05)


def by_trace(spans, trace_id):
    return [s for s in spans if s["trace_id"] == trace_id]


def one(spans, **match):
    found = [s for s in spans if all(s.get(k) == v for k, v in match.items())]
    assert len(found) == 1, (match, [(s["name"], s["kind"]) for s in spans])
    return found[0]


def assert_no_secret(spans, secrets):
    """Every attribute (span, event, resource), every name and status message, searched for every secret."""
    secrets = [x for x in secrets if x]
    assert secrets
    for s in spans:
        texts = [s["name"], s["trace_state"], s["status"]["message"]]
        texts += ["%s=%s" % (k, json.dumps(v)) for k, v in s["attributes"].items()]
        texts += ["%s=%s" % (k, json.dumps(v)) for e in s["events"] for k, v in e["attributes"].items()]
        texts += ["%s=%s" % (k, json.dumps(v)) for k, v in s["resource"].items()]
        for t in texts:
            for secret in secrets:
                assert secret not in t, "a secret in span %r: %r" % (s["name"], t)
        # Never the query string of a URL.
        for k in ("url.full", "url.path"):
            assert "?" not in str(s["attributes"].get(k, "")), s["attributes"]


@pytest.mark.parametrize("mode", MODES)
def test_a_revoked_token_gives_one_trace_with_the_replay_between_two_attempts(proxy_factory, receiver, session, mode):
    ags = ArcGISServer(role="server", ttl=60).start()
    try:
        p = proxy_factory(proxy={"http_client": mode}, env=otel_env(receiver), extra_config=arcgis_cred(ags))
        url = ags.query_url() + "?f=json&where=1%3D1"
        assert via(p, session, "GET", url).status_code == 200
        ags.revoke_all()
        ags.reset_stats()
        r = via(p, session, "GET", url)
        assert r.status_code == 200 and r.json()["features"], r.text[:300]
        assert [e["outcome"] for e in ags.request_log()] == ["498", "ok"]

        ids = trace_ids_in_access_log(p, 2)
        assert len(ids) == 2 and ids[0] != ids[1], harness.access_lines_text(p)
        trace_id = ids[1]
        spans = receiver.wait_for(lambda sp: any(s["kind"] == "SPAN_KIND_SERVER" and s["trace_id"] == trace_id
                                                 for s in sp), timeout=10)
        t = by_trace(spans, trace_id)
        server = one(t, kind="SPAN_KIND_SERVER")
        assert server["name"] == "GET" and server["parent_span_id"] == ""
        a = server["attributes"]
        assert a["http.request.method"] == "GET" and a["http.response.status_code"] == 200
        assert a["url.full"] == ags.query_url() and a["server.address"] == "127.0.0.1"
        assert a["authproxy.credential"] == "gis"
        assert server["resource"]["service.name"] == "authproxy-e2e"

        attempts = sorted([s for s in t if s["kind"] == "SPAN_KIND_CLIENT" and s["name"] == "GET"],
                          key=lambda s: s["start"])
        assert len(attempts) == 2, [(s["name"], s["kind"]) for s in t]
        assert all(s["parent_span_id"] == server["span_id"] for s in attempts)
        assert attempts[0]["attributes"]["authproxy.token.rejected"] is True
        assert attempts[0]["attributes"]["authproxy.upstream.client"] == ("own" if mode == "native" else mode)
        assert "authproxy.token.rejected" not in attempts[1]["attributes"]
        assert attempts[1]["attributes"]["http.response.status_code"] == 200
        assert attempts[1]["attributes"]["http.request.resend_count"] == 1

        replay = one(t, name="token rejected: replay")
        assert replay["parent_span_id"] == server["span_id"]
        assert attempts[0]["end"] <= replay["start"] <= replay["end"] <= attempts[1]["start"]
        wait = one(t, name="token wait")
        assert wait["parent_span_id"] == replay["span_id"]
        assert wait["attributes"]["authproxy.token.source"] == "own_fetch"
        fetch = one(t, name="token fetch")
        assert fetch["parent_span_id"] == wait["span_id"] and fetch["kind"] == "SPAN_KIND_CLIENT"
        assert replay["start"] <= fetch["start"] <= fetch["end"] <= replay["end"]

        # Every request the proxy made for the exchange carried its traceparent: each upstream attempt its own
        # span's, the token request the token fetch span's.
        sent = [e["traceparent"] for e in ags.request_log()]
        assert sent == ["00-%s-%s-01" % (trace_id, s["span_id"]) for s in attempts], sent
        token_calls = [c for c in ags.stats()["token_requests"] if c["ok"]]
        assert token_calls and token_calls[-1]["traceparent"] == "00-%s-%s-01" % (trace_id, fetch["span_id"])

        # The first request's trace has its own token fetch (no replay).
        first = by_trace(receiver.spans(), ids[0])
        assert one(first, name="token wait")["attributes"]["authproxy.token.source"] == "own_fetch"
        assert len([s for s in first if s["name"] == "token fetch"]) == 1

        assert_no_secret(receiver.spans(), ["alice-pass"] + list(ags.state.tokens.keys()))
        req = receiver.requests[0]
        assert req["content_type"] == "application/x-protobuf"
    finally:
        ags.stop()


@pytest.mark.parametrize("mode", MODES)
def test_the_clients_traceparent_is_continued_and_reaches_the_origin(proxy_factory, receiver, origin, mode):
    p = proxy_factory(proxy={"http_client": mode}, env=otel_env(receiver))
    headers = {"traceparent": "00-%s-%s-01" % (CLIENT_TRACE, CLIENT_SPAN), "tracestate": "vendor=abc,other=1"}
    r, body = harness.fetch(p, "GET", origin.url + "/echo?secret=do-not-record", headers=headers)
    assert r.status == 200
    got = dict((k.lower(), v) for k, v in json.loads(body)["headers"])
    m = re.fullmatch(r"00-([0-9a-f]{32})-([0-9a-f]{16})-01", got["traceparent"])
    assert m and m.group(1) == CLIENT_TRACE and m.group(2) != CLIENT_SPAN, got["traceparent"]
    assert got["tracestate"] == "vendor=abc,other=1"
    assert trace_ids_in_access_log(p, 1) == [CLIENT_TRACE]

    spans = receiver.wait_for(lambda sp: any(s["kind"] == "SPAN_KIND_SERVER" for s in sp), timeout=10)
    server = one(spans, kind="SPAN_KIND_SERVER")
    assert server["trace_id"] == CLIENT_TRACE and server["parent_span_id"] == CLIENT_SPAN
    assert server["trace_state"] == "vendor=abc,other=1"
    assert server["flags"] & 0x300 == 0x300  # the parent is known to be remote
    attempt = one(receiver.wait_for(lambda sp: len(sp) >= 2), kind="SPAN_KIND_CLIENT")
    assert attempt["span_id"] == m.group(2) and attempt["parent_span_id"] == server["span_id"]
    assert attempt["attributes"]["url.full"] == origin.url + "/echo"
    assert_no_secret(receiver.spans(), ["do-not-record"])


def test_an_invalid_traceparent_starts_a_new_trace(proxy_factory, receiver, origin):
    p = proxy_factory(env=otel_env(receiver))
    bad = "00-%s-%s-01" % (CLIENT_TRACE.upper(), CLIENT_SPAN)
    r, body = harness.fetch(p, "GET", origin.url + "/echo", headers={"traceparent": bad, "tracestate": "a=b"})
    got = dict((k.lower(), v) for k, v in json.loads(body)["headers"])
    tp = got["traceparent"]
    assert re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01", tp) and CLIENT_TRACE not in tp.lower(), tp
    # The client's tracestate belonged to the trace that was not continued.
    assert "tracestate" not in got, got
    server = one(receiver.wait_for(lambda sp: any(s["kind"] == "SPAN_KIND_SERVER" for s in sp)),
                 kind="SPAN_KIND_SERVER")
    assert server["parent_span_id"] == "" and server["trace_id"] == tp[3:35]


def parent_spans(receiver, count=1):
    """The spans of one exchange through a parent, once its server span and `count` parent exchanges came: the
    server span, the attempt, and the parent exchanges (oldest first)."""
    spans = receiver.wait_for(lambda sp: len([s for s in sp if s["name"] == "parent proxy CONNECT"]) >= count
                              and any(s["kind"] == "SPAN_KIND_SERVER" for s in sp))
    server = one(spans, kind="SPAN_KIND_SERVER")
    attempt = one(spans, kind="SPAN_KIND_CLIENT", name="GET")
    assert attempt["parent_span_id"] == server["span_id"]
    connects = sorted([s for s in spans if s["name"] == "parent proxy CONNECT"], key=lambda s: s["start"])
    assert len(connects) == count, [(s["name"], s["attributes"]) for s in spans]
    for c in connects:
        assert c["parent_span_id"] == attempt["span_id"] and c["kind"] == "SPAN_KIND_CLIENT", c
        assert attempt["start"] <= c["start"] <= c["end"], (attempt, c)
    return spans, server, attempt, connects


@pytest.mark.parametrize("mode", MODES)
def test_a_request_through_a_parent_shows_the_parent_exchange(proxy_factory, receiver, origin_factory, tls_cert,
                                                              mode):
    """https through a parent: the CONNECT is a span of its own, under the attempt (the own client's connector, or
    the libcurl transfer's parent part)."""
    cert, key = tls_cert
    o = origin_factory(tls=(cert, key))
    parent = ForwardingProxy("parentA", basic="puser:parent-secret-pw").start()
    try:
        conf = ('\n[[credential]]\nname = "up"\ntype = "password"\nusername = "puser"\n'
                'password = "parent-secret-pw"\nschemes = ["basic"]\n' + cred("trust", "server-trust", o.url, ca_file=cert))
        p = proxy_factory(proxy={"upstream_proxy": "http://127.0.0.1:%d" % parent.port,
                                 "upstream_proxy_credential": "up", "http_client": mode, "workers": 1},
                          env=otel_env(receiver), extra_config=conf)
        r, body = harness.fetch(p, "GET", o.url + "/echo")
        assert r.status == 200, body[:300]
        assert parent.saw("CONNECT")
        spans, server, attempt, [connect] = parent_spans(receiver)
        assert attempt["attributes"]["authproxy.route.parents"] == ["127.0.0.1:%d" % parent.port]
        assert attempt["attributes"]["authproxy.upstream.client"] == ("own" if mode == "native" else mode)
        a = connect["attributes"]
        assert a["server.port"] == parent.port and a["http.response.status_code"] == 200, a
        assert a["http.request.method"] == "CONNECT" and a["authproxy.parent_proxy.scheme"] == "http", a
        assert a["authproxy.connect.destination"].endswith(":%d" % o.port)
        assert "error.type" not in a and connect["status"]["code"] != 2, connect
        if mode == "libcurl":
            # A Basic-only login goes with the first CONNECT: the parent asked for nothing.
            assert a["authproxy.parent_proxy.auth_challenges"] == 0, a
            # The tunnel is up before the request goes through it.
            assert connect["end"] <= attempt["end"]
        # The login went with the CONNECT (Basic, sent at once: this test parent serves one exchange per connection).
        assert parent.authorizations, "the parent was never sent its credential"
        assert_no_secret(spans, ["parent-secret-pw", parent.authorizations[-1].split(" ")[-1]])
        # A second request on the connection kept open (one event loop: one pool) sends no CONNECT: no parent span.
        r, body = harness.fetch(p, "GET", o.url + "/echo?again=1")
        assert r.status == 200, body[:300]
        assert len(parent.saw("CONNECT")) == 1, parent.saw()
        spans = receiver.wait_for(lambda sp: len([s for s in sp if s["kind"] == "SPAN_KIND_SERVER"]) >= 2)
        assert len([s for s in spans if s["name"] == "parent proxy CONNECT"]) == 1, [s["name"] for s in spans]
    finally:
        parent.stop()


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_parents_407_is_counted_in_its_span_on_a_libcurl_transfer(proxy_factory, receiver, origin_factory,
                                                                     tls_cert, scheme):
    """A parent login negotiated from the parent's 407 (a password not limited to Basic) is libcurl's: plain http
    goes to the parent in absolute form, https inside a CONNECT (http_client = "libcurl" for that). The parent asks
    with a 407 first; the span counts it, ends at the parent's part, and records no secret."""
    cert, key = tls_cert
    o = origin_factory(tls=(cert, key)) if scheme == "https" else origin_factory()
    parent = ForwardingProxy("parentA", basic="puser:parent-secret-pw").start()
    try:
        conf = '\n[[credential]]\nname = "up"\ntype = "password"\nusername = "puser"\npassword = "parent-secret-pw"\n'
        proxy = {"upstream_proxy": "http://127.0.0.1:%d" % parent.port, "upstream_proxy_credential": "up"}
        if scheme == "https":
            conf += cred("trust", "server-trust", o.url, ca_file=cert)
            proxy["http_client"] = "libcurl"
        p = proxy_factory(proxy=proxy, env=otel_env(receiver), extra_config=conf)
        r, body = harness.fetch(p, "GET", o.url + "/echo?secret=not-in-a-span")
        assert r.status == 200, body[:300]
        # The parent asked first, then took the login.
        assert len(parent.authorizations) == 1 and parent.accepted >= 2, (parent.authorizations, parent.accepted)
        assert parent.saw("CONNECT" if scheme == "https" else "GET")
        spans, server, attempt, [connect] = parent_spans(receiver)
        assert attempt["attributes"]["authproxy.upstream.client"] == "libcurl"
        assert attempt["attributes"]["authproxy.route.parents"] == ["127.0.0.1:%d" % parent.port]
        assert attempt["attributes"]["http.response.status_code"] == 200
        a = connect["attributes"]
        assert a["authproxy.parent_proxy.auth_challenges"] == 1, a
        assert a["server.address"] == "127.0.0.1" and a["server.port"] == parent.port, a
        assert a["authproxy.connect.destination"] == "127.0.0.1:%d" % o.port, a
        assert "error.type" not in a, a
        if scheme == "https":
            assert a["http.request.method"] == "CONNECT" and a["http.response.status_code"] == 200, a
        else:
            # In absolute form the request itself goes to the parent; its answer is the origin's, on the attempt.
            assert a["http.request.method"] == "GET" and "http.response.status_code" not in a, a
        # The parent's 407 never reached the client nor the server span.
        assert server["attributes"]["http.response.status_code"] == 200
        assert_no_secret(spans, ["parent-secret-pw", "not-in-a-span", parent.authorizations[-1].split(" ")[-1]])
    finally:
        parent.stop()


def test_an_ntlm_parents_challenges_are_counted_as_its_log_shows_them(proxy_factory, receiver, origin, ntlm_parent):
    """A real NTLM forward proxy (Apache, parents rig): the span counts the 407s of libcurl's handshake with it
    exactly as the parent's own access log records them (the Type 2 challenge)."""
    from parents import rig as parents_rig
    from test_parent_proxy import corp, parent_settings
    p = proxy_factory(proxy=parent_settings(ntlm_parent), env=otel_env(receiver),
                      extra_config=corp(domain=parents_rig.NTLM_DOMAIN))
    r, body = harness.fetch(p, "GET", origin.url + "/echo?m=ntlm-trace")
    assert r.status == 200, body[:300]
    mine = [l for l in ntlm_parent.wait_access(lambda l: "/echo?m=ntlm-trace" in l and '" 200 ' in l, timeout=10)]
    assert mine, ntlm_parent.access_log_lines()[-6:]
    refused = [l for l in ntlm_parent.access_log_lines() if "/echo?m=ntlm-trace" in l and '" 407 ' in l]
    assert refused and all('pa="NTLM T' in l for l in refused), ntlm_parent.access_log_lines()[-6:]
    spans, server, attempt, [connect] = parent_spans(receiver)
    a = connect["attributes"]
    assert a["authproxy.parent_proxy.auth_challenges"] == len(refused), (a, refused)
    assert a["http.request.method"] == "GET" and "error.type" not in a, a
    assert a["server.port"] == int(ntlm_parent.url.rsplit(":", 1)[1]), a
    assert_no_secret(spans, [parents_rig.USERS["alice"]] + [l.split('pauth="')[1].split(" ")[1].rstrip('"')
                                                            for l in refused + mine])


@pytest.mark.parametrize("mode", MODES)
def test_a_socks_parent_has_its_span(proxy_factory, receiver, origin, tmp_path, mode):
    """A socks5h parent (microsocks): no HTTP head comes from it; its span ends when the connection through it is
    ready. On a libcurl transfer it is there for a new connection though nothing was counted; the own client
    carries plain http inside the SOCKS tunnel (its connector's span)."""
    import shutil
    from test_parent_proxy import _spawn, _stop
    if not shutil.which("microsocks"):
        pytest.skip("microsocks not installed")
    port = harness.free_port()
    socks = _spawn(["microsocks", "-i", "127.0.0.1", "-p", str(port)], port, tmp_path, "microsocks")
    try:
        p = proxy_factory(proxy={"upstream_proxy": "socks5h://127.0.0.1:%d" % port, "http_client": mode},
                          env=otel_env(receiver))
        r, body = harness.fetch(p, "GET", origin.url + "/echo?m=socks")
        assert r.status == 200, body[:300]
        spans, server, attempt, [connect] = parent_spans(receiver)
        assert attempt["attributes"]["authproxy.upstream.client"] == ("libcurl" if mode == "libcurl" else "own")
        a = connect["attributes"]
        assert a["authproxy.parent_proxy.scheme"] == "socks5h" and a["server.port"] == port, a
        assert a["http.request.method"] == "CONNECT", a
        assert "error.type" not in a, a
        if mode == "libcurl":
            assert a["authproxy.parent_proxy.auth_challenges"] == 0 and "http.response.status_code" not in a, a
        assert connect["end"] <= attempt["end"]
    finally:
        _stop(socks)


def test_an_https_parents_407_is_counted_on_the_default_client(proxy_factory, receiver, origin, tls_cert, tmp_path):
    """An `https` parent (stunnel in front of the test parent) carries plain http in absolute form over TLS: a
    libcurl route even with the default client. Its 407 is counted in the span."""
    import shutil
    from test_parent_proxy import _spawn, _stop
    if not shutil.which("stunnel4"):
        pytest.skip("stunnel4 not installed")
    cert, key = tls_cert
    parent = ForwardingProxy("parentA", basic="puser:parent-secret-pw").start()
    port = harness.free_port()
    conf = tmp_path / "stunnel.conf"
    conf.write_text("foreground = yes\npid =\n[parent]\naccept = 127.0.0.1:%d\nconnect = 127.0.0.1:%d\ncert = %s\n"
                    "key = %s\n" % (port, parent.port, cert, key))
    tls = None
    try:
        tls = _spawn(["stunnel4", str(conf)], port, tmp_path, "stunnel")
        creds = '\n[[credential]]\nname = "up"\ntype = "password"\nusername = "puser"\npassword = "parent-secret-pw"\n'
        p = proxy_factory(proxy={"upstream_proxy": "https://127.0.0.1:%d" % port, "upstream_proxy_ca": cert,
                                 "upstream_proxy_credential": "up"},
                          env=otel_env(receiver), extra_config=creds)
        r, body = harness.fetch(p, "GET", origin.url + "/echo?m=https-parent")
        assert r.status == 200, body[:300]
        assert len(parent.authorizations) == 1 and parent.saw("GET"), parent.authorizations
        spans, server, attempt, [connect] = parent_spans(receiver)
        assert attempt["attributes"]["authproxy.upstream.client"] == "libcurl"
        a = connect["attributes"]
        assert a["authproxy.parent_proxy.scheme"] == "https" and a["server.port"] == port, a
        assert a["http.request.method"] == "GET" and a["authproxy.parent_proxy.auth_challenges"] == 1, a
        assert "error.type" not in a, a
        assert_no_secret(spans, ["parent-secret-pw", parent.authorizations[-1].split(" ")[-1]])
    finally:
        if tls is not None:
            _stop(tls)
        parent.stop()


@pytest.mark.parametrize("login", ["basic", "none"])
def test_an_https_parent_without_a_negotiated_login_is_carried_by_the_own_client(proxy_factory, receiver, origin,
                                                                                tls_cert, tmp_path, login):
    """Plain http to an `https` parent with no login or a Basic-only one: the own client makes TLS to the parent
    (verified with `upstream_proxy_ca`) and writes the request in absolute form over it; the Basic login goes with
    the request (no 407 round)."""
    import shutil
    from test_parent_proxy import _spawn, _stop
    if not shutil.which("stunnel4"):
        pytest.skip("stunnel4 not installed")
    cert, key = tls_cert
    parent = ForwardingProxy("parentA", basic="puser:parent-secret-pw" if login == "basic" else None).start()
    port = harness.free_port()
    conf = tmp_path / "stunnel.conf"
    conf.write_text("foreground = yes\npid =\n[parent]\naccept = 127.0.0.1:%d\nconnect = 127.0.0.1:%d\ncert = %s\n"
                    "key = %s\n" % (port, parent.port, cert, key))
    tls = None
    try:
        tls = _spawn(["stunnel4", str(conf)], port, tmp_path, "stunnel")
        settings = {"upstream_proxy": "https://127.0.0.1:%d" % port, "upstream_proxy_ca": cert}
        creds = ""
        if login == "basic":
            settings["upstream_proxy_credential"] = "up"
            creds = ('\n[[credential]]\nname = "up"\ntype = "password"\nusername = "puser"\n'
                     'password = "parent-secret-pw"\nschemes = ["basic"]\n')
        p = proxy_factory(proxy=settings, env=otel_env(receiver), extra_config=creds)
        import requests
        session = requests.Session()
        session.trust_env = False
        r = session.get(origin.url + "/echo?m=https-parent-0", proxies=p.proxies, timeout=20)
        assert r.status_code == 200, r.text[:300]
        assert parent.saw("GET")
        spans, server, attempt, [connect] = parent_spans(receiver)
        expected = "libcurl" if os.environ.get("AUTHPROXY_TEST_HTTP_CLIENT") == "libcurl" else "own"
        assert attempt["attributes"]["authproxy.upstream.client"] == expected, attempt["attributes"]
        a = connect["attributes"]
        assert a["authproxy.parent_proxy.scheme"] == "https" and a["server.port"] == port, a
        assert "error.type" not in a, a
        assert_no_secret(spans, ["parent-secret-pw", "cHVzZXI6cGFyZW50LXNlY3JldC1wdw=="])
        # The test parent closes each connection after one exchange (connection reuse through a real https parent:
        # test_parent_proxy.py, Squid behind stunnel).
        r = session.get(origin.url + "/echo?m=https-parent-1", proxies=p.proxies, timeout=20)
        assert r.status_code == 200, r.text[:300]
        if login == "basic":
            # Sent with each request: the parent never had to ask.
            assert len(parent.authorizations) == 2, parent.authorizations
    finally:
        if tls is not None:
            _stop(tls)
        parent.stop()


def test_an_https_parent_whose_certificate_is_not_trusted_fails_over(proxy_factory, origin, tls_cert, tmp_path):
    """The TLS to an https parent is verified: an untrusted one is the parent's failure, and the next parent
    carries the request (the own client's TLS to the parent, or libcurl's)."""
    import shutil
    from test_parent_proxy import _spawn, _stop
    if not shutil.which("stunnel4"):
        pytest.skip("stunnel4 not installed")
    cert, key = tls_cert
    bad = ForwardingProxy("parentBad").start()
    good = ForwardingProxy("parentGood").start()
    port = harness.free_port()
    conf = tmp_path / "stunnel.conf"
    conf.write_text("foreground = yes\npid =\n[parent]\naccept = 127.0.0.1:%d\nconnect = 127.0.0.1:%d\ncert = %s\n"
                    "key = %s\n" % (port, bad.port, cert, key))
    tls = None
    try:
        tls = _spawn(["stunnel4", str(conf)], port, tmp_path, "stunnel")
        # No upstream_proxy_ca: the https parent's self-signed certificate is not trusted.
        p = proxy_factory(proxy={"upstream_proxy": ["https://127.0.0.1:%d" % port,
                                                    "http://127.0.0.1:%d" % good.port]})
        r, body = harness.fetch(p, "GET", origin.url + "/echo?m=untrusted")
        assert r.status == 200, body[:300]
        assert good.saw("GET") and not bad.saw("GET")
    finally:
        if tls is not None:
            _stop(tls)
        bad.stop()
        good.stop()


def test_a_parent_that_refuses_the_login_ends_its_span_with_the_failure(proxy_factory, receiver, origin):
    """A libcurl transfer that never gets past the parent (a wrong password: 407 again): the span ends with the
    parent's refusal and counts both 407s."""
    parent = ForwardingProxy("parentA", basic="puser:parent-secret-pw").start()
    try:
        conf = '\n[[credential]]\nname = "up"\ntype = "password"\nusername = "puser"\npassword = "wrong-secret-pw"\n'
        p = proxy_factory(proxy={"upstream_proxy": "http://127.0.0.1:%d" % parent.port,
                                 "upstream_proxy_credential": "up"},
                          env=otel_env(receiver), extra_config=conf)
        r, body = harness.fetch(p, "GET", origin.url + "/echo")
        assert r.status == 502, (r.status, body[:300])
        spans, server, attempt, [connect] = parent_spans(receiver)
        a = connect["attributes"]
        assert a["authproxy.parent_proxy.auth_challenges"] == 2, a
        assert a["http.response.status_code"] == 407 and a["error.type"] == "auth", a
        assert connect["status"]["code"] == 2
        assert attempt["attributes"]["error.type"] == "parent_proxy", attempt["attributes"]
        assert_no_secret(spans, ["wrong-secret-pw"] + [x.split(" ")[-1] for x in parent.authorizations])
    finally:
        parent.stop()


def test_a_tunnel_refused_by_one_parent_goes_through_the_next_with_a_span_each(proxy_factory, receiver,
                                                                               origin_factory, tls_cert):
    """libcurl, https through two parents: the first refuses the login (407 to the end) and the transfer moves to
    the second; each parent has its span (the refusal with its 407s, the tunnel), and none of the first parent's
    answers reached the client."""
    cert, key = tls_cert
    o = origin_factory(tls=(cert, key))
    refusing = ForwardingProxy("parentA", basic="someone:else-entirely").start()
    taking = ForwardingProxy("parentB").start()
    try:
        conf = ('\n[[credential]]\nname = "up"\ntype = "password"\nusername = "puser"\n'
                'password = "parent-secret-pw"\n' + cred("trust", "server-trust", o.url, ca_file=cert))
        p = proxy_factory(proxy={"upstream_proxy": ["http://127.0.0.1:%d" % refusing.port,
                                                    "http://127.0.0.1:%d" % taking.port],
                                 "upstream_proxy_credential": "up", "http_client": "libcurl"},
                          env=otel_env(receiver), extra_config=conf)
        r, body = harness.fetch(p, "GET", o.url + "/echo")
        assert r.status == 200 and "proxy-authenticate" not in {k.lower() for k in r.headers.keys()}, body[:300]
        assert json.loads(body)["path"] == "/echo"
        assert refusing.authorizations and not refusing.saw("CONNECT") and taking.saw("CONNECT")
        spans, server, attempt, (first, second) = parent_spans(receiver, count=2)
        a, b = first["attributes"], second["attributes"]
        assert a["server.port"] == refusing.port and b["server.port"] == taking.port, (a, b)
        assert a["error.type"] == "auth" and a["http.response.status_code"] == 407 and first["status"]["code"] == 2, a
        assert a["authproxy.parent_proxy.auth_challenges"] == len(refusing.authorizations) + 1, \
            (a, refusing.authorizations)
        assert b["http.response.status_code"] == 200 and b["authproxy.parent_proxy.auth_challenges"] == 0, b
        assert "error.type" not in b and first["end"] <= second["start"], (first, second)
        assert attempt["attributes"]["http.response.status_code"] == 200
        assert_no_secret(spans, ["parent-secret-pw"] + [x.split(" ")[-1] for x in refusing.authorizations])
    finally:
        refusing.stop()
        taking.stop()


def test_sampler_always_off_exports_nothing_and_says_not_sampled(proxy_factory, receiver, origin):
    tracing = '\n[tracing]\nendpoint = "%s"\nsampler = "always_off"\nschedule_delay_ms = 50\n' % receiver.endpoint
    p = proxy_factory(extra_config=tracing)
    headers = {"traceparent": "00-%s-%s-01" % (CLIENT_TRACE, CLIENT_SPAN)}
    for _ in range(3):
        r, body = harness.fetch(p, "GET", origin.url + "/echo", headers=headers)
        assert r.status == 200
    got = dict((k.lower(), v) for k, v in json.loads(body)["headers"])
    # Continued, but flagged as not sampled for the hops after the proxy.
    assert re.fullmatch(r"00-%s-[0-9a-f]{16}-00" % CLIENT_TRACE, got["traceparent"]), got
    assert trace_ids_in_access_log(p, 3) == [CLIENT_TRACE] * 3
    # Stopped (which flushes what is pending): still nothing came.
    p.stop()
    assert receiver.spans() == [] and receiver.requests == []


def test_spans_are_flushed_at_shutdown(proxy_factory, receiver, origin):
    # A schedule delay longer than the test: only the flush at shutdown can send the span.
    p = proxy_factory(env=otel_env(receiver, OTEL_BSP_SCHEDULE_DELAY="600000"))
    r, _ = harness.fetch(p, "GET", origin.url + "/json")
    assert r.status == 200
    time.sleep(0.3)
    assert receiver.spans() == []
    p.stop()
    spans = receiver.wait_for(lambda sp: len(sp) >= 2, timeout=5)
    assert {s["kind"] for s in spans} == {"SPAN_KIND_SERVER", "SPAN_KIND_CLIENT"}, spans


def test_tracing_config_errors_name_the_setting(proxy_binary, tmp_path):
    cfg = tmp_path / "p.toml"
    cfg.write_text('[proxy]\nlisten = ["127.0.0.1:0"]\n\n[tracing]\nendpoint = "http://127.0.0.1:4318"\n'
                   'sampler = "sometimes"\n')
    r = harness.run_cli(["check", "--config", str(cfg)])
    assert r.returncode != 0 and "tracing.sampler" in (r.stdout + r.stderr), r.stdout + r.stderr
    cfg.write_text('[proxy]\nlisten = ["127.0.0.1:0"]\n')
    r = harness.run_cli(["check", "--config", str(cfg)],
                        env=harness.clean_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
                                               "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}))
    assert r.returncode != 0 and "OTEL_EXPORTER_OTLP_PROTOCOL" in (r.stdout + r.stderr), r.stdout + r.stderr


def test_each_upstream_attempt_has_its_span_with_the_retry_cause(proxy_factory, receiver, origin):
    p = proxy_factory(proxy={"upstream_retries": 1, "max_retry_wait_seconds": 1}, env=otel_env(receiver))
    r, _ = harness.fetch(p, "GET", origin.url + "/status/503")
    assert r.status == 503
    spans = receiver.wait_for(lambda sp: len([s for s in sp if s["kind"] == "SPAN_KIND_CLIENT"]) >= 2
                              and any(s["kind"] == "SPAN_KIND_SERVER" for s in sp))
    server = one(spans, kind="SPAN_KIND_SERVER")
    assert server["attributes"]["error.type"] == "503" and server["status"]["code"] == 2
    attempts = sorted([s for s in spans if s["kind"] == "SPAN_KIND_CLIENT"], key=lambda s: s["start"])
    assert len(attempts) == 2
    assert "authproxy.retry.cause" not in attempts[0]["attributes"]
    assert attempts[1]["attributes"]["authproxy.retry.cause"] == "503"
    assert attempts[1]["attributes"]["http.request.resend_count"] == 1
    assert all(a["attributes"]["http.response.status_code"] == 503 for a in attempts)
    assert attempts[0]["end"] <= attempts[1]["start"]


def test_a_single_flight_wait_is_told_from_the_own_token_fetch(proxy_factory, receiver):
    import threading
    ags = ArcGISServer(role="server", ttl=60, token_delay=0.5).start()
    try:
        p = proxy_factory(env=otel_env(receiver), extra_config=arcgis_cred(ags))
        url = ags.query_url() + "?f=json"
        results = []

        def one_request():
            r, _ = harness.fetch(p, "GET", url, timeout=20)
            results.append(r.status)

        threads = [threading.Thread(target=one_request) for _ in range(2)]
        for t in threads:
            t.start()
            time.sleep(0.1)
        for t in threads:
            t.join(30)
        assert results == [200, 200]
        assert ags.stats()["tokens_issued_total"] == 1
        spans = receiver.wait_for(lambda sp: len([s for s in sp if s["name"] == "token wait"]) >= 2)
        waits = [s for s in spans if s["name"] == "token wait"]
        assert sorted(w["attributes"]["authproxy.token.source"] for w in waits) == ["own_fetch", "single_flight"]
        fetches = [s for s in spans if s["name"] == "token fetch"]
        own = [w for w in waits if w["attributes"]["authproxy.token.source"] == "own_fetch"][0]
        assert len(fetches) == 1 and fetches[0]["parent_span_id"] == own["span_id"]
        assert fetches[0]["trace_id"] == own["trace_id"]
    finally:
        ags.stop()


def test_a_pac_evaluation_has_its_span(proxy_factory, receiver, origin):
    from forwarding_proxy import PacServer
    pac = PacServer('function FindProxyForURL(url, host) { return "DIRECT"; }').start()
    try:
        p = proxy_factory(proxy={"upstream_pac": pac.url}, env=otel_env(receiver))
        r, _ = harness.fetch(p, "GET", origin.url + "/json")
        assert r.status == 200
        spans = receiver.wait_for(lambda sp: any(s["name"] == "PAC evaluation" for s in sp)
                                  and any(s["kind"] == "SPAN_KIND_SERVER" for s in sp))
        server = one(spans, kind="SPAN_KIND_SERVER")
        pac_span = one(spans, name="PAC evaluation")
        assert pac_span["parent_span_id"] == server["span_id"]
        assert pac_span["attributes"]["server.address"] == "127.0.0.1"
        attempt = one(spans, kind="SPAN_KIND_CLIENT")
        assert pac_span["end"] <= attempt["start"]
    finally:
        pac.stop()


def test_a_fleet_replica_records_its_wait_for_the_redis_lock(proxy_factory, receiver, tmp_path):
    from test_fleet import RedisServer, STATE_KEY, cluster_section, wait_connected
    redis = RedisServer(tmp_path).start()
    ags = ArcGISServer(role="server", ttl=600).start()
    try:
        extra = cluster_section(redis.url()) + arcgis_cred(ags)
        fleet = [proxy_factory(proxy={"state_key": STATE_KEY}, env=otel_env(receiver), extra_config=extra)
                 for _ in range(2)]
        wait_connected(fleet)
        for p in fleet:
            r, body = harness.fetch(p, "GET", ags.query_url() + "?f=json")
            assert r.status == 200, body[:300]
        spans = receiver.wait_for(lambda sp: len([s for s in sp if s["name"] == "token lock wait"]) >= 2)
        waits = sorted([s for s in spans if s["name"] == "token lock wait"], key=lambda s: s["start"])
        assert [w["attributes"]["authproxy.lock.outcome"] for w in waits] == ["lease", "shared"]
        assert all(w["attributes"]["db.system"] == "redis" for w in waits)
        # The first replica fetched the token after taking the lock; the second took it from the store.
        fetches = [s for s in spans if s["name"] == "token fetch"]
        assert len(fetches) == 1 and fetches[0]["trace_id"] == waits[0]["trace_id"]
        assert fetches[0]["start"] >= waits[0]["end"]
        assert_no_secret(spans, ["alice-pass", STATE_KEY] + list(ags.state.tokens.keys()))
    finally:
        ags.stop()
        redis.stop()


def test_dropped_spans_are_counted_by_reason(proxy_factory, origin):
    """An endpoint that takes connections and never answers: each export times out (its batch is dropped,
    reason export_failed), and with a queue of 2 the spans made meanwhile do not fit (reason queue_full)."""
    from test_admin import samples, start_with_admin, value
    import socket
    sink = socket.socket()
    sink.bind(("127.0.0.1", 0))
    sink.listen(64)  # never accepted: the export's request is taken by the kernel and never answered
    try:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:%d" % sink.getsockname()[1],
               "OTEL_BSP_SCHEDULE_DELAY": "50", "OTEL_BSP_MAX_QUEUE_SIZE": "2", "OTEL_EXPORTER_OTLP_TIMEOUT": "1000"}
        p = start_with_admin(proxy_factory, "", env=env)
        deadline = time.monotonic() + 30
        while True:
            r, _ = harness.fetch(p, "GET", origin.url + "/json")
            assert r.status == 200
            m = samples(p)
            full = value(m, "authproxy_trace_spans_dropped_total", reason="queue_full")
            failed = value(m, "authproxy_trace_spans_dropped_total", reason="export_failed")
            if full >= 1 and failed >= 1:
                break
            assert time.monotonic() < deadline, (full, failed)
            time.sleep(0.2)
        assert value(m, "authproxy_trace_spans_exported_total") == 0
        assert "trace export failed: spans dropped" in p.log_text()
    finally:
        sink.close()


def test_an_https_endpoint_is_trusted_through_its_ca_file(proxy_factory, origin, tls_cert):
    """A collector on https with a certificate of its own CA: refused (and counted) without the CA; exported with
    [tracing] ca_file, or with OTEL_EXPORTER_OTLP_CERTIFICATE."""
    from test_admin import samples, start_with_admin, value
    cert, key = tls_cert
    r = OTLPReceiver(tls=(cert, key)).start()
    try:
        # Without the CA: the export fails on the certificate and its spans are counted as dropped.
        p = start_with_admin(proxy_factory, "", env={"OTEL_EXPORTER_OTLP_ENDPOINT": r.endpoint,
                                                      "OTEL_BSP_SCHEDULE_DELAY": "50"})
        assert harness.fetch(p, "GET", origin.url + "/json")[0].status == 200
        assert p.wait_for_log(lambda l: "trace export failed" in l, timeout=10), p.log_text()[-2000:]
        assert re.search(r"trace export failed.*(certificate|SSL|TLS)", p.log_text(), re.I), p.log_text()[-2000:]
        assert value(samples(p), "authproxy_trace_spans_dropped_total", reason="export_failed") >= 1
        assert r.spans() == []
        p.stop()
        # [tracing] ca_file.
        p = proxy_factory(extra_config='\n[tracing]\nendpoint = "%s"\nschedule_delay_ms = 50\nca_file = "%s"\n'
                          % (r.endpoint, cert))
        assert harness.fetch(p, "GET", origin.url + "/json")[0].status == 200
        spans = r.wait_for(lambda sp: len(sp) >= 2, timeout=10)
        assert {s["kind"] for s in spans} >= {"SPAN_KIND_SERVER"}, spans
        p.stop()
        # The standard variable.
        before = len(r.spans())
        p = proxy_factory(env={"OTEL_EXPORTER_OTLP_ENDPOINT": r.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50",
                               "OTEL_EXPORTER_OTLP_CERTIFICATE": cert})
        assert harness.fetch(p, "GET", origin.url + "/json")[0].status == 200
        assert len(r.wait_for(lambda sp: len(sp) >= before + 2, timeout=10)) >= before + 2
        p.stop()
    finally:
        r.stop()
    assert not r.errors, r.errors


def test_a_tracing_ca_file_that_is_not_a_certificate_is_refused_by_name(proxy_binary, tmp_path):
    bad = tmp_path / "not-a-ca.pem"
    bad.write_text("hello\n")
    cfg = tmp_path / "p.toml"
    cfg.write_text('[proxy]\nlisten = ["127.0.0.1:0"]\n\n[tracing]\nendpoint = "https://127.0.0.1:4318"\n'
                   'ca_file = "%s"\n' % bad)
    out = harness.run_cli(["check", "--config", str(cfg)])
    assert out.returncode != 0 and "tracing.ca_file" in (out.stdout + out.stderr), out.stdout + out.stderr
    cfg.write_text('[proxy]\nlisten = ["127.0.0.1:0"]\n\n[tracing]\nendpoint = "http://127.0.0.1:4318"\n'
                   'ca_file = "%s"\n' % bad)
    out = harness.run_cli(["check", "--config", str(cfg)])
    assert out.returncode != 0 and "is for an https:// endpoint" in (out.stdout + out.stderr), out.stdout
    cfg.write_text('[proxy]\nlisten = ["127.0.0.1:0"]\n')
    out = harness.run_cli(["check", "--config", str(cfg)],
                          env=harness.clean_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "https://127.0.0.1:4318",
                                                 "OTEL_EXPORTER_OTLP_CERTIFICATE": str(tmp_path / "missing.pem")}))
    assert out.returncode != 0 and "OTEL_EXPORTER_OTLP_CERTIFICATE" in (out.stdout + out.stderr), out.stdout


def test_a_wait_for_a_fleet_limits_permit_has_its_span(proxy_factory, receiver, origin, tmp_path):
    """[cluster] rate limits counted in Redis: a request whose replica holds no permit waits for a lease, in a span
    under the exchange's: `granted` when the fleet's count had room, `limited` when another replica used it up,
    `fallback` when Redis is gone and this replica's share decided."""
    from test_fleet import RedisServer
    from test_limits import header_cred
    redis = RedisServer(tmp_path).start()
    try:
        # Per hour for the fleet (a window that cannot end within the test: see test_cluster_limits): 1 for the
        # first credential; 10 for the second, whose share without Redis is 5 per replica.
        def per_hour(n):
            return 'rate_limit = { requests = %d, per_seconds = 3600, scope = "credential" }\n' % n

        extra = ('[cluster]\nredis = "%s"\nreplicas = 2\ntimeout_ms = 2000\n' % redis.url()
                 + header_cred("fleet-key", origin.url + "/echo", "k-fleet-secret", per_hour(1))
                 + header_cred("later-key", origin.url + "/json", "k-later-secret", per_hour(10)))
        left = 3600 - time.time() % 3600
        if left < 60:
            time.sleep(left + 1)
        a, b = [proxy_factory(proxy={"state_key": "trace-fleet-state-key-0123456789", "workers": 1},
                              env=otel_env(receiver), extra_config=extra) for _ in range(2)]
        r, body = harness.fetch(a, "GET", origin.url + "/echo?n=1")
        assert r.status == 200, body[:300]
        r, body = harness.fetch(b, "GET", origin.url + "/echo?n=2")
        assert r.status == 429 and b"all clients of all replicas together" in body, (r.status, body[:300])
        redis.kill()
        r, body = harness.fetch(a, "GET", origin.url + "/json")
        assert r.status == 200, body[:300]  # a's share of the untouched limit: 10 ÷ 2

        spans = receiver.wait_for(lambda sp: len([s for s in sp if s["name"] == "fleet limit wait"]) >= 3
                                  and len([s for s in sp if s["kind"] == "SPAN_KIND_SERVER"]) >= 3, timeout=15)
        waits = sorted([s for s in spans if s["name"] == "fleet limit wait"], key=lambda s: s["start"])
        assert [(w["attributes"]["authproxy.fleet_limit.outcome"], w["attributes"]["authproxy.fleet_limit.allowed"])
                for w in waits] == [("granted", True), ("limited", False), ("fallback", True)], waits
        assert [w["attributes"]["authproxy.credential"] for w in waits] == ["fleet-key", "fleet-key", "later-key"]
        servers = {s["span_id"]: s for s in spans if s["kind"] == "SPAN_KIND_SERVER"}
        for w, status in zip(waits, [200, 429, 200]):
            assert w["kind"] == "SPAN_KIND_INTERNAL" and w["attributes"]["authproxy.fleet_limit.kind"] == "rate"
            server = servers[w["parent_span_id"]]
            assert server["trace_id"] == w["trace_id"]
            assert server["attributes"]["http.response.status_code"] == status
            assert server["start"] <= w["start"] <= w["end"] <= server["end"]
        # The refused request never went upstream: no attempt span in its trace.
        assert not [s for s in by_trace(spans, waits[1]["trace_id"]) if s["kind"] == "SPAN_KIND_CLIENT"]
        assert_no_secret(spans, ["k-fleet-secret", "k-later-secret", redis.password,
                                 "trace-fleet-state-key-0123456789"])
    finally:
        redis.stop()
