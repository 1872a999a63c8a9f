"""Network-authentication test rig for the authproxy e2e suite.

Starts, on loopback ports chosen at run time, and stops afterwards:

* a throwaway **MIT Kerberos realm** (``krb5kdc`` in a temp dir, own
  ``KRB5_CONFIG`` / ``KRB5_KDC_PROFILE``),
* a small **PKI** made with ``openssl`` (server CA + server cert, client CA +
  client certs for alice (PEM) and bob (PKCS#12), an untrusted "mallory"),
* one **Apache httpd** (``apache2 -f <generated conf> -DFOREGROUND``) with one
  vhost per scheme: Basic, Digest, NTLM (patched for libcurl, and the unmodified
  stack), Kerberos/Negotiate, IIS-like (Negotiate + NTLM) and mutual TLS.

Every protected location is answered by ``echo.cgi`` (headers ``X-Remote-User``,
``X-Request-Method``, ``X-Body-Size``, ``X-Body-Sha256``, ... plus a JSON body).

Usage::

    from netauth import rig
    rig.ensure_installed()              # apt-get install what is missing (idempotent)
    r = rig.NetAuthRig().start()
    ... r.basic.url, r.ntlm.url, r.kerberos.url, r.mtls.url, r.realm.env(...), ...
    r.stop()

or the pytest fixtures in ``netauth/fixtures.py`` (see README.md).
"""

import hashlib
import base64
import os
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = os.path.join(HERE, "templates")

# ---------------------------------------------------------------------------
# Identities
# ---------------------------------------------------------------------------

USERS = {"alice": "alice-pw", "bob": "bob-pw"}
BASIC_REALM = "authproxy-basic"
DIGEST_REALM = "authproxy-test"
NTLM_DOMAIN = "TESTDOM"
KRB_REALM = "NETAUTH.TEST"
KDC_MASTER_PASSWORD = "netauth-master-pw"
P12_PASSWORD = "bob-p12-pw"
ALICE_KEY_PASSWORD = "alice-key-pw"

APT_PACKAGES = ["apache2", "libapache2-mod-auth-gssapi", "gss-ntlmssp", "krb5-kdc",
                "krb5-admin-server", "krb5-user", "openssl", "curl", "python3"]

# file that must exist for each package (mod_lua ships in apache2-bin on Debian 12)
_REQUIRED_FILES = {
    "/usr/sbin/apache2": "apache2",
    "/usr/lib/apache2/modules/mod_lua.so": "apache2",
    "/usr/lib/apache2/modules/mod_ssl.so": "apache2",
    "/usr/lib/apache2/modules/mod_cgid.so": "apache2",
    "/usr/lib/apache2/modules/mod_auth_gssapi.so": "libapache2-mod-auth-gssapi",
    "/usr/lib/*/gssntlmssp/gssntlmssp.so": "gss-ntlmssp",
    "/etc/gss/mech.d/mech.ntlmssp.conf": "gss-ntlmssp",
    "/usr/sbin/krb5kdc": "krb5-kdc",
    "/usr/sbin/kdb5_util": "krb5-kdc",
    "/usr/sbin/kadmin.local": "krb5-admin-server",
    "/usr/bin/kinit": "krb5-user",
    "/usr/bin/klist": "krb5-user",
    "/usr/bin/openssl": "openssl",
    "/usr/bin/curl": "curl",
    "/usr/bin/python3": "python3",
}

PROXY_ENV_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "ftp_proxy")
KRB_ENV_VARS = ("KRB5_CONFIG", "KRB5CCNAME", "KRB5_CLIENT_KTNAME", "KRB5_KTNAME",
                "KRB5_KDC_PROFILE", "KRB5_TRACE", "NTLM_USER_FILE")


class RigError(Exception):
    pass


def missing_packages(required=None):
    """Debian packages whose marker file is missing (`required`: {marker path or glob: package}, default the
    netauth rig's)."""
    import glob
    required = _REQUIRED_FILES if required is None else required
    return sorted({pkg for path, pkg in required.items() if not glob.glob(path)})


