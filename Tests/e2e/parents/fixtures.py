"""pytest fixtures for the parent-proxy rig.

Use from a test module or conftest (Tests/e2e is on sys.path there)::

    from parents.fixtures import *   # noqa: F401,F403

(``parents/conftest.py`` already does this for tests inside ``parents/``.)

Fixtures (each started only when a test asks for it):
  parents_dir        session: a temp dir (0755: Squid runs as `proxy`, Apache as `www-data`), removed at the end
  squid_basic        session: a started rig.Squid with Basic auth (alice/alice-pw, bob/bob-pw)
  parents_realm      session: a started netauth.rig.KerberosRealm "PARENTS.TEST" (alice, bob; HTTP/localhost)
  squid_negotiate    session: a started rig.Squid with Negotiate (Kerberos, parents_realm)
  ntlm_parent        session: a started rig.NtlmProxy (Apache forward proxy, NTLM: TESTDOM\\alice/alice-pw)
  squid_factory      function: make(auth="basic", name=..., start=True, port=None) -> rig.Squid; all stopped at
                     the end of the test (for failover: make(start=False) reserves a port where nothing listens
                     yet; .start() later brings it up there, .stop(grace=0) takes it down at once)

PARENTS_ALLOW_SKIP=1 makes them skip instead of fail when the packages can't be installed or a server can't
start.
"""

import os
import shutil
import tempfile

import pytest

from . import rig as _rig

__all__ = ["parents_dir", "squid_basic", "parents_realm", "squid_negotiate", "ntlm_parent", "squid_factory"]


def _started(make):
    try:
        _rig.ensure_installed()
        return make()
    except _rig.RigError as e:
        if os.environ.get("PARENTS_ALLOW_SKIP") == "1":
            pytest.skip("parent-proxy rig unavailable: %s" % e)
        raise


@pytest.fixture(scope="session")
def parents_dir():
    d = tempfile.mkdtemp(prefix="parentrig-")
    os.chmod(d, 0o755)
    yield d
    if os.environ.get("PARENTS_KEEP") != "1":
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def squid_basic(parents_dir):
    s = _started(lambda: _rig.Squid(os.path.join(parents_dir, "squid-basic"), "basic", name="basic").start())
    yield s
    s.stop()


@pytest.fixture(scope="session")
def parents_realm(parents_dir):
    r = _started(lambda: _rig.kerberos_realm(os.path.join(parents_dir, "krb")))
    yield r
    r.stop()


@pytest.fixture(scope="session")
def squid_negotiate(parents_dir, parents_realm):
    s = _started(lambda: _rig.Squid(os.path.join(parents_dir, "squid-negotiate"), "negotiate",
                                    realm=parents_realm, name="negotiate").start())
    yield s
    s.stop()


@pytest.fixture(scope="session")
def ntlm_parent(parents_dir):
    s = _started(lambda: _rig.NtlmProxy(os.path.join(parents_dir, "apache-ntlm")).start())
    yield s
    s.stop()


@pytest.fixture
def squid_factory(parents_dir):
    made = []

    def make(auth="basic", name=None, start=True, port=None, realm=None):
        name = name or "squid%d" % (len(made) + 1)
        d = tempfile.mkdtemp(prefix="%s-" % name, dir=parents_dir)
        s = _rig.Squid(d, auth, name=name, realm=realm, port=port)
        if s.port is None:
            s.port = _rig.free_port()
        made.append(s)
        if start:
            _started(s.start)
        return s

    yield make
    for s in made:
        s.stop(grace=0)
