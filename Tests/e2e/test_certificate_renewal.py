"""Client certificates and CA bundles renewed on disk (issue 36, item 5), through the real binary against nginx
requiring client certificates (`ssl_verify_client on`, answering with the serial and subject it saw): the next new
connection presents the renewed certificate without a restart or reload (a file renamed over the old one, a
PKCS#12 file, a Kubernetes `..data` symlink swap), a broken renewal is not taken, and the expiry is in `/metrics`,
`/status.json` and `authproxy check`. Certificates are made with the `openssl` command."""
import json
import os
import shutil
import signal
import socket
import subprocess
import time

import pytest
import requests

import harness
from harness import cred
from test_admin import start_with_admin
from test_credentials import via

P12_PASSWORD = "p12-renewal-pw"


def _openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True, capture_output=True, timeout=60)


class Pki:
    """A server CA and certificate for 127.0.0.1, and a client CA that signs client certificates on demand."""

    def __init__(self, d):
        self.d = str(d)
        os.makedirs(self.d, exist_ok=True)
        self.server_ca, self.server_ca_key = self.p("server-ca.pem"), self.p("server-ca.key")
        self.server_cert, self.server_key = self.p("server.pem"), self.p("server.key")
        self.client_ca, self.client_ca_key = self.p("client-ca.pem"), self.p("client-ca.key")
        for cert, key, cn in ((self.server_ca, self.server_ca_key, "renewal server CA"),
                              (self.client_ca, self.client_ca_key, "renewal client CA")):
            _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "30",
                     "-subj", "/CN=%s" % cn, "-keyout", key, "-out", cert,
                     "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")
        self.leaf("server", 30, 1, self.server_ca, self.server_ca_key, cn="localhost",
                  ext="extendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n")
        os.rename(self.p("server.crt"), self.server_cert)

    def p(self, name):
        return os.path.join(self.d, name)

    def leaf(self, name, days, serial, ca=None, ca_key=None, cn=None, ext="extendedKeyUsage=clientAuth\n"):
        """`<name>.crt` and `<name>.key` (PEM) signed by the client CA; returns their paths."""
        cert, key, csr, extfile = (self.p(name + s) for s in (".crt", ".key", ".csr", ".ext"))
        with open(extfile, "w") as f:
            f.write("basicConstraints=critical,CA:FALSE\n" + ext)
        _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-sha256", "-subj", "/CN=%s" % (cn or name),
                 "-keyout", key, "-out", csr)
        _openssl("x509", "-req", "-sha256", "-days", str(days), "-in", csr, "-CA", ca or self.client_ca,
                 "-CAkey", ca_key or self.client_ca_key, "-set_serial", str(serial), "-extfile", extfile, "-out", cert)
        return cert, key

    def expired_leaf(self, name):
        """A client certificate that ran out a year ago (`openssl ca`, which can sign with any dates)."""
        ca_dir = self.p("ca-db")
        os.makedirs(ca_dir, exist_ok=True)
        open(os.path.join(ca_dir, "index.txt"), "w").close()
        with open(os.path.join(ca_dir, "serial"), "w") as f:
            f.write("7007\n")
        cnf = os.path.join(ca_dir, "ca.cnf")
        with open(cnf, "w") as f:
            f.write("[ca]\ndefault_ca = d\n[d]\ndatabase = %s/index.txt\nnew_certs_dir = %s\nserial = %s/serial\n"
                    "default_md = sha256\npolicy = any\n[any]\ncommonName = supplied\n" % (ca_dir, ca_dir, ca_dir))
        cert, key, csr = (self.p(name + s) for s in (".crt", ".key", ".csr"))
        _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=%s" % name, "-keyout", key, "-out", csr)
        _openssl("ca", "-batch", "-config", cnf, "-cert", self.client_ca, "-keyfile", self.client_ca_key, "-in", csr,
                 "-out", cert, "-notext", "-startdate", "20250101000000Z", "-enddate", "20250201000000Z")
        return cert, key

    def p12(self, name, cert, key, password=P12_PASSWORD):
        out = self.p(name + ".p12")
        _openssl("pkcs12", "-export", "-in", cert, "-inkey", key, "-out", out, "-passout", "pass:" + password)
        return out

    @staticmethod
    def not_after(cert):
        out = subprocess.run(["openssl", "x509", "-noout", "-enddate", "-in", cert], capture_output=True,
                             text=True, check=True).stdout.strip().split("=", 1)[1]
        return int(time.mktime(time.strptime(out, "%b %d %H:%M:%S %Y %Z")) - time.timezone)