def ensure_installed(quiet=True, required=None, packages=None):
    """Install the Debian packages the rig needs, if any is missing.

    Idempotent and cheap when everything is there (only stat() calls).  Uses
    apt-get (needs root); services are not started by the packages (a
    temporary ``/usr/sbin/policy-rc.d`` that answers 101 is put in place when
    none exists, and removed afterwards).  mod_lua is part of apache2-bin on
    Debian 12; pyspnego is not needed (NTLM is fixed up with mod_lua).

    Other rigs pass their own `required` markers ({path or glob: package}) and
    `packages` (what apt-get installs when a marker is missing).
    """
    packages = APT_PACKAGES if packages is None else packages
    missing = missing_packages(required)
    if not missing:
        return []
    if os.geteuid() != 0:
        raise RigError("the test rig needs Debian packages %s (run as root or install them)"
                       % " ".join(missing))
    lock_path = "/tmp/netauth-apt.lock"
    import fcntl
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        missing = missing_packages(required)
        if not missing:
            return []
        policy = "/usr/sbin/policy-rc.d"
        made_policy = False
        if not os.path.exists(policy):
            with open(policy, "w") as f:
                f.write("#!/bin/sh\n# temporary (netauth rig): do not start services\nexit 101\n")
            os.chmod(policy, 0o755)
            made_policy = True
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive", NEEDRESTART_MODE="a")
        out = subprocess.DEVNULL if quiet else None
        try:
            r = subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends"]
                               + packages, env=env, stdout=out, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL)
            if r.returncode != 0:
                subprocess.run(["apt-get", "update", "-q"], env=env, stdout=out,
                               stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
                r = subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends"]
                                   + packages, env=env, stdout=out, stderr=subprocess.PIPE,
                                   stdin=subprocess.DEVNULL)
            if r.returncode != 0:
                raise RigError("apt-get install failed: %s" % r.stderr.decode(errors="replace")[-3000:])
        finally:
            if made_policy:
                os.unlink(policy)
        still = missing_packages(required)
        if still:
            raise RigError("still missing after apt-get install: %s" % " ".join(still))
        return missing


# ---------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------

def clean_env(extra=None, drop_krb=True):
    """os.environ without *_proxy variables (and without Kerberos/NTLM variables
    unless drop_krb=False), plus extra."""
    env = {}
    for k, v in os.environ.items():
        if k.lower() in PROXY_ENV_VARS:
            continue
        if drop_krb and k in KRB_ENV_VARS:
            continue
        env[k] = v
    if extra:
        env.update(extra)
    return env


def ipv6_available():
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def free_port(v6=False, udp=False, exclude=()):
    """A port free on 127.0.0.1 (and ::1 if v6; for UDP too if udp)."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port in exclude:
            continue
        checks = [(socket.AF_INET, socket.SOCK_STREAM, "127.0.0.1")]
        if v6:
            checks.append((socket.AF_INET6, socket.SOCK_STREAM, "::1"))
        if udp:
            checks.append((socket.AF_INET, socket.SOCK_DGRAM, "127.0.0.1"))
        ok = True
        for fam, typ, host in checks:
            try:
                with socket.socket(fam, typ) as s:
                    s.bind((host, port))
            except OSError:
                ok = False
                break
        if ok:
            return port
    raise RigError("no free port found")


def wait_port(host, port, timeout=15.0, proc=None, what="server"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RigError("%s exited with %s during startup" % (what, proc.returncode))
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError as e:
            last = e
        time.sleep(0.05)
    raise RigError("%s not listening on %s:%d within %.0fs (%r)" % (what, host, port, timeout, last))


def run(cmd, env=None, input=None, cwd=None, timeout=60):
    r = subprocess.run(cmd, env=env, input=input, cwd=cwd, capture_output=True, timeout=timeout,
                       stdin=None if input is not None else subprocess.DEVNULL)
    if r.returncode != 0:
        raise RigError("%s failed (%d):\n%s\n%s" % (" ".join(cmd), r.returncode,
                                                   r.stdout.decode(errors="replace")[-2000:],
                                                   r.stderr.decode(errors="replace")[-2000:]))
    return r


def render(template_name, dest, **values):
    with open(os.path.join(TEMPLATES, template_name)) as f:
        text = string.Template(f.read()).substitute(values)
    with open(dest, "w") as f:
        f.write(text)
    return dest


def _www_ids():
    """(uid, gid, user, group) Apache's children run as (root only), else None."""
    if os.geteuid() != 0:
        return None
    import grp
    import pwd
    try:
        pw = pwd.getpwnam("www-data")
        gr = grp.getgrnam("www-data")
    except KeyError:
        return None
    return pw.pw_uid, gr.gr_gid, "www-data", "www-data"


