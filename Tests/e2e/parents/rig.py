"""Parent (upstream) proxies for the authproxy e2e suite: real forward proxies from Debian packages, on
loopback ports chosen at run time, each with its own configuration, logs and pid file in a temp dir.

* ``Squid`` -- ``squid -N -f <dir>/squid.conf`` with Basic proxy authentication (``basic_ncsa_auth``), or
  Negotiate (``negotiate_kerberos_auth`` against a throwaway MIT realm, ``netauth.rig.KerberosRealm``), or none.
  CONNECT is allowed to every port (Squid's default configuration allows it to 443 only).
* ``NtlmProxy`` -- Apache httpd as a forward proxy (``mod_proxy``, ``mod_proxy_http``,
  ``mod_proxy_connect``) that authenticates its clients with NTLM (``mod_auth_gssapi`` + gss-ntlmssp, with
  the netauth rig's mod_lua fix-up for libcurl's messages, here applied to ``Proxy-Authorization``).

Usage::

    from parents import rig
    rig.ensure_installed()
    with rig.Squid(tmpdir, "basic") as sq:          # .url = http://127.0.0.1:PORT
        ... curl -x sq.url -U alice:alice-pw http://origin/ ...
        sq.access_log_lines()

or the pytest fixtures in ``parents/fixtures.py`` (see README.md).
"""

import grp
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from netauth import rig as netauth

HERE = os.path.dirname(os.path.abspath(__file__))
NETAUTH_TEMPLATES = os.path.join(os.path.dirname(HERE), "netauth", "templates")

RigError = netauth.RigError
free_port = netauth.free_port
wait_port = netauth.wait_port
clean_env = netauth.clean_env

USERS = {"alice": "alice-pw", "bob": "bob-pw"}
NTLM_DOMAIN = "TESTDOM"
KRB_REALM = "PARENTS.TEST"
BASIC_REALM = "parentrig squid"

APT_PACKAGES = ["squid", "apache2", "libapache2-mod-auth-gssapi", "gss-ntlmssp", "krb5-kdc",
                "krb5-admin-server", "krb5-user", "openssl", "curl"]

# marker file -> Debian package (stat only; apt-get runs only when one is missing)
_REQUIRED_FILES = {
    "/usr/sbin/squid": "squid",
    "/usr/lib/squid/basic_ncsa_auth": "squid",
    "/usr/lib/squid/negotiate_kerberos_auth": "squid",
    "/usr/sbin/apache2": "apache2",
    "/usr/lib/apache2/modules/mod_proxy.so": "apache2",
    "/usr/lib/apache2/modules/mod_proxy_http.so": "apache2",
    "/usr/lib/apache2/modules/mod_proxy_connect.so": "apache2",
    "/usr/lib/apache2/modules/mod_lua.so": "apache2",
    "/usr/lib/apache2/modules/mod_auth_gssapi.so": "libapache2-mod-auth-gssapi",
    "/usr/lib/*/gssntlmssp/gssntlmssp.so": "gss-ntlmssp",
    "/usr/sbin/krb5kdc": "krb5-kdc",
    "/usr/sbin/kdb5_util": "krb5-kdc",
    "/usr/sbin/kadmin.local": "krb5-admin-server",
    "/usr/bin/kinit": "krb5-user",
    "/usr/bin/openssl": "openssl",
    "/usr/bin/curl": "curl",
}


def ensure_installed(quiet=True):
    """apt-get install what is missing (idempotent; packaged services, Squid's on :3128 included, are not
    started: see netauth.rig.ensure_installed)."""
    return netauth.ensure_installed(quiet=quiet, required=_REQUIRED_FILES, packages=APT_PACKAGES)


def _ids(user):
    """(uid, gid, user, group) of a system user when running as root, else None (then the servers run as
    whoever runs the tests, and files stay theirs)."""
    if os.geteuid() != 0:
        return None
    try:
        pw = pwd.getpwnam(user)
        return pw.pw_uid, pw.pw_gid, user, grp.getgrgid(pw.pw_gid).gr_name
    except KeyError:
        return None


def _give(path, mode, ids):
    """chmod; as root also chown to the server's user (which must read, and for directories write, it)."""
    os.chmod(path, mode)
    if ids is not None:
        os.chown(path, ids[0], ids[1])
    return path


def apr1(password, salt=None):
    """An htpasswd line's hash in Apache's MD5 format, made by `openssl passwd -apr1` (what basic_ncsa_auth
    reads)."""
    args = ["openssl", "passwd", "-apr1"] + (["-salt", salt] if salt else []) + ["-stdin"]
    return netauth.run(args, input=(password + "\n").encode()).stdout.decode().strip()


