"""`authproxy doctor URL` through the real binary, against real loopback servers: the ArcGIS imitation
(standalone token-based, federated with a portal, self-signed https) and the netauth Apache rig (Basic,
Digest, NTLM, Negotiate, IIS-like, mutual TLS).

For each: stdout is valid TOML (Python's tomllib), names the right credential type(s) and match prefix(es),
and once its placeholders are filled in the way an operator would (user names, files, the environment
variables it names), `authproxy check` accepts it -- and refuses it while they are not filled in.
"""

import json
import re
import socket
import ssl
import subprocess
import tomllib

import pytest

import harness
from arcgis import ArcGISServer
from netauth.fixtures import netauth_rig  # noqa: F401  (fixture)


def run_doctor(url, *args, timeout=60):
    return subprocess.run([harness.proxy_bin(), "doctor", url, *args], capture_output=True, text=True,
                          timeout=timeout, env=harness.clean_env(), stdin=subprocess.DEVNULL)


def doctor_ok(proxy_binary, url, *args):
    r = run_doctor(url, *args)
    assert r.returncode == 0, "doctor failed (%d):\n%s\n%s" % (r.returncode, r.stdout, r.stderr)
    doc = tomllib.loads(r.stdout)
    assert set(doc) <= {"credential"}, doc
    return r, doc.get("credential", [])


def by_type(creds):
    out = {}
    for c in creds:
        assert c["type"] not in out, "two %s blocks: %r" % (c["type"], creds)
        out[c["type"]] = c
    return out


def matches(c):
    return c["match"] if isinstance(c["match"], list) else [c["match"]]


def write_config(tmp_path, body, name="filled.toml"):
    port = harness.free_port()
    text = harness.render_config(harness.default_proxy_section(port, str(tmp_path / "state")),
                                 harness.default_log_section()) + "\n" + body
    p = tmp_path / name
    p.write_text(text)
    return p


def fill(stdout, files=None, principal=None, env_values=None):
    """Fill the placeholders as an operator would: file keys get real paths, other REPLACE_ME values a
    name, and every "${VAR}" gets a value in the environment.  Returns (text, env)."""
    text = stdout
    for key, path in (files or {}).items():
        text, n = re.subn(r'^(%s\s*=\s*)"REPLACE_ME[^"]*"' % re.escape(key),
                          lambda m: m.group(1) + json.dumps(path), text, flags=re.M)
        assert n >= 1, "no %s placeholder in:\n%s" % (key, stdout)
    if principal:
        text = re.sub(r'^(principal\s*=\s*)"REPLACE_ME"', lambda m: m.group(1) + json.dumps(principal),
                      text, flags=re.M)
    text = text.replace('"REPLACE_ME"', '"alice"')
    active = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    assert not any("REPLACE_ME" in ln for ln in active), "unfilled placeholder left:\n%s" % text
    env = harness.clean_env()
    for var in re.findall(r'^[a-z_]+\s*=\s*"\$\{([A-Z0-9_]+)\}"', text, flags=re.M):
        env[var] = (env_values or {}).get(var, "filled-in-secret-%s" % var.lower())
    return text, env


def assert_check_accepts_once_filled(tmp_path, stdout, **kw):
    # Unfilled, check must refuse it: a placeholder is never silently accepted.
    raw = write_config(tmp_path, stdout, "unfilled.toml")
    r = harness.run_cli(["check", "--config", str(raw)])
    assert r.returncode != 0, "check accepted unfilled placeholders:\n%s" % stdout
    text, env = fill(stdout, **kw)
    cfg = write_config(tmp_path, text)
    r = harness.run_cli(["check", "--config", str(cfg)], env=env)
    assert r.returncode == 0, "check refused the filled-in doctor output:\n%s\n%s%s" % (text, r.stdout, r.stderr)
    return r


# ---------------------------------------------------------------------------
# ArcGIS
# ---------------------------------------------------------------------------