def share(path, mode, www=None):
    """chmod path; if running as root, give it to group www-data (so Apache's
    children, which drop to www-data, can read it)."""
    os.chmod(path, mode)
    if www is not None:
        os.chown(path, 0, www[1])
    return path


def _kill_group(proc, grace):
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)


def _tail(path, n=4000):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")[-n:]
    except OSError:
        return ""


# ---------------------------------------------------------------------------
# Kerberos
# ---------------------------------------------------------------------------

class KerberosRealm:
    """A throwaway MIT Kerberos realm: krb5kdc on 127.0.0.1:<kdc_port>.

    Principals: ``HTTP/localhost@REALM`` and ``HTTP/127.0.0.1@REALM`` (random
    keys, in ``service_keytab``), ``alice@REALM`` / ``bob@REALM`` with the
    passwords of USERS and a client keytab each (``ktadd -norandkey``:
    ``client_keytabs[user]``; ``client_keytab`` is alice's).
    """

    def __init__(self, base_dir, realm=KRB_REALM, users=None, www=None):
        self.dir = base_dir
        self.realm = realm
        self.users = dict(users or USERS)
        self.www = www
        self.krb5_config = os.path.join(base_dir, "krb5.conf")
        self.kdc_profile = os.path.join(base_dir, "kdc.conf")
        self.service_keytab = os.path.join(base_dir, "http.keytab")
        self.service_principal = "HTTP/localhost@%s" % realm
        self.service_principals = ["HTTP/localhost@%s" % realm, "HTTP/127.0.0.1@%s" % realm]
        self.client_keytabs = {u: os.path.join(base_dir, "%s.keytab" % u) for u in self.users}
        self.client_keytab = self.client_keytabs.get("alice")
        self.principal = self.principal_of("alice")
        self.kdc_port = None
        self.kdc_log = os.path.join(base_dir, "kdc.log")
        self.proc = None
        self._ccache_n = 0

    def principal_of(self, user):
        return "%s@%s" % (user, self.realm)

    def admin_env(self):
        return clean_env({"KRB5_CONFIG": self.krb5_config, "KRB5_KDC_PROFILE": self.kdc_profile})

    def env(self, ccache=None, client_keytab=None, extra=None, base=None):
        """Environment for a GSSAPI client of this realm: KRB5_CONFIG, and
        KRB5CCNAME / KRB5_CLIENT_KTNAME when given (paths or TYPE:residual).
        Starts from `base` or os.environ minus *_proxy and Kerberos variables."""
        env = dict(base) if base is not None else clean_env()
        env["KRB5_CONFIG"] = self.krb5_config
        if ccache:
            env["KRB5CCNAME"] = ccache if ":" in ccache else "FILE:" + ccache
        if client_keytab:
            env["KRB5_CLIENT_KTNAME"] = (client_keytab if ":" in client_keytab
                                         else "FILE:" + client_keytab)
        if extra:
            env.update(extra)
        return env

    def new_ccache_path(self):
        self._ccache_n += 1
        return os.path.join(self.dir, "ccache.%d.%d" % (os.getpid(), self._ccache_n))

    def kinit(self, user="alice", ccache=None, password=None, keytab=None):
        """Get a TGT for user into ccache (a new file if None); returns the
        ccache path.  Uses the password (stdin) unless keytab is given."""
        ccache = ccache or self.new_ccache_path()
        env = self.env(ccache=ccache)
        princ = self.principal_of(user)
        if keytab:
            run(["kinit", "-k", "-t", keytab, princ], env=env)
        else:
            pw = password if password is not None else self.users[user]
            run(["kinit", princ], env=env, input=(pw + "\n").encode())
        return ccache

    def kdestroy(self, ccache):
        subprocess.run(["kdestroy", "-c", ccache], env=self.env(), capture_output=True)
        try:
            os.unlink(ccache)
        except FileNotFoundError:
            pass

    def klist(self, ccache):
        r = subprocess.run(["klist", "-c", ccache], env=self.env(), capture_output=True, text=True)
        return r.stdout

    def kadmin(self, query):
        return run(["kadmin.local", "-r", self.realm, "-q", query], env=self.admin_env())

    def _pick_ports(self):
        self.kdc_port = free_port(udp=True)
        self.kadmin_port = free_port(exclude={self.kdc_port})
        self.kpasswd_port = free_port(exclude={self.kdc_port, self.kadmin_port})

    def _render(self):
        vals = dict(realm=self.realm, dir=self.dir, kdc_port=self.kdc_port,
                    kadmin_port=self.kadmin_port, kpasswd_port=self.kpasswd_port)
        render("krb5.conf.tmpl", self.krb5_config, **vals)
        render("kdc.conf.tmpl", self.kdc_profile, **vals)
        share(self.krb5_config, 0o644, self.www)
        share(self.kdc_profile, 0o640, self.www)

    def start(self):
        os.makedirs(os.path.join(self.dir, "db"), exist_ok=True)
        self._pick_ports()
        self._render()
        with open(os.path.join(self.dir, "kadm5.acl"), "w") as f:
            f.write("*/admin@%s *\n" % self.realm)
        run(["kdb5_util", "-r", self.realm, "create", "-s", "-P", KDC_MASTER_PASSWORD],
            env=self.admin_env())
        for sp in self.service_principals:
            self.kadmin("addprinc -randkey %s" % sp)
        self.kadmin("ktadd -k %s %s" % (self.service_keytab, " ".join(self.service_principals)))
        share(self.service_keytab, 0o640, self.www)
        for user, pw in self.users.items():
            self.kadmin("addprinc -pw %s %s" % (pw, self.principal_of(user)))
            self.kadmin("ktadd -k %s -norandkey %s" % (self.client_keytabs[user],
                                                       self.principal_of(user)))
            share(self.client_keytabs[user], 0o640, self.www)
        for attempt in range(3):
            if attempt:  # port taken meanwhile: new ports, same database
                self._pick_ports()
                self._render()
            self._logf = open(os.path.join(self.dir, "krb5kdc.out"), "ab")
            self.proc = subprocess.Popen(["krb5kdc", "-n", "-r", self.realm,
                                          "-P", os.path.join(self.dir, "krb5kdc.pid")],
                                         env=self.admin_env(), stdin=subprocess.DEVNULL,
                                         stdout=self._logf, stderr=self._logf,
                                         start_new_session=True)
            try:
                wait_port("127.0.0.1", self.kdc_port, proc=self.proc, what="krb5kdc")
                return self
            except RigError as e:
                self.stop()
                err = RigError("%s\n%s%s" % (e, _tail(os.path.join(self.dir, "krb5kdc.out")),
                                             _tail(self.kdc_log)))
                if "in use" not in str(err).lower():
                    break
        raise err

    def stop(self):
        _kill_group(self.proc, 5)
        if getattr(self, "_logf", None):
            self._logf.close()
            self._logf = None