class Nginx:
    """nginx on 127.0.0.1 requiring a client certificate from the client CA; answers `serial=… subject=…`."""

    def __init__(self, d, pki):
        self.d = str(d)
        os.makedirs(self.d, exist_ok=True)
        self.port = harness.free_port()
        conf = os.path.join(self.d, "nginx.conf")
        tmp = os.path.join(self.d, "tmp")
        os.makedirs(tmp, exist_ok=True)
        with open(conf, "w") as f:
            f.write("""
daemon off;
worker_processes 1;
pid %(d)s/nginx.pid;
error_log %(d)s/error.log;
events { worker_connections 64; }
http {
    access_log %(d)s/access.log;
    client_body_temp_path %(tmp)s/body; proxy_temp_path %(tmp)s/proxy; fastcgi_temp_path %(tmp)s/fcgi;
    uwsgi_temp_path %(tmp)s/uwsgi; scgi_temp_path %(tmp)s/scgi;
    server {
        listen 127.0.0.1:%(port)d ssl;
        ssl_certificate %(cert)s;
        ssl_certificate_key %(key)s;
        ssl_client_certificate %(client_ca)s;
        ssl_verify_client on;
        keepalive_timeout 120;
        location / {
            default_type text/plain;
            return 200 "serial=$ssl_client_serial subject=$ssl_client_s_dn\\n";
        }
    }
}
""" % {"d": self.d, "tmp": tmp, "port": self.port, "cert": pki.server_cert, "key": pki.server_key,
       "client_ca": pki.client_ca})
        self.proc = subprocess.Popen(["nginx", "-p", self.d, "-c", conf], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        log = os.path.join(self.d, "error.log")
        raise RuntimeError("nginx did not start: " + (open(log).read()[-2000:] if os.path.exists(log) else "no log"))

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


@pytest.fixture
def rig(tmp_path):
    pki = Pki(tmp_path / "pki-files")
    server = Nginx(tmp_path / "nginx", pki)
    try:
        yield pki, server
    finally:
        server.stop()


class Slot:
    """Where the proxy reads its client certificate from, and how a renewal lands there."""

    def __init__(self, pki, layout, d):
        self.pki, self.layout, self.d = pki, layout, str(d)
        os.makedirs(self.d)
        self.n = 0
        if layout == "p12":
            self.fields = {"file": os.path.join(self.d, "client.p12"), "password": P12_PASSWORD}
        else:
            self.fields = {"cert": os.path.join(self.d, "tls.crt"), "key": os.path.join(self.d, "tls.key")}

    def install(self, cert, key, broken=False):
        """Puts a certificate in place the way its layout renews: renamed over the old files, or a new
        timestamped directory swapped in through `..data` (Kubernetes); `broken`: the certificate cut short."""
        self.n += 1
        with open(cert, "rb") as f:
            cert_bytes = f.read()
        with open(key, "rb") as f:
            key_bytes = f.read()
        if broken:
            cert_bytes = cert_bytes[:len(cert_bytes) // 2]
        if self.layout == "p12":
            src = self.pki.p12("slot%d" % self.n, cert, key)
            data = open(src, "rb").read()
            tmp = os.path.join(self.d, ".client.p12.tmp")
            with open(tmp, "wb") as f:
                f.write(data[:len(data) // 2] if broken else data)
            os.replace(tmp, self.fields["file"])
        elif self.layout == "rename":
            for name, data in (("tls.key", key_bytes), ("tls.crt", cert_bytes)):
                tmp = os.path.join(self.d, "." + name + ".tmp")
                with open(tmp, "wb") as f:
                    f.write(data)
                os.replace(tmp, os.path.join(self.d, name))
        else:  # Kubernetes' atomic writer
            ts = os.path.join(self.d, "..2026_11_28_%d" % self.n)
            os.makedirs(ts)
            for name, data in (("tls.crt", cert_bytes), ("tls.key", key_bytes)):
                with open(os.path.join(ts, name), "wb") as f:
                    f.write(data)
            tmp_link = os.path.join(self.d, "..data_tmp")
            os.symlink(os.path.basename(ts), tmp_link)
            os.replace(tmp_link, os.path.join(self.d, "..data"))
            for name in ("tls.crt", "tls.key"):
                link = os.path.join(self.d, name)
                if not os.path.islink(link):
                    os.symlink(os.path.join("..data", name), link)


def _serial(p, session, server):
    r = via(p, session, "GET", "http://127.0.0.1:%d/who" % server.port, timeout=15)
    assert r.status_code == 200, r.text[:300]
    return r.text.split()[0].split("=")[1].lower()


def _metric(p, name, **labels):
    text = requests.get(p.admin + "/metrics", timeout=10).text
    want = ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(name + "{"):
            got = ",".join(sorted(line[len(name) + 1:line.index("}")].split(",")))
            if got == want:
                return float(line.rsplit(" ", 1)[1])
    return None


def _wait(pred, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return pred()


@pytest.mark.parametrize("layout", ["rename", "kubernetes", "p12"])
def test_a_renewed_client_certificate_is_used_for_the_next_new_connection(proxy_factory, rig, tmp_path, layout):
    pki, server = rig
    slot = Slot(pki, layout, tmp_path / "slot")
    slot.install(*pki.leaf("v1", 60, 0x1001))
    conf = (cred("trust", "server-trust", "https://127.0.0.1:%d" % server.port, ca_file=pki.server_ca)
            + cred("pki", "certificate", "http://127.0.0.1:%d" % server.port, upgrade_to_https=True, **slot.fields))
    p = start_with_admin(proxy_factory, conf)
    session = requests.Session()
    session.trust_env = False
    assert _serial(p, session, server) == "1001"
    assert _serial(p, session, server) == "1001"   # a pooled connection (and TLS session) exists now

    # Renewed: a certificate that expires in 5 days (within expiry_warning_days = 14).
    v2 = pki.leaf("v2", 5, 0x2002)
    slot.install(*v2)
    assert p.wait_for_log(lambda l: "renewed client certificate taken" in l, timeout=10), p.log_text()[-2000:]
    assert _serial(p, session, server) == "2002"
    assert _serial(p, session, server) == "2002"
    assert p.wait_for_log(lambda l: "its client certificate expires at" in l and "pki" in l, timeout=5)

    # The expiry of the certificate in use, in /metrics and /status.json, due soon.
    expected = Pki.not_after(v2[0])
    assert _wait(lambda: _metric(p, "authproxy_credential_expiry_timestamp_seconds", credential="pki",
                                 what="certificate") == expected), _metric(
        p, "authproxy_credential_expiry_timestamp_seconds", credential="pki", what="certificate")
    status = requests.get(p.admin + "/status.json", timeout=10).json()
    [c] = [c for c in status["credentials"] if c["name"] == "pki"]
    [e] = [e for e in c["expiries"] if e["what"] == "certificate"]
    assert e["dueSoon"] is True and 4 * 86400 <= e["expiresInSeconds"] <= 5 * 86400, e

    # `check` warns about it.
    r = harness.run_cli(["check", "--config", p.config_path])
    assert r.returncode == 0, r.stderr
    assert "credential 'pki': its client certificate expires at" in r.stderr, r.stderr

    # A broken renewal (cut short) is not taken: the proxy keeps presenting v2 and says why.
    slot.install(*pki.leaf("v3", 60, 0x3003), broken=True)
    assert p.wait_for_log(lambda l: "renewed certificate file not taken" in l, timeout=10), p.log_text()[-2000:]
    bad = [l for l in p.log_lines() if "renewed certificate file not taken" in l][-1]
    assert (slot.fields.get("file") or slot.fields["cert"]) in bad, bad
    assert _serial(p, session, server) == "2002"

    # The next good one is taken.
    slot.install(*pki.leaf("v4", 60, 0x4004))
    assert _wait(lambda: len([l for l in p.log_lines() if "renewed client certificate taken" in l]) >= 2)
    assert _serial(p, session, server) == "4004"
    assert P12_PASSWORD not in p.log_text()
    assert "BEGIN" not in p.log_text()


def test_check_and_start_say_when_a_client_certificate_expires_soon_or_has_expired(proxy_factory, rig, tmp_path):
    pki, server = rig
    soon = pki.leaf("soon", 3, 0x5005)
    expired = pki.expired_leaf("expired")

    def check(fields, days):
        conf = tmp_path / "check.conf"
        conf.write_text('[proxy]\nlisten = ["127.0.0.1:0"]\nexpiry_warning_days = %d\n' % days
                        + cred("pki", "certificate", "https://127.0.0.1:%d" % server.port, cert=fields[0],
                               key=fields[1]))
        r = harness.run_cli(["check", "--config", str(conf)])
        assert r.returncode == 0, r.stderr
        return r.stderr

    assert "its client certificate expires at" in check(soon, 14)
    assert "client certificate" not in check(soon, 2)  # outside a 2-day window
    out = check(expired, 14)
    assert "its client certificate EXPIRED at 2025-02-01T00:00:00Z" in out, out
    # The start-up log says so too.
    p = proxy_factory(extra_config=cred("pki", "certificate", "https://127.0.0.1:%d" % server.port,
                                        cert=expired[0], key=expired[1]))
    assert p.wait_for_log(lambda l: "EXPIRED" in l and "pki" in l, timeout=5), p.log_text()[-2000:]


def test_a_renewed_ca_bundle_is_used_for_new_connections(proxy_factory, rig, tmp_path):
    """The upstream moves to a certificate from a new CA: adding the new CA to the bundle on disk is enough."""
    pki, server = rig
    cert, key = pki.leaf("client", 60, 0x6006)
    ca_file = str(tmp_path / "bundle.pem")
    other = Pki(tmp_path / "other-pki")
    shutil.copy(other.server_ca, ca_file)  # not the CA of the server's certificate
    conf = (cred("trust", "server-trust", "https://127.0.0.1:%d" % server.port, ca_file=ca_file)
            + cred("pki", "certificate", "http://127.0.0.1:%d" % server.port, upgrade_to_https=True,
                   cert=cert, key=key))
    p = proxy_factory(extra_config=conf)
    session = requests.Session()
    session.trust_env = False
    r = via(p, session, "GET", "http://127.0.0.1:%d/who" % server.port, timeout=15)
    assert r.status_code == 502, r.text[:300]
    tmp = ca_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(open(other.server_ca).read() + open(pki.server_ca).read())
    os.replace(tmp, ca_file)
    assert p.wait_for_log(lambda l: "renewed CA bundle taken" in l, timeout=10), p.log_text()[-2000:]
    assert _serial(p, session, server) == "6006"
