"""pytest fixtures for the netauth rig.

Use from a conftest.py (Tests/e2e is on sys.path there)::

    from netauth.fixtures import *   # noqa: F401,F403

(``netauth/conftest.py`` already does this for tests inside ``netauth/``.)

Fixtures:
  netauth_rig          session: started rig.NetAuthRig (Apache + KDC + PKI)
  netauth_krb_ccache   function: path of a fresh ccache holding alice's TGT
  netauth_krb_env      function: env dict (KRB5_CONFIG + KRB5CCNAME of that ccache)
  netauth_big_file     session: (path, size, sha256 hex) of a 20 MiB random file

Set NETAUTH_ALLOW_SKIP=1 to skip (instead of fail) when the rig cannot be
installed or started (e.g. not root and packages missing).
"""

import hashlib
import os

import pytest

from . import rig as _rig

__all__ = ["netauth_rig", "netauth_krb_ccache", "netauth_krb_env", "netauth_big_file"]

BIG_FILE_SIZE = 20 * 1024 * 1024


@pytest.fixture(scope="session")
def netauth_rig():
    try:
        _rig.ensure_installed()
        r = _rig.NetAuthRig().start()
    except _rig.RigError as e:
        if os.environ.get("NETAUTH_ALLOW_SKIP") == "1":
            pytest.skip("netauth rig unavailable: %s" % e)
        raise
    try:
        yield r
    finally:
        r.stop()


@pytest.fixture
def netauth_krb_ccache(netauth_rig):
    path = netauth_rig.realm.kinit("alice")
    yield path
    netauth_rig.realm.kdestroy(path)


@pytest.fixture
def netauth_krb_env(netauth_rig, netauth_krb_ccache):
    return netauth_rig.realm.env(ccache=netauth_krb_ccache)


@pytest.fixture(scope="session")
def netauth_big_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("netauth-big") / "body-20MiB.bin"
    h = hashlib.sha256()
    with open(path, "wb") as f:
        left = BIG_FILE_SIZE
        while left:
            chunk = os.urandom(min(left, 1 << 20))
            h.update(chunk)
            f.write(chunk)
            left -= len(chunk)
    return str(path), BIG_FILE_SIZE, h.hexdigest()