# ---------------------------------------------------------------------------
# PKI
# ---------------------------------------------------------------------------

class PKI:
    """Certificates made with openssl at run time (RSA 2048, valid 2 days).

    Attributes (all absolute paths):
      server_ca            CA that signed the mTLS server's certificate (trust this)
      server_cert, server_key   CN=localhost, SAN localhost/127.0.0.1/::1
      client_ca, client_ca_key  the CA the mTLS vhost accepts client certs from
      alice_cert, alice_key     PEM client cert + unencrypted key (CN=alice)
      alice_bundle              cert + key in one PEM file
      alice_key_encrypted       same key, PKCS#8 AES-256, password ALICE_KEY_PASSWORD
      bob_cert, bob_key         PEM of bob's cert/key (CN=bob)
      bob_p12                   PKCS#12 (OpenSSL 3 default: PBES2/AES-256, SHA-256 MAC)
      bob_p12_legacy            PKCS#12 with 3DES + SHA-1 MAC (older readers)
      bob_p12_password          P12_PASSWORD
      untrusted_ca, mallory_cert, mallory_key   client cert from a CA the server does not trust
    """

    DAYS = "2"

    def __init__(self, base_dir, www=None):
        self.dir = base_dir
        self.www = www
        p = lambda n: os.path.join(base_dir, n)  # noqa: E731
        self.server_ca, self.server_ca_key = p("server-ca.pem"), p("server-ca.key")
        self.server_cert, self.server_key = p("server.pem"), p("server.key")
        self.client_ca, self.client_ca_key = p("client-ca.pem"), p("client-ca.key")
        self.alice_cert, self.alice_key = p("alice.pem"), p("alice.key")
        self.alice_bundle = p("alice-bundle.pem")
        self.alice_key_encrypted = p("alice-enc.key")
        self.alice_key_password = ALICE_KEY_PASSWORD
        self.bob_cert, self.bob_key = p("bob.pem"), p("bob.key")
        self.bob_p12 = p("bob.p12")
        self.bob_p12_legacy = p("bob-legacy.p12")
        self.bob_p12_password = P12_PASSWORD
        self.untrusted_ca, self.untrusted_ca_key = p("untrusted-ca.pem"), p("untrusted-ca.key")
        self.mallory_cert, self.mallory_key = p("mallory.pem"), p("mallory.key")
        self.subjects = {}

    def _ca(self, cert, key, cn):
        run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256",
             "-days", self.DAYS, "-subj", "/O=netauth/CN=%s" % cn, "-keyout", key, "-out", cert,
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign"])

    def _leaf(self, cert, key, subj, ca, ca_key, ext):
        csr = cert + ".csr"
        extfile = cert + ".ext"
        with open(extfile, "w") as f:
            f.write(ext)
        run(["openssl", "req", "-new", "-newkey", "rsa:2048", "-nodes", "-sha256",
             "-subj", subj, "-keyout", key, "-out", csr])
        run(["openssl", "x509", "-req", "-sha256", "-days", self.DAYS, "-in", csr, "-CA", ca,
             "-CAkey", ca_key, "-set_serial", str(int.from_bytes(os.urandom(8), "big")),
             "-extfile", extfile, "-out", cert])
        os.unlink(csr)
        os.unlink(extfile)

    def create(self):
        os.makedirs(self.dir, exist_ok=True)
        client_ext = ("basicConstraints=critical,CA:FALSE\n"
                      "keyUsage=critical,digitalSignature,keyEncipherment\n"
                      "extendedKeyUsage=clientAuth\n")
        self._ca(self.server_ca, self.server_ca_key, "netauth server CA")
        self._leaf(self.server_cert, self.server_key, "/O=netauth/CN=localhost",
                   self.server_ca, self.server_ca_key,
                   "basicConstraints=critical,CA:FALSE\n"
                   "keyUsage=critical,digitalSignature,keyEncipherment\n"
                   "extendedKeyUsage=serverAuth\n"
                   "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\n")
        self._ca(self.client_ca, self.client_ca_key, "netauth client CA")
        for user, cert, key in (("alice", self.alice_cert, self.alice_key),
                                ("bob", self.bob_cert, self.bob_key)):
            subj = "/O=netauth/OU=people/CN=%s" % user
            self._leaf(cert, key, subj, self.client_ca, self.client_ca_key, client_ext)
            self.subjects[user] = subj
        with open(self.alice_bundle, "w") as out:
            for src in (self.alice_cert, self.alice_key):
                with open(src) as f:
                    out.write(f.read())
        run(["openssl", "pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in", self.alice_key,
             "-out", self.alice_key_encrypted, "-passout", "pass:" + self.alice_key_password])
        run(["openssl", "pkcs12", "-export", "-in", self.bob_cert, "-inkey", self.bob_key,
             "-certfile", self.client_ca, "-name", "bob", "-out", self.bob_p12,
             "-passout", "pass:" + self.bob_p12_password])
        run(["openssl", "pkcs12", "-export", "-in", self.bob_cert, "-inkey", self.bob_key,
             "-certfile", self.client_ca, "-name", "bob", "-out", self.bob_p12_legacy,
             "-certpbe", "PBE-SHA1-3DES", "-keypbe", "PBE-SHA1-3DES", "-macalg", "sha1",
             "-passout", "pass:" + self.bob_p12_password])
        self._ca(self.untrusted_ca, self.untrusted_ca_key, "netauth untrusted CA")
        self._leaf(self.mallory_cert, self.mallory_key, "/O=netauth/OU=people/CN=mallory",
                   self.untrusted_ca, self.untrusted_ca_key, client_ext)
        self.subjects["mallory"] = "/O=netauth/OU=people/CN=mallory"
        for name in os.listdir(self.dir):
            share(os.path.join(self.dir, name), 0o640, self.www)
        return self