class _Server:
    """A server process in its own session (so its children are stopped with it), restartable on the same
    port: stop() then start() again (failover tests take a parent down and bring it back)."""

    name = "server"

    def __init__(self, base_dir, port=None):
        self.dir = base_dir
        self.port = port
        self.host = "127.0.0.1"
        self.proc = None
        self._logf = None
        self.stdout_log = os.path.join(base_dir, "%s.out" % self.name)

    @property
    def authority(self):
        return "%s:%d" % (self.host, self.port)

    @property
    def url(self):
        """The proxy URL (`http://127.0.0.1:PORT`, no trailing slash): for curl -x and `upstream_proxy`."""
        return "http://%s" % self.authority

    def _command(self):
        raise NotImplementedError

    def _env(self):
        return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C"}

    def _prepare(self):
        raise NotImplementedError

    def start(self, timeout=20.0):
        """Start (again, on the same port when it had one). Returns self."""
        last = None
        fixed = self.port is not None
        for _ in range(3):
            if not fixed:
                self.port = free_port()
            self._prepare()
            self._logf = open(self.stdout_log, "ab")
            self.proc = subprocess.Popen(self._command(), env=self._env(), cwd=self.dir,
                                         stdin=subprocess.DEVNULL, stdout=self._logf, stderr=self._logf,
                                         start_new_session=True)
            try:
                wait_port(self.host, self.port, timeout=timeout, proc=self.proc, what=self.name)
                return self
            except RigError as e:
                out = self._diagnostics()
                last = RigError("%s\n%s" % (e, out))
                self.stop()
                if fixed or "in use" not in out.lower():
                    break
        raise last

    def _diagnostics(self):
        return netauth._tail(self.stdout_log)

    def stop(self, grace=5.0):
        """Stop the process group (the server and its helpers): SIGTERM, SIGKILL after `grace` seconds (0: at
        once, as a crash would). Idempotent; nothing listens on the port afterwards."""
        if grace <= 0 and self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)
        netauth._kill_group(self.proc, grace)
        if self._logf:
            self._logf.close()
            self._logf = None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


# ---------------------------------------------------------------------------------------------------------
# Squid
# ---------------------------------------------------------------------------------------------------------

SQUID_CONF = """\
# parentrig Squid (%(name)s) -- generated by Tests/e2e/parents/rig.py; started as: squid -N -f THIS_FILE
http_port 127.0.0.1:%(port)d
visible_hostname %(visible_hostname)s
pid_filename %(dir)s/squid.pid
%(effective_user)s
cache deny all
cache_mem 4 MB
cache_store_log none
coredump_dir %(dir)s
netdb_filename none
pinger_enable off
icp_port 0
htcp_port 0
max_filedescriptors 1024
shutdown_lifetime 1 seconds
# Name lookups never leave the machine: IP literals and /etc/hosts (localhost) need none.
dns_nameservers 127.0.0.1
logfile_rotate 0
# Query strings are logged (tests find their requests by a marker in the query).
strip_query_terms off
cache_log stdio:%(dir)s/cache.log
# One line per transaction, written when it ends (for a CONNECT: when the tunnel closes). Fields:
# time client-ip client-port squid-status/http-status bytes method URL user=... peer=ip:port via="..."
logformat parentrig %%ts.%%03tu %%>a %%>p %%Ss/%%03>Hs %%<st %%rm %%ru user=%%un peer=%%<a:%%<p via="%%{Via}>h"
access_log stdio:%(dir)s/access.log parentrig
%(auth)s
acl CONNECT method CONNECT
# Squid's default configuration refuses CONNECT to ports other than 443; the test origins use others.
http_access allow localhost %(require)s
http_access deny all
"""

SQUID_BASIC_AUTH = """\
auth_param basic program /usr/lib/squid/basic_ncsa_auth %(dir)s/htpasswd
auth_param basic children 2 startup=1 idle=1
auth_param basic realm %(realm)s
auth_param basic credentialsttl 1 minute
acl authenticated proxy_auth REQUIRED
"""

SQUID_NEGOTIATE_AUTH = """\
# Any principal of the keytab (HTTP/localhost and HTTP/127.0.0.1), so either host name works in the SPN.
auth_param negotiate program /usr/lib/squid/negotiate_kerberos_auth -s GSS_C_NO_NAME -k %(keytab)s -t none
auth_param negotiate children 2 startup=1 idle=1
auth_param negotiate keep_alive on
acl authenticated proxy_auth REQUIRED
"""