def test_standalone_token_server(proxy_binary, ags, tmp_path):
    r, creds = doctor_ok(proxy_binary, ags.query_url() + "?where=1%3D1&outFields=*&f=json")
    assert list(by_type(creds)) == ["arcgis-token"], r.stdout
    c = creds[0]
    assert matches(c) == [ags.server_root]
    assert c["token_url"] == ags.server_root + "/tokens/generateToken"
    assert c["username"] == "REPLACE_ME"
    assert re.fullmatch(r"\$\{AUTHPROXY_[A-Z0-9_]+_PASSWORD\}", c["password"]), c["password"]
    # The summary reads rest/info and the 499 answer.
    assert "token-based security" in r.stderr
    assert "short-lived token validity" in r.stderr
    assert "499" in r.stderr and "Token Required" in r.stderr
    assert_check_accepts_once_filled(tmp_path, r.stdout)


def test_filled_in_standalone_block_works_through_the_proxy(proxy_factory, ags, session):
    """The proposed block is not only valid: filled in, it gets the proxy a token from this server."""
    url = ags.query_url() + "?where=1%3D1&f=json"
    r, _ = doctor_ok(None, url)
    var = re.search(r'^password\s*=\s*"\$\{([A-Z0-9_]+)\}"', r.stdout, re.M).group(1)
    text, _ = fill(r.stdout)
    p = proxy_factory(extra_config="\n" + text, env={var: "alice-pass"})
    resp = session.get(url, proxies=p.proxies)
    assert resp.status_code == 200, resp.text
    assert resp.json().get("features"), resp.text


def test_doctor_appended_for_two_servers_on_one_host_gives_distinct_names(proxy_binary, ags, tmp_path):
    """`authproxy doctor URL >> proxy.conf` for two ArcGIS servers behind one host name: the blocks get different
    names and secret variables (port and web adaptor are in them), a repeated run with --config proposes nothing
    already configured, and `check` accepts the result once filled in (found by a README walk-through)."""
    other = ArcGISServer(role="server", ttl=60).start()
    try:
        cfg = write_config(tmp_path, "", "appended.toml")
        for url in (ags.query_url() + "?f=json", other.query_url() + "?f=json", ags.query_url() + "?f=json"):
            # The blocks appended so far are not filled in yet: --config reads them all the same.
            r = run_doctor(url, "--config", str(cfg))
            assert r.returncode == 0, r.stderr
            with open(cfg, "a") as f:
                f.write("\n" + r.stdout)
        # The third run finds the first server's credential configured and proposes nothing again.
        assert "[[credential]]" not in r.stdout.replace("# [[credential]]", ""), r.stdout
        names = re.findall(r'^name\s*=\s*"([^"]+)"', cfg.read_text(), re.M)
        assert len(names) == 2 and len(set(names)) == 2, names
        variables = re.findall(r'^password\s*=\s*"\$\{([A-Z0-9_]+)\}"', cfg.read_text(), re.M)
        assert len(set(variables[:2])) == 2, variables
        text, env = fill(cfg.read_text())
        filled = tmp_path / "appended-filled.toml"
        filled.write_text(text)
        r = harness.run_cli(["check", "--config", str(filled)], env=env)
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        other.stop()


def test_federated_server_points_at_the_portal(proxy_binary, federation, tmp_path):
    portal, server = federation
    r, creds = doctor_ok(proxy_binary, server.query_url() + "?where=1%3D1&f=json")
    assert list(by_type(creds)) == ["arcgis-token"], r.stdout
    c = creds[0]
    assert c["token_url"] == portal.sharing_url + "/generateToken"
    assert server.server_root in matches(c) and portal.portal_url in matches(c)
    # The OAuth alternative (commented out) names the portal too.
    assert re.search(r'^# portal_url\s*=\s*"%s"' % re.escape(portal.portal_url), r.stdout, re.M), r.stdout
    assert "owningSystemUrl: %s (federated)" % portal.portal_url in r.stderr
    assert "federated with the portal" in r.stdout
    assert_check_accepts_once_filled(tmp_path, r.stdout)


def test_public_resource_on_a_token_server_needs_nothing_active(proxy_binary, ags):
    r, creds = doctor_ok(proxy_binary, ags.query_url(folder="Public") + "?where=1%3D1&f=json")
    assert creds == [], r.stdout
    assert "# type" in r.stdout and "arcgis-token" in r.stdout  # proposed, commented out
    assert "public resource" in r.stderr