# ---------------------------------------------------------------------------
# Apache
# ---------------------------------------------------------------------------

class Vhost:
    """One Apache vhost.  url: base URL ending in '/'; scheme: auth scheme."""

    def __init__(self, name, scheme, host, port, tls=False):
        self.name = name
        self.scheme = scheme
        self.host = host
        self.port = port
        self.tls = tls

    @property
    def url(self):
        return "%s://%s:%d/" % ("https" if self.tls else "http", self.host, self.port)

    @property
    def url_127(self):
        return "%s://127.0.0.1:%d/" % ("https" if self.tls else "http", self.port)

    @property
    def url_v6(self):
        return "%s://[::1]:%d/" % ("https" if self.tls else "http", self.port)

    @property
    def authority(self):
        return "%s:%d" % (self.host, self.port)

    def __repr__(self):
        return "<Vhost %s %s>" % (self.name, self.url)


# name -> (auth scheme, host used in .url, TLS)
VHOSTS = {
    "basic": ("Basic", "127.0.0.1", False),
    "digest": ("Digest", "127.0.0.1", False),
    "ntlm": ("NTLM", "127.0.0.1", False),          # patched for libcurl (mod_lua)
    "ntlm_raw": ("NTLM", "127.0.0.1", False),      # unmodified mod_auth_gssapi + gss-ntlmssp
    "kerberos": ("Negotiate", "localhost", False),
    "iis": ("Negotiate+NTLM", "localhost", False),
    "mtls": ("client-certificate", "localhost", True),
}