class Squid(_Server):
    """Squid as a parent proxy on 127.0.0.1:<port>.

    auth: "basic" (users of USERS, realm BASIC_REALM, htpasswd made with `openssl passwd -apr1`),
          "negotiate" (needs `realm`, a started netauth.rig.KerberosRealm whose service keytab holds
          HTTP/localhost and HTTP/127.0.0.1; the user is e.g. alice@PARENTS.TEST), or None (no authentication).
    visible_hostname: the name in Squid's `Via: 1.1 <name> (squid/5.7)` (default parent-<name>).
    """

    name = "squid"

    def __init__(self, base_dir, auth="basic", users=None, realm=None, name="squid", port=None,
                 visible_hostname=None):
        self.name = name
        os.makedirs(base_dir, exist_ok=True)
        super().__init__(base_dir, port)
        if auth not in ("basic", "negotiate", None):
            raise ValueError(auth)
        if auth == "negotiate" and realm is None:
            raise ValueError("a negotiate Squid needs a KerberosRealm")
        self.auth = auth
        self.users = dict(users or USERS)
        self.realm = realm
        self.visible_hostname = visible_hostname or "parent-%s" % name
        self.ids = _ids("proxy")
        self.conf = os.path.join(base_dir, "squid.conf")
        self.access_log = os.path.join(base_dir, "access.log")
        self.cache_log = os.path.join(base_dir, "cache.log")
        self.htpasswd = os.path.join(base_dir, "htpasswd")
        self.keytab = os.path.join(base_dir, "http.keytab")
        _give(base_dir, 0o750, self.ids)

    @property
    def via(self):
        """The start of the Via element Squid adds: `1.1 <visible_hostname> (squid`."""
        return "1.1 %s (squid" % self.visible_hostname

    def _prepare(self):
        if self.auth == "basic":
            with open(self.htpasswd, "w") as f:
                for user, pw in self.users.items():
                    f.write("%s:%s\n" % (user, apr1(pw)))
            _give(self.htpasswd, 0o640, self.ids)
        elif self.auth == "negotiate":
            # A copy readable by the helper (it runs as `proxy`); the realm's own keytab is the netauth rig's.
            shutil.copyfile(self.realm.service_keytab, self.keytab)
            _give(self.keytab, 0o640, self.ids)
        auth = ""
        if self.auth == "basic":
            auth = SQUID_BASIC_AUTH % {"dir": self.dir, "realm": BASIC_REALM}
        elif self.auth == "negotiate":
            auth = SQUID_NEGOTIATE_AUTH % {"keytab": self.keytab}
        text = SQUID_CONF % {
            "name": self.name, "port": self.port, "dir": self.dir, "visible_hostname": self.visible_hostname,
            "effective_user": "cache_effective_user proxy" if self.ids else "",
            "auth": auth, "require": "authenticated" if self.auth else ""}
        with open(self.conf, "w") as f:
            f.write(text)
        for path in (self.access_log, self.cache_log):
            if not os.path.exists(path):
                open(path, "w").close()
            _give(path, 0o640, self.ids)

    def _command(self):
        return ["squid", "-N", "-f", self.conf]

    def _env(self):
        env = super()._env()
        if self.realm is not None:
            env.update({"KRB5_CONFIG": self.realm.krb5_config, "KRB5_KTNAME": "FILE:" + self.keytab,
                        "KRB5RCACHETYPE": "none"})
        return env

    def _diagnostics(self):
        return netauth._tail(self.stdout_log) + netauth._tail(self.cache_log)

    def cache_log_text(self):
        return netauth._tail(self.cache_log, 10 ** 6)

    def access_log_lines(self):
        """Lines of access.log so far (see SQUID_CONF's logformat). A tunnel's line is written when it closes."""
        return [l for l in netauth._tail(self.access_log, 10 ** 7).splitlines() if l.strip()]

    def wait_access(self, pred, timeout=5.0):
        """access.log lines for which pred(line) (a callable or a regex) is true, once there is one or
        `timeout` has passed (Squid writes a line when its transaction ends)."""
        if isinstance(pred, str):
            rx = re.compile(pred)
            pred = lambda l: rx.search(l)  # noqa: E731
        deadline = time.monotonic() + timeout
        while True:
            hits = [l for l in self.access_log_lines() if pred(l)]
            if hits or time.monotonic() >= deadline:
                return hits
            time.sleep(0.05)