def test_query_string_secrets_are_never_printed(proxy_binary, ags):
    r = run_doctor(ags.query_url() + "?f=json&token=SEKRIT-TOKEN-123")
    assert r.returncode == 0, r.stderr
    assert "SEKRIT" not in r.stdout + r.stderr
    assert "498" in r.stderr  # the server refused that token, and the summary says so


def test_self_signed_https_server(proxy_binary, tls_cert, tmp_path):
    cert, key = tls_cert
    s = ArcGISServer(role="server", ttl=60, tls=(cert, key)).start()
    try:
        url = s.query_url() + "?f=json"
        assert url.startswith("https://")
        r, creds = doctor_ok(proxy_binary, url)
        t = by_type(creds)
        assert set(t) == {"server-trust", "arcgis-token"}, r.stdout
        origin = s.url
        assert matches(t["server-trust"]) == [origin]
        assert matches(t["arcgis-token"]) == [s.server_root]
        assert "does NOT verify against the system CAs" in r.stderr
        assert "read without certificate verification" in r.stderr
        pin = re.search(r'^# pinned_public_key\s*=\s*"(sha256//[A-Za-z0-9+/=]+)"', r.stdout, re.M).group(1)
        assert_check_accepts_once_filled(tmp_path, r.stdout, files={"ca_file": cert})

        # Through --config: the same trust settings as the proxy. A ca_file that issued it → verifies.
        for setting in [{"ca_file": cert}, {"pinned_public_key": pin}]:
            cfg = write_config(tmp_path, harness.cred("trust", "server-trust", origin, **setting), "trust.toml")
            r2, creds2 = doctor_ok(proxy_binary, url, "--config", str(cfg))
            assert list(by_type(creds2)) == ["arcgis-token"], (setting, r2.stdout)
            assert "verifies with server-trust 'trust'" in r2.stderr, r2.stderr
            assert "read without certificate verification" not in r2.stderr
    finally:
        s.stop()


# ---------------------------------------------------------------------------
# Apache netauth rig
# ---------------------------------------------------------------------------

def origin_of(vhost):
    return vhost.url.rstrip("/")


@pytest.mark.parametrize("vhost,schemes", [("basic", ["basic"]), ("digest", ["digest"]), ("ntlm", ["ntlm"])])
def test_password_schemes(proxy_binary, netauth_rig, tmp_path, vhost, schemes):
    v = getattr(netauth_rig, vhost)
    r, creds = doctor_ok(proxy_binary, v.url + "data")
    assert list(by_type(creds)) == ["password"], r.stdout
    c = creds[0]
    assert c["schemes"] == schemes
    assert matches(c) == [origin_of(v)]
    # Basic over plain http is only sent when allowed, so the block must say so.
    assert c.get("allow_basic_over_http", False) is (vhost == "basic")
    assert "WWW-Authenticate: " in r.stderr
    assert_check_accepts_once_filled(tmp_path, r.stdout)


def test_iis_like_negotiate_and_ntlm(proxy_binary, netauth_rig, tmp_path):
    v = netauth_rig.iis
    r, creds = doctor_ok(proxy_binary, v.url)
    assert list(by_type(creds)) == ["password"], r.stdout
    assert creds[0]["schemes"] == ["ntlm"]
    assert "Negotiate, NTLM" in r.stderr
    assert re.search(r'^# type\s*=\s*"kerberos"', r.stdout, re.M), "kerberos alternative missing:\n" + r.stdout
    assert_check_accepts_once_filled(tmp_path, r.stdout)


def test_negotiate_only_is_kerberos(proxy_binary, netauth_rig, tmp_path):
    v = netauth_rig.kerberos
    r, creds = doctor_ok(proxy_binary, v.url)
    assert list(by_type(creds)) == ["kerberos"], r.stdout
    assert matches(creds[0]) == [origin_of(v)]
    assert_check_accepts_once_filled(tmp_path, r.stdout, files={"keytab": netauth_rig.realm.client_keytab},
                                     principal=netauth_rig.realm.principal)