class Apache:
    """apache2 -f <dir>/httpd.conf -DFOREGROUND with the vhosts of VHOSTS."""

    def __init__(self, base_dir, realm, pki, www=None, ipv6=None, loglevel=None):
        self.dir = base_dir
        self.realm = realm
        self.pki = pki
        self.www = www
        self.ipv6 = ipv6_available() if ipv6 is None else ipv6
        self.loglevel = loglevel or os.environ.get("NETAUTH_APACHE_LOGLEVEL",
                                                   "warn lua:info auth_gssapi:info")
        self.conf = os.path.join(base_dir, "httpd.conf")
        self.error_log = os.path.join(base_dir, "logs", "error.log")
        self.access_log = os.path.join(base_dir, "logs", "access.log")
        self.stdout_log = os.path.join(base_dir, "logs", "apache2.out")
        self.htpasswd = os.path.join(base_dir, "auth", "htpasswd")
        self.htdigest = os.path.join(base_dir, "auth", "htdigest")
        self.ntlm_user_file = os.path.join(base_dir, "auth", "ntlm_users")
        self.vhosts = {}
        self.proc = None
        self._logf = None

    def _write_auth_files(self, users):
        os.makedirs(os.path.dirname(self.htpasswd), exist_ok=True)
        with open(self.htpasswd, "w") as f:
            for u, pw in users.items():
                f.write("%s:{SHA}%s\n" % (u, base64.b64encode(hashlib.sha1(pw.encode()).digest()).decode()))
        with open(self.htdigest, "w") as f:
            for u, pw in users.items():
                ha1 = hashlib.md5(("%s:%s:%s" % (u, DIGEST_REALM, pw)).encode()).hexdigest()
                f.write("%s:%s:%s\n" % (u, DIGEST_REALM, ha1))
        with open(self.ntlm_user_file, "w") as f:
            for u, pw in users.items():
                f.write("%s:%s:%s\n" % (NTLM_DOMAIN, u, pw))
        for p in (os.path.dirname(self.htpasswd),):
            share(p, 0o750, self.www)
        for p in (self.htpasswd, self.htdigest, self.ntlm_user_file):
            share(p, 0o640, self.www)

    def _layout(self):
        for sub, mode in (("logs", 0o750), ("run", 0o770), ("cgi", 0o750), ("lua", 0o750)):
            os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
            share(os.path.join(self.dir, sub), mode, self.www)
        cgi = os.path.join(self.dir, "cgi", "echo.cgi")
        shutil.copyfile(os.path.join(TEMPLATES, "echo.cgi"), cgi)
        share(cgi, 0o755, self.www)
        lua = os.path.join(self.dir, "lua", "ntlm_fix.lua")
        shutil.copyfile(os.path.join(TEMPLATES, "ntlm_fix.lua"), lua)
        share(lua, 0o644, self.www)

    def _render(self, ports):
        vals = {"dir": self.dir, "loglevel": self.loglevel,
                "user": self.www[2] if self.www else "#", "group": self.www[3] if self.www else "#",
                "basic_realm": BASIC_REALM, "digest_realm": DIGEST_REALM,
                "http_keytab": self.realm.service_keytab}
        for name, port in ports.items():
            addrs = ["127.0.0.1:%d" % port] + (["[::1]:%d" % port] if self.ipv6 else [])
            proto = " https" if VHOSTS[name][2] else ""
            vals["listen_" + name] = "\n".join("Listen %s%s" % (a, proto) for a in addrs)
            vals["vh_" + name] = " ".join(addrs)
        text = open(os.path.join(TEMPLATES, "httpd.conf.tmpl")).read()
        if not self.www:  # not root: no User/Group lines
            text = "\n".join(l for l in text.splitlines() if not l.startswith(("User ", "Group ")))
        text = string.Template(text).substitute(vals)
        with open(self.conf, "w") as f:
            f.write(text)

    def env(self):
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C",
               "NTLM_USER_FILE": self.ntlm_user_file,
               "KRB5_CONFIG": self.realm.krb5_config,
               # acceptor key of the IIS-like vhost (which has no GssapiCredStore)
               "KRB5_KTNAME": "FILE:" + self.realm.service_keytab,
               "KRB5RCACHETYPE": "none"}
        if os.environ.get("NETAUTH_KRB5_TRACE"):
            env["KRB5_TRACE"] = os.path.join(self.dir, "logs", "krb5_trace.log")
        return env

    def start(self, users=None, timeout=20.0):
        self._write_auth_files(users or USERS)
        self._layout()
        last = None
        for attempt in range(3):
            used = set()
            ports = {}
            for name in VHOSTS:
                ports[name] = free_port(v6=self.ipv6, exclude=used)
                used.add(ports[name])
            self._render(ports)
            self._logf = open(self.stdout_log, "ab")
            self.proc = subprocess.Popen(["apache2", "-f", self.conf, "-DFOREGROUND"],
                                         env=self.env(), stdin=subprocess.DEVNULL,
                                         stdout=self._logf, stderr=self._logf,
                                         start_new_session=True)
            try:
                for name, port in ports.items():
                    wait_port("127.0.0.1", port, timeout=timeout, proc=self.proc, what="apache2")
                self.vhosts = {name: Vhost(name, VHOSTS[name][0], VHOSTS[name][1], port,
                                           tls=VHOSTS[name][2])
                               for name, port in ports.items()}
                return self
            except RigError as e:
                out = _tail(self.stdout_log) + _tail(self.error_log)
                last = RigError("%s\n%s" % (e, out))
                self.stop()
                if "Address already in use" in out:
                    continue
                break
        raise last

    def stop(self, grace=10.0):
        _kill_group(self.proc, grace)
        if self._logf:
            self._logf.close()
            self._logf = None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def error_log_text(self):
        return _tail(self.error_log, 200000)

    def access_log_lines(self):
        return [l for l in _tail(self.access_log, 10 ** 7).splitlines() if l.strip()]


