"""Fixtures for the authproxy end-to-end suite.

Binary: $AUTHPROXY_BIN or <repo>/.build/debug/authproxy.  If it is missing the
proxy-dependent tests FAIL, unless AUTHPROXY_E2E_ALLOW_SKIP=1, in which case
they are skipped.
"""

import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from origin import HalfCloseEchoServer, OriginServer  # noqa: E402
from arcgis import ArcGISServer, federate  # noqa: E402


# ---------------------------------------------------------------------------
# binary
# ---------------------------------------------------------------------------

@pytest.fixture(scope="session")
def proxy_binary():
    path = harness.proxy_bin()
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        msg = ("authproxy binary not found at %s (set AUTHPROXY_BIN or build it with "
               "`swift build`)" % path)
        if os.environ.get("AUTHPROXY_E2E_ALLOW_SKIP") == "1":
            pytest.skip(msg + "; skipping because AUTHPROXY_E2E_ALLOW_SKIP=1")
        pytest.fail(msg + "; set AUTHPROXY_E2E_ALLOW_SKIP=1 to skip instead of failing",
                    pytrace=False)
    return path


# ---------------------------------------------------------------------------
# origins
# ---------------------------------------------------------------------------

@pytest.fixture
def origin_factory():
    started = []

    def make(host="127.0.0.1", tls=None):
        srv = OriginServer(host=host, tls=tls).start()
        started.append(srv)
        return srv

    yield make
    for s in started:
        s.stop()


@pytest.fixture
def origin(origin_factory):
    """A fresh plain-HTTP origin on 127.0.0.1 (fresh counters per test)."""
    return origin_factory()


@pytest.fixture
def halfclose_server():
    s = HalfCloseEchoServer().start()
    yield s
    s.stop()


@pytest.fixture
def ags():
    """A faithful ArcGIS Server (token-based security) on loopback."""
    s = ArcGISServer(role="server", ttl=60).start()
    yield s
    s.stop()


@pytest.fixture
def federation():
    """A portal and a server federated with it: (portal, server)."""
    portal = ArcGISServer(role="portal", ttl=60).start()
    server = ArcGISServer(role="server", ttl=60).start()
    federate(portal, server)
    yield portal, server
    server.stop()
    portal.stop()


@pytest.fixture(scope="session")
def tls_cert(tmp_path_factory):
    """Self-signed cert valid for localhost / 127.0.0.1 / ::1: (cert, key)."""
    d = tmp_path_factory.mktemp("tls")
    cert, key = str(d / "cert.pem"), str(d / "key.pem")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256",
         "-days", "2", "-subj", "/CN=localhost", "-keyout", key, "-out", cert,
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1",
         "-addext", "basicConstraints=critical,CA:TRUE"],
        check=True, capture_output=True, timeout=60)
    return cert, key


# ---------------------------------------------------------------------------
# proxy
# ---------------------------------------------------------------------------

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Attach the tail of every proxy log of a failed test to its report."""
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        for i, p in enumerate(getattr(item, "_authproxies", [])):
            rep.sections.append(("authproxy log #%d (%s, exit=%s)" % (i + 1, p.log_path, p.proc.poll() if p.proc else None),
                                 p.log_text()[-6000:]))


@pytest.fixture
def proxy_factory(proxy_binary, tmp_path, request):
    """make(proxy={...overrides}, log={...overrides}, env=None, raw_config=None,
    host="127.0.0.1", healthz=True) -> harness.Proxy (started, ready).

    Overrides are merged into harness.default_proxy_section / default_log_section;
    a value of None removes the key.  If "listen" is not overridden, a free port
    on `host` is used."""
    started = []
    counter = [0]

    def make(proxy=None, log=None, env=None, raw_config=None, host="127.0.0.1",
             healthz=True, args=None, ready_host=None, ready_port=None, extra_config=""):
        last_err = None
        for attempt in range(3):
            counter[0] += 1
            n = counter[0]
            port = harness.free_port(host)
            state = tmp_path / ("state%d" % n)
            state.mkdir(exist_ok=True)
            psec = harness.default_proxy_section(port, str(state))
            psec["listen"] = [harness.hostport(host, port)]
            lsec = harness.default_log_section()
            for k, v in (proxy or {}).items():
                psec[k] = v
            for k, v in (log or {}).items():
                lsec[k] = v
            text = raw_config if raw_config is not None else harness.render_config(psec, lsec)
            text += extra_config
            cfg = tmp_path / ("authproxy%d.toml" % n)
            cfg.write_text(text)
            logp = tmp_path / ("authproxy%d.log" % n)
            p = harness.Proxy(proxy_binary, str(cfg), str(logp), host,
                              ready_port or port,
                              env=harness.clean_env(env),
                              args=[a.replace("{config}", str(cfg)) for a in args] if args else None,
                              healthz=False)
            p.config_text = text
            started.append(p)
            request.node._authproxies = started
            p.start()
            if not healthz:
                return p
            try:
                p.wait_ready(host=ready_host or host, port=ready_port or port)
                return p
            except harness.ProxyStartError as e:
                last_err = e
                p.startup_failed = True
                log_text = p.log_text().lower()
                p.stop(grace=2)
                if "in use" in log_text or "eaddrinuse" in log_text:
                    continue  # port race; retry with another port
                break
        pytest.fail(str(last_err), pytrace=False)

    yield make
    crashed = []
    for p in started:
        code = p.unexpected_exit()
        if code is not None and not getattr(p, "startup_failed", False):
            crashed.append((p, code))
        try:
            p.stop()
        except Exception:  # pragma: no cover
            pass
    if crashed:
        p, code = crashed[0]
        pytest.fail("authproxy exited unexpectedly during the test (exit code %s); log tail:\n%s"
                    % (code, p.log_text()[-4000:]), pytrace=False)


@pytest.fixture
def proxy(proxy_factory):
    """Default proxy (relay, text logs, upstream timeout 30 s)."""
    return proxy_factory()


@pytest.fixture
def session():
    """requests.Session that ignores *_proxy environment variables."""
    import requests
    s = requests.Session()
    s.trust_env = False
    yield s
    s.close()