def parse_access_line(line):
    """A Squid access.log line of the parentrig format -> dict: time, client, client_port, result (e.g.
    TCP_TUNNEL), status (int), bytes, method, url, user ("-" when none), peer, via."""
    m = re.match(r'(\S+) (\S+) (\S+) (\S+)/(\d+) (\S+) (\S+) (\S+) user=(\S*) peer=(\S*) via="(.*)"$', line)
    if not m:
        raise ValueError("not a parentrig access line: %r" % line)
    keys = ("time", "client", "client_port", "result", "status", "bytes", "method", "url", "user", "peer", "via")
    d = dict(zip(keys, m.groups()))
    d["status"] = int(d["status"])
    return d


# ---------------------------------------------------------------------------------------------------------
# Apache as an NTLM forward proxy
# ---------------------------------------------------------------------------------------------------------

APACHE_PROXY_CONF = """\
# parentrig NTLM forward proxy -- generated by Tests/e2e/parents/rig.py
# Started as: apache2 -f THIS_FILE -DFOREGROUND   (env: NTLM_USER_FILE)
ServerRoot "%(dir)s"
ServerName localhost
PidFile "%(dir)s/run/httpd.pid"
DefaultRuntimeDir "%(dir)s/run"
Mutex file:%(dir)s/run default
ErrorLog "%(dir)s/logs/error.log"
LogLevel %(loglevel)s
%(usergroup)s

LoadModule mpm_event_module /usr/lib/apache2/modules/mod_mpm_event.so
LoadModule authn_core_module /usr/lib/apache2/modules/mod_authn_core.so
LoadModule authz_core_module /usr/lib/apache2/modules/mod_authz_core.so
LoadModule authz_user_module /usr/lib/apache2/modules/mod_authz_user.so
LoadModule auth_gssapi_module /usr/lib/apache2/modules/mod_auth_gssapi.so
LoadModule lua_module /usr/lib/apache2/modules/mod_lua.so
LoadModule proxy_module /usr/lib/apache2/modules/mod_proxy.so
LoadModule proxy_http_module /usr/lib/apache2/modules/mod_proxy_http.so
LoadModule proxy_connect_module /usr/lib/apache2/modules/mod_proxy_connect.so

StartServers 1
ServerLimit 2
ThreadsPerChild 25
MinSpareThreads 5
MaxSpareThreads 50
MaxRequestWorkers 50
KeepAlive On
KeepAliveTimeout 30
MaxKeepAliveRequests 1000
Timeout 60

# %%{remote}p = client source port, %%k = keep-alive requests already served on the connection (0 = first).
LogFormat "%%a %%{remote}p k=%%k \\"%%r\\" %%>s %%B user=\\"%%u\\" pauth=\\"%%{Proxy-Authorization}i\\" pa=\\"%%{Proxy-Authenticate}o\\"" parentrig
CustomLog "%(dir)s/logs/access.log" parentrig

<Directory />
    AllowOverride None
    Require all denied
</Directory>

Listen 127.0.0.1:%(port)d
<VirtualHost 127.0.0.1:%(port)d>
    ProxyRequests On
    ProxyVia On
    # mod_proxy_connect allows CONNECT to 443 and 563 only by default.
    AllowCONNECT 1-65535
    <Proxy "*">
        LuaHookAccessChecker "%(dir)s/lua/ntlm_fix.lua" fix_ntlm_proxy early
        AuthType GSSAPI
        AuthName "parentrig NTLM proxy"
        GssapiAllowedMech ntlmssp
        GssapiConnectionBound On
        GssapiBasicAuth Off
        Require valid-user
    </Proxy>
</VirtualHost>
"""