# ---------------------------------------------------------------------------
# The whole rig
# ---------------------------------------------------------------------------

class NetAuthRig:
    """KDC + PKI + Apache.  After start():

    basic, digest, ntlm, ntlm_raw, kerberos, iis, mtls : Vhost (url, port, ...)
    users          {"alice": "alice-pw", "bob": "bob-pw"}
    ntlm_domain    "TESTDOM"  (NTLM user names: TESTDOM\\alice)
    realm          KerberosRealm (krb5_config, service_keytab, client_keytab, principal, env(), kinit())
    pki            PKI (server_ca, alice_cert/key, bob_p12 + bob_p12_password, ...)
    apache         Apache (conf, error_log, access_log, ntlm_user_file, ...)
    dir            the temp dir holding everything (removed by stop() unless keep=True)
    """

    def __init__(self, base_dir=None, keep=None, realm=KRB_REALM):
        self.keep = (os.environ.get("NETAUTH_KEEP") == "1") if keep is None else keep
        self._own_dir = base_dir is None
        self.dir = base_dir or tempfile.mkdtemp(prefix="netauth-")
        self.www = _www_ids()
        share(self.dir, 0o750, self.www)
        self.users = dict(USERS)
        self.ntlm_domain = NTLM_DOMAIN
        self.basic_realm = BASIC_REALM
        self.digest_realm = DIGEST_REALM
        kdir = os.path.join(self.dir, "krb")
        pdir = os.path.join(self.dir, "pki")
        for d in (kdir, pdir):
            os.makedirs(d, exist_ok=True)
            share(d, 0o750, self.www)
        self.realm = KerberosRealm(kdir, realm=realm, users=self.users, www=self.www)
        self.pki = PKI(pdir, www=self.www)
        self.apache = Apache(self.dir, self.realm, self.pki, www=self.www)

    # ---- lifecycle
    def start(self):
        import atexit
        atexit.register(self.stop)  # no orphaned apache2/krb5kdc if the caller forgets
        try:
            self.pki.create()
            self.realm.start()
            self.apache.start(self.users)
        except BaseException:
            self.stop()
            raise
        for name, vh in self.apache.vhosts.items():
            setattr(self, name, vh)
        return self

    def stop(self):
        """Stop Apache and the KDC; remove the temp dir (unless keep). Idempotent."""
        try:
            self.apache.stop()
        finally:
            self.realm.stop()
            if self._own_dir and not self.keep and os.path.isdir(self.dir):
                shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # ---- conveniences
    @property
    def vhosts(self):
        return dict(self.apache.vhosts)

    def ntlm_user(self, user):
        """'TESTDOM\\alice' -- what to pass to curl -u / CURLOPT_USERNAME."""
        return "%s\\%s" % (self.ntlm_domain, user)

    def password(self, user):
        return self.users[user]

    def describe(self):
        p = self.pki
        lines = ["netauth rig in %s" % self.dir]
        for name, vh in self.apache.vhosts.items():
            lines.append("  %-9s %-20s %s" % (name, vh.scheme, vh.url))
        lines += [
            "  users: %s (NTLM: %s\\<user>)" % (", ".join("%s/%s" % kv for kv in self.users.items()),
                                                self.ntlm_domain),
            "  KRB5_CONFIG=%s  realm=%s  kdc=127.0.0.1:%s" % (
                self.realm.krb5_config, self.realm.realm, self.realm.kdc_port),
            "  client keytab (alice): %s" % self.realm.client_keytab,
            "  mTLS: --cacert %s --cert %s --key %s" % (p.server_ca, p.alice_cert, p.alice_key),
            "        --cert-type P12 --cert %s:%s" % (p.bob_p12, p.bob_p12_password),
            "  logs: %s %s" % (self.apache.error_log, self.apache.access_log)]
        return "\n".join(lines)


def main(argv=None):
    """python3 -m netauth.rig  (from Tests/e2e): start the rig, print it, wait for ^C."""
    ensure_installed()
    r = NetAuthRig().start()
    print(r.describe(), flush=True)

    def on_term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        r.stop()


if __name__ == "__main__":
    sys.exit(main())