def test_mtls_client_certificate_requested(proxy_binary, netauth_rig, tmp_path):
    v = netauth_rig.mtls
    pki = netauth_rig.pki
    r, creds = doctor_ok(proxy_binary, v.url)
    t = by_type(creds)
    # The rig's server CA is not a system CA, and the server wants a client certificate.
    assert set(t) == {"certificate", "server-trust"}, r.stdout
    assert matches(t["certificate"]) == [origin_of(v)]
    assert matches(t["server-trust"]) == [origin_of(v)]
    assert "asks for a client certificate in the handshake" in r.stderr
    assert "netauth client CA" in r.stderr  # the accepted issuers
    assert "certificate required" in r.stderr
    var = re.search(r'^password\s*=\s*"\$\{([A-Z0-9_]+)\}"', r.stdout, re.M).group(1)
    assert_check_accepts_once_filled(tmp_path, r.stdout, files={"file": pki.bob_p12, "ca_file": pki.server_ca},
                                     env_values={var: pki.bob_p12_password})

    # With the server's CA from --config, only the certificate is missing.
    trust = harness.cred("rig-ca", "server-trust", origin_of(v), ca_file=pki.server_ca)
    cfg = write_config(tmp_path, trust, "trust.toml")
    r2, creds2 = doctor_ok(proxy_binary, v.url, "--config", str(cfg))
    assert list(by_type(creds2)) == ["certificate"], r2.stdout
    assert "verifies with server-trust 'rig-ca'" in r2.stderr

    # With a client certificate configured too, nothing is missing and the request gets through.
    cert = harness.cred("bob", "certificate", origin_of(v), file=pki.bob_p12, password=pki.bob_p12_password)
    cfg = write_config(tmp_path, trust + cert, "both.toml")
    r3, creds3 = doctor_ok(proxy_binary, v.url, "--config", str(cfg))
    assert creds3 == [], r3.stdout
    assert "GET → HTTP 200" in r3.stderr, r3.stderr
    assert "configured certificate credential answers it" in r3.stderr
    assert pki.bob_p12_password not in r3.stdout + r3.stderr


class TLS12ClientCertServer(harness.ScriptedUpstream):
    """A TLS 1.2-only server that requires a client certificate: unlike TLS 1.3, it ends the handshake itself
    when none comes, so the refusal is seen during the handshake."""

    def __init__(self, cert, key):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        self.ctx.load_cert_chain(cert, key)
        self.ctx.verify_mode = ssl.CERT_REQUIRED
        self.ctx.load_verify_locations(cert)
        self.handshakes_refused = 0
        super().__init__(self._serve_one)

    def _serve_one(self, c):
        try:
            with self.ctx.wrap_socket(c, server_side=True) as s:
                s.recv(4096)
                s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        except (ssl.SSLError, OSError):
            self.handshakes_refused += 1
            c.close()


def test_tls12_client_certificate_refused_in_the_handshake(proxy_binary, tls_cert):
    cert, key = tls_cert
    srv = TLS12ClientCertServer(cert, key)
    try:
        r, creds = doctor_ok(proxy_binary, "https://127.0.0.1:%d/maps/service" % srv.port)
        assert set(by_type(creds)) == {"certificate", "server-trust"}, r.stdout
        assert "asks for a client certificate in the handshake" in r.stderr
        assert "without one the server refuses: " in r.stderr
        assert srv.handshakes_refused >= 1
    finally:
        srv.close()


# ---------------------------------------------------------------------------
# Unreachable
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("scheme", ["http", "https"])
def test_closed_port_exits_non_zero_naming_the_cause(proxy_binary, scheme):
    port = harness.closed_port()
    r = run_doctor("%s://127.0.0.1:%d/arcgis/rest/services" % (scheme, port), "--timeout", "5")
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert r.stdout == ""
    assert re.search(r"connection refused", r.stderr, re.I), r.stderr
    assert "127.0.0.1:%d" % port in r.stderr


def test_bad_url_is_a_usage_error(proxy_binary):
    r = run_doctor("ftp://example.invalid/x")
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "not an absolute http(s) URL" in r.stderr