class NtlmProxy(_Server):
    """Apache httpd as a forward proxy that wants NTLM proxy authentication (407 with
    `Proxy-Authenticate: Negotiate` and `Proxy-Authenticate: NTLM`; users TESTDOM\\alice / TESTDOM\\bob with
    the passwords of USERS). Relays http:// requests (adds `Via: 1.1 127.0.0.1:PORT`, ProxyVia On) and CONNECT
    to any port. The NTLM login is bound to the client's connection (GssapiConnectionBound)."""

    name = "apache-ntlm-proxy"

    def __init__(self, base_dir, users=None, port=None, loglevel=None):
        os.makedirs(base_dir, exist_ok=True)
        super().__init__(base_dir, port)
        self.users = dict(users or USERS)
        self.ids = _ids("www-data")
        self.loglevel = loglevel or os.environ.get("PARENTS_APACHE_LOGLEVEL", "warn lua:info auth_gssapi:info")
        self.conf = os.path.join(base_dir, "httpd.conf")
        self.error_log = os.path.join(base_dir, "logs", "error.log")
        self.access_log = os.path.join(base_dir, "logs", "access.log")
        self.ntlm_user_file = os.path.join(base_dir, "auth", "ntlm_users")
        _give(base_dir, 0o750, self.ids)

    def ntlm_user(self, user):
        return "%s\\%s" % (NTLM_DOMAIN, user)

    def _prepare(self):
        for sub, mode in (("logs", 0o750), ("run", 0o770), ("lua", 0o750), ("auth", 0o750)):
            os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
            _give(os.path.join(self.dir, sub), mode, self.ids)
        with open(self.ntlm_user_file, "w") as f:
            for u, pw in self.users.items():
                f.write("%s:%s:%s\n" % (NTLM_DOMAIN, u, pw))
        _give(self.ntlm_user_file, 0o640, self.ids)
        lua = os.path.join(self.dir, "lua", "ntlm_fix.lua")
        shutil.copyfile(os.path.join(NETAUTH_TEMPLATES, "ntlm_fix.lua"), lua)
        _give(lua, 0o644, self.ids)
        text = APACHE_PROXY_CONF % {
            "dir": self.dir, "port": self.port, "loglevel": self.loglevel,
            "usergroup": "User %s\nGroup %s" % (self.ids[2], self.ids[3]) if self.ids else ""}
        with open(self.conf, "w") as f:
            f.write(text)

    def _command(self):
        return ["apache2", "-f", self.conf, "-DFOREGROUND"]

    def _env(self):
        env = super()._env()
        env["NTLM_USER_FILE"] = self.ntlm_user_file  # gss-ntlmssp reads it from the process environment
        return env

    def _diagnostics(self):
        return netauth._tail(self.stdout_log) + netauth._tail(self.error_log)

    def error_log_text(self):
        return netauth._tail(self.error_log, 10 ** 6)

    def access_log_lines(self):
        """`client-ip client-port k=<keep-alive count> "request line" status bytes user="TESTDOM\\alice"
        pauth="<Proxy-Authorization>" pa="<Proxy-Authenticate>"` per request (written after the answer)."""
        return [l for l in netauth._tail(self.access_log, 10 ** 7).splitlines() if l.strip()]

    def wait_access(self, pred, timeout=5.0):
        if isinstance(pred, str):
            rx = re.compile(pred)
            pred = lambda l: rx.search(l)  # noqa: E731
        deadline = time.monotonic() + timeout
        while True:
            hits = [l for l in self.access_log_lines() if pred(l)]
            if hits or time.monotonic() >= deadline:
                return hits
            time.sleep(0.05)


# ---------------------------------------------------------------------------------------------------------
# Kerberos realm for the Negotiate parent
# ---------------------------------------------------------------------------------------------------------

def kerberos_realm(base_dir, realm=KRB_REALM, users=None):
    """A started netauth.rig.KerberosRealm in base_dir (krb5kdc on 127.0.0.1, principals alice/bob and
    HTTP/localhost, HTTP/127.0.0.1). Stop it with .stop()."""
    os.makedirs(base_dir, exist_ok=True)
    r = netauth.KerberosRealm(base_dir, realm=realm, users=dict(users or USERS))
    return r.start()


# ---------------------------------------------------------------------------------------------------------
# python3 -m parents.rig
# ---------------------------------------------------------------------------------------------------------

def main(argv=None):
    """python3 -m parents.rig (from Tests/e2e): start a Basic Squid, a Negotiate Squid (with its KDC) and the
    NTLM proxy, print them, wait for ^C."""
    ensure_installed()
    d = tempfile.mkdtemp(prefix="parentrig-")
    os.chmod(d, 0o755)
    started = []
    try:
        basic = Squid(os.path.join(d, "basic"), "basic", name="basic").start()
        started.append(basic)
        realm = kerberos_realm(os.path.join(d, "krb"))
        started.append(realm)
        neg = Squid(os.path.join(d, "negotiate"), "negotiate", realm=realm, name="negotiate").start()
        started.append(neg)
        ntlm = NtlmProxy(os.path.join(d, "ntlm")).start()
        started.append(ntlm)
        print("parentrig in %s" % d)
        print("  basic squid      %s  (alice/alice-pw)" % basic.url)
        print("  negotiate squid  %s  (KRB5_CONFIG=%s, kinit alice@%s)" % (neg.url, realm.krb5_config, realm.realm))
        print("  ntlm apache      %s  (TESTDOM\\alice / alice-pw)" % ntlm.url, flush=True)

        def on_term(signum, frame):
            raise KeyboardInterrupt
        signal.signal(signal.SIGTERM, on_term)
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        for s in reversed(started):
            s.stop()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
