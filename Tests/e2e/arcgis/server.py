#!/usr/bin/env python3
"""ArcGIS Enterprise / Portal test server for the authproxy end-to-end suite.

Standard library only.  Threaded ``http.server``, HTTP/1.1 keep-alive, every
response framed with Content-Length.  One instance plays a **portal**
(``<portal_path>/sharing/rest/...``, default ``/portal``), an **ArcGIS Server**
(``<server_path>/rest/...`` + ``<server_path>/tokens/...``, default
``/arcgis``), or both.  Usable

* in-process:  ``srv = ArcGISServer(role="server").start(); ...; srv.stop()``
* as a process: ``python3 -m arcgis.server --port 0 --print-port --role portal``
  (from Tests/e2e) or ``python3 Tests/e2e/arcgis/server.py ...``

Protocol (see README.md for the exact shapes):

  server  GET  /arcgis/rest/info                          token-service discovery
          POST /arcgis/tokens/generateToken (also /arcgis/tokens/)
          *    /arcgis/rest/services[...]                  secured resources:
               .../FeatureServer[/<layer>[/query]], .../MapServer[/tile/z/y/x],
               .../upload (streamed, hashed)
  portal  GET  /portal/sharing/rest/info                  (public, like real portals)
          POST /portal/sharing/rest/generateToken          username/password, or token+serverUrl
          POST /portal/sharing/rest/oauth2/token           client_credentials, authorization_code
                                                           (+PKCE), refresh_token, exchange_refresh_token
          GET  /portal/sharing/rest/oauth2/authorize       auto-approves (302 / OOB page)
          POST /portal/sharing/rest/oauth2/revokeToken
          GET  /portal/sharing/rest/portals/self, community/self   (token required)
  test    GET  /__stats  POST /__stats/reset  GET /__requests  GET /__config
          POST /__admin/expire | token-service | password | error-form | set |
               federate | issue | invalidate | validate (portal back-channel)

Tokens are accepted from the ``token`` query parameter, the urlencoded form
field ``token``, a multipart form field ``token`` (uploads), and the headers
``X-Esri-Authorization: Bearer <t>`` / ``Authorization: Bearer <t>``.
"""

import argparse
import base64
import hashlib
import html
import json
import re
import secrets
import signal
import os
import socket
import ssl
import ssl as _sslmod
import struct
import sys
import threading
import time
import urllib.error
import urllib.request
import zlib
import gzip
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

try:
    from loopback_port import LoopbackServer
except ImportError:  # run as a script: Tests/e2e is the parent of this file's directory
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from loopback_port import LoopbackServer

try:
    from . import printing
except ImportError:                     # run as a script: python3 Tests/e2e/arcgis/server.py
    import printing

# ---------------------------------------------------------------------------
# Constants / payloads
# ---------------------------------------------------------------------------

CURRENT_VERSION = 11.1
FULL_VERSION = "11.1.0"
OOB_REDIRECT = "urn:ietf:wg:oauth:2.0:oob"
INTERNAL_HEADER = "X-Arcgis-Test-Internal"   # marks server<->portal back-channel calls
REASON_HEADER = "X-Arcgis-Test-Reason"       # why a request was rejected (test aid)

# "403": HTTP 403 + ERR_403 instead of any token check; "403-body": a valid token is answered with HTTP 200 and
# the ERR_403 body (how ArcGIS tells a signed-in user without permission); token errors stay in the json form.
ERROR_FORMS = ("json", "json-spaced", "status", "jsonp", "html", "403", "unwrapped", "403-body")

DEFAULT_USERS = ("alice:alice-pass", "bob:bob-pass")
DEFAULT_APPS = ("proxyapp:proxyapp-secret",)

SERVER_JSON_CTYPE = "text/plain;charset=utf-8"          # what ArcGIS Server sends for f=json
PORTAL_JSON_CTYPE = "application/json;charset=UTF-8"    # what Portal/sharing sends
JSONP_CTYPE = "text/javascript;charset=utf-8"

TOKEN_KINDS = ("generate_password", "generate_federated", "oauth_client_credentials",
               "oauth_authorization_code", "oauth_refresh", "oauth_exchange_refresh",
               "oauth_implicit")

_request_context = threading.local()
FORM_LIMIT = 8 << 20      # urlencoded bodies larger than this are hashed, not parsed
UPLOAD_FORM_LIMIT = 1 << 20   # ... for upload endpoints (never buffer an upload)
FIELD_LIMIT = 64 << 10    # non-file multipart fields kept up to this size

ESRI_FIELDS = [
    {"name": "OBJECTID", "type": "esriFieldTypeOID", "alias": "OBJECTID"},
    {"name": "name", "type": "esriFieldTypeString", "alias": "Name", "length": 64},
    {"name": "value", "type": "esriFieldTypeInteger", "alias": "Value"},
]

ESRI_QUERY_DOC = {
    "objectIdFieldName": "OBJECTID",
    "uniqueIdField": {"name": "OBJECTID", "isSystemMaintained": True},
    "globalIdFieldName": "",
    "geometryType": "esriGeometryPoint",
    "spatialReference": {"wkid": 4326, "latestWkid": 4326},
    "fields": ESRI_FIELDS,
    "features": [
        {"attributes": {"OBJECTID": 1, "name": "Redlands", "value": 101},
         "geometry": {"x": -117.1825, "y": 34.0556}},
        {"attributes": {"OBJECTID": 2, "name": "Zurich", "value": 202},
         "geometry": {"x": 8.5417, "y": 47.3769}},
        {"attributes": {"OBJECTID": 3, "name": "Wellington", "value": 303},
         "geometry": {"x": 174.7762, "y": -41.2865}},
    ],
    "exceededTransferLimit": False,
}

# Bodies of the token errors, exactly as ArcGIS sends them (compact form).
ERR_499 = {"error": {"code": 499, "message": "Token Required", "messageCode": "GWM_0003",
                     "details": []}}
ERR_498 = {"error": {"code": 498, "message": "Invalid token.", "details": []}}
ERR_403 = {"error": {"code": 403,
                     "message": "You do not have permissions to access this resource or "
                                "perform this operation.",
                     "messageCode": "GWM_0003", "details": []}}

_SPACED = {
    498: ('{\n  "error" : {\n    "code" : 498,\n    "message" : "Invalid token.",\n'
          '    "details" : [ ]\n  }\n}'),
    499: ('{\n  "error" : {\n    "code" : 499,\n    "message" : "Token Required",\n'
          '    "messageCode" : "GWM_0003",\n    "details" : [ ]\n  }\n}'),
}

# The shape without the "error" wrapper (ArcGIS Server and older releases).
_UNWRAPPED = {
    498: {"code": 498, "message": "Invalid token.", "details": []},
    499: {"code": 499, "message": "Token Required", "messageCode": "GWM_0003", "details": []},
}

_HTML_ERR = {
    498: "Invalid Token",
    499: "Token Required",
}

_CALLBACK_RE = re.compile(r"^[A-Za-z_$][\w$.]*$")


def _dumps(obj, pretty=False):
    if pretty:
        return json.dumps(obj, indent=2)
    return json.dumps(obj, separators=(",", ":"))


def pkce_challenge(verifier):
    """S256 code_challenge for a code_verifier (RFC 7636)."""
    d = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(d).rstrip(b"=").decode("ascii")


def _new_token(prefix=""):
    # Real ArcGIS tokens are long URL-safe strings that may end in '.'.
    return prefix + secrets.token_urlsafe(48) + "."


def _now():
    return time.time()


def _ms(t):
    return int(t * 1000)


def norm_root(url):
    """Normalise a server/portal root: lowercase scheme+host, no trailing '/',
    cut before '/rest/', '/admin/', '/tokens/' or '/sharing/'."""
    if not url:
        return ""
    s = urlsplit(url.strip())
    path = s.path.rstrip("/") + "/"
    low = path.lower()
    cuts = [low.find(m) for m in ("/rest/", "/admin/", "/tokens/", "/sharing/")]
    cuts = [c for c in cuts if c >= 0]
    if cuts:
        path = path[:min(cuts)]
    return "%s://%s%s" % (s.scheme.lower(), s.netloc.lower(), path.rstrip("/"))


def brotli_stored(data):
    """A valid brotli stream (RFC 7932) of `data` in uncompressed meta-blocks: no brotli module needed, and
    any brotli decoder reads it."""
    bits = []

    def put(value, n):
        bits.extend((value >> i) & 1 for i in range(n))

    def flush():
        while len(bits) % 8:
            bits.append(0)
        b = bytes(sum(bit << i for i, bit in enumerate(bits[k:k + 8])) for k in range(0, len(bits), 8))
        bits.clear()
        return b

    out = bytearray()
    put(1, 1); put(5, 3)                         # WBITS = 22
    for k in range(0, len(data), 65536):
        chunk = data[k:k + 65536]
        put(0, 1)                                # ISLAST = 0
        put(0, 2)                                # MNIBBLES = 4
        put(len(chunk) - 1, 16)                  # MLEN - 1
        put(1, 1)                                # ISUNCOMPRESSED
        out += flush() + chunk
    put(1, 1); put(1, 1)                         # ISLAST, ISLASTEMPTY
    return bytes(out + flush())


def zstd_raw(data):
    """A valid zstd frame (RFC 8878) of `data` in raw blocks."""
    out = bytearray(struct.pack("<I", 0xFD2FB528))
    out.append(0xA0)                             # 4-byte content size, single segment, no checksum
    out += struct.pack("<I", len(data))
    blocks = [data[k:k + 131072] for k in range(0, len(data), 131072)] or [b""]
    for i, b in enumerate(blocks):
        last = 1 if i == len(blocks) - 1 else 0
        out += struct.pack("<I", last | (0 << 1) | (len(b) << 3))[:3] + b
    return bytes(out)


def _png(width, height, rgb):
    raw = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))

    def chunk(tag, data):
        return (struct.pack(">I", len(data)) + tag + data
                + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF))
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9))
            + chunk(b"IEND", b""))


_png_cache = {}


def tile_png(z, y, x):
    key = (z % 7, y % 5, x % 3)
    if key not in _png_cache:
        _png_cache[key] = _png(256, 256, (40 + 30 * key[0], 60 + 35 * key[1], 90 + 50 * key[2]))
    return _png_cache[key]


class ClientGone(Exception):
    """A read from / write to the client failed."""


# ---------------------------------------------------------------------------
# State
# ---------------------------------------------------------------------------

class Token:
    __slots__ = ("value", "kind", "username", "client_id", "issued", "expires", "audience",
                 "client", "referer", "ip", "revoked", "refresh", "revocable")

    def __init__(self, value, kind, username, client_id, issued, expires, audience,
                 client=None, referer=None, ip=None, refresh=None, revocable=False):
        self.value = value
        self.kind = kind
        self.username = username
        self.client_id = client_id
        self.issued = issued
        self.expires = expires
        self.audience = audience      # None: portal token; else the server root it is valid for
        self.client = client          # None | "referer" | "requestip" | "ip"
        self.referer = referer
        self.ip = ip
        self.revoked = False
        self.refresh = refresh        # the refresh token it was derived from
        self.revocable = revocable

    def public(self):
        return {"kind": self.kind, "username": self.username, "client_id": self.client_id,
                "issued": _ms(self.issued), "expires": _ms(self.expires),
                "audience": self.audience, "client": self.client, "referer": self.referer,
                "ip": self.ip, "revoked": self.revoked}


class APIKey:
    """One key of an API key credentials item (ArcGIS Online / Location Platform / Enterprise >= 11.4): a slot
    (1 or 2), its own expiry, invalidated on its own."""
    __slots__ = ("value", "item", "slot", "expires", "invalidated")

    def __init__(self, value, item, slot, expires):
        self.value = value
        self.item = item
        self.slot = slot
        self.expires = expires
        self.invalidated = False


class APIKeyItem:
    """An API key credentials item: its owner, its referrer restriction (`httpReferrers`) and its two slots."""
    __slots__ = ("name", "username", "referrers", "slots")

    def __init__(self, name, username, referrers):
        self.name = name
        self.username = username
        self.referrers = list(referrers or [])
        self.slots = {}               # slot number -> APIKey


def _new_api_key(slot):
    # The shape of a real API key: "AAPT…" + ".AT<slot>_" + 8 characters (arcgis-rest-js reads the slot from the
    # tenth character from the end, `slotForKey`).
    tail = "".join(secrets.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
                   for _ in range(8))
    return "AAPT" + secrets.token_urlsafe(60).replace("_", "-") + ".AT%d_%s" % (slot, tail)


def _referrer_allows(patterns, referer):
    """httpReferrers: an entry ending in `*` matches any Referer it starts (before the `*`); another entry matches
    the Referer equal to it or starting with it."""
    if not referer:
        return False
    for p in patterns:
        if p.endswith("*"):
            if referer.startswith(p[:-1]):
                return True
        elif referer == p or referer.startswith(p):
            return True
    return False


class RefreshToken:
    __slots__ = ("value", "client_id", "username", "issued", "expires", "revoked", "redirect_uri",
                 "exchanged")

    def __init__(self, value, client_id, username, issued, expires, redirect_uri):
        self.value = value
        self.client_id = client_id
        self.username = username
        self.issued = issued
        self.expires = expires        # None: never
        self.revoked = False
        self.redirect_uri = redirect_uri
        self.exchanged = 0            # successful exchange_refresh_token grants that spent it


class AuthCode:
    __slots__ = ("value", "client_id", "redirect_uri", "challenge", "method", "username",
                 "refresh_minutes", "created", "used")

    def __init__(self, value, client_id, redirect_uri, challenge, method, username,
                 refresh_minutes):
        self.value = value
        self.client_id = client_id
        self.redirect_uri = redirect_uri
        self.challenge = challenge
        self.method = method
        self.username = username
        self.refresh_minutes = refresh_minutes
        self.created = _now()
        self.used = False


class _Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        self.connections = 0
        self.tokens_issued = {k: 0 for k in TOKEN_KINDS}
        self.token_requests = []           # every token-service call, ok or not
        self.token_failures = {}           # reason -> count
        self.rejected_498 = 0
        self.rejected_499 = 0
        self.refresh_exchanges = 0         # successful exchange_refresh_token grants
        self.refresh_exchange_repeats = 0  # exchanges of a refresh token exchanged before (ok or not)
        self.rejected_403 = 0
        self.double_token = 0
        self.same_token_twice = 0
        self.accepted = 0
        self.signin_redirects = 0          # token failures answered with a redirect to sign in (web tier)
        self.moved_redirects = 0
        self.requests = {}                 # path kind -> count
        self.token_sources = {}            # source -> count
        self.revocations = 0
        self.revoke_calls = 0
        self.revoke_noop = 0
        self.validate_calls = 0
        self.upload_bytes = 0
        self.log = []

    def snapshot(self):
        with self.lock:
            return {
                "connections": self.connections,
                "tokens_issued": dict(self.tokens_issued),
                "tokens_issued_total": sum(self.tokens_issued.values()),
                "token_requests": [dict(r) for r in self.token_requests],
                "token_request_times": [r["t"] for r in self.token_requests],
                "token_failures": dict(self.token_failures),
                "token_failures_total": sum(self.token_failures.values()),
                "rejected_498": self.rejected_498,
                "refresh_exchanges": self.refresh_exchanges,
                "refresh_exchange_repeats": self.refresh_exchange_repeats,
                "rejected_499": self.rejected_499,
                "rejected_403": self.rejected_403,
                "double_token": self.double_token,
                "same_token_twice": self.same_token_twice,
                "accepted": self.accepted,
                "signin_redirects": self.signin_redirects,
                "moved_redirects": self.moved_redirects,
                "requests": dict(self.requests),
                "token_sources": dict(self.token_sources),
                "revocations": self.revocations,
                "revoke_calls": self.revoke_calls,
                "revoke_noop": self.revoke_noop,
                "validate_calls": self.validate_calls,
                "upload_bytes": self.upload_bytes,
            }


class _State:
    """Configuration + token stores of one instance (shared by all threads)."""

    def __init__(self, cfg):
        self.lock = threading.RLock()
        self.cfg = cfg
        self.users = dict(cfg["users"])
        self.apps = dict(cfg["apps"])
        self.tokens = {}
        self.refresh = {}
        self.codes = {}
        self.expire_epoch = 0.0          # tokens issued at or before this are expired
        self.refresh_expire_epoch = 0.0
        self.error_form = cfg["error_form"]   # None = auto (json; html for tiles)
        self.token_service = {"mode": "ok", "status": 503, "remaining": None, "seconds": 0.0}
        self.federated = set()           # normalised server roots known to this portal
        self.api_keys = {}               # key value -> APIKey
        self.api_items = {}              # item name -> APIKeyItem
        self.probe_ok = set()
        self.stats = _Stats()


# ---------------------------------------------------------------------------
# Multipart scanner (streaming; never holds a file part in memory)
# ---------------------------------------------------------------------------

class MultipartScanner:
    def __init__(self, boundary):
        self.delim = b"\r\n--" + boundary
        self.buf = b"\r\n"          # so that the first boundary matches the delimiter
        self.state = "preamble"
        self.parts = []
        self.fields = {}            # name -> [values] for small non-file parts
        self.cur = None
        self.error = None

    def _emit(self, data):
        if self.cur is None or not data:
            return
        self.cur["size"] += len(data)
        self.cur["_sha"].update(data)
        if self.cur["filename"] is None and len(self.cur["_val"]) < FIELD_LIMIT:
            self.cur["_val"] += data[:FIELD_LIMIT - len(self.cur["_val"])]

    def _finish_part(self):
        c = self.cur
        if c is None:
            return
        self.cur = None
        if c["filename"] is None and c["name"]:
            self.fields.setdefault(c["name"], []).append(c["_val"].decode("utf-8", "replace"))
        self.parts.append({"name": c["name"], "filename": c["filename"], "size": c["size"],
                           "sha256": c["_sha"].hexdigest(), "content_type": c["ctype"]})

    def feed(self, data):
        if self.error:
            return
        self.buf += data
        while True:
            if self.state in ("preamble", "body"):
                i = self.buf.find(self.delim)
                if i < 0:
                    keep = len(self.delim) - 1
                    if len(self.buf) > keep:
                        if self.state == "body":
                            self._emit(self.buf[:-keep])
                        self.buf = self.buf[-keep:]
                    return
                if self.state == "body":
                    self._emit(self.buf[:i])
                    self._finish_part()
                self.buf = self.buf[i + len(self.delim):]
                self.state = "after"
            elif self.state == "after":
                if len(self.buf) < 2:
                    return
                if self.buf.startswith(b"--"):
                    self.state = "epilogue"
                    self.buf = b""
                    return
                j = self.buf.find(b"\r\n")
                if j < 0:
                    if len(self.buf) > 1024:
                        self.error = "bad boundary line"
                    return
                self.buf = self.buf[j + 2:]   # transport padding is ignored
                self.state = "headers"
            elif self.state == "headers":
                j = self.buf.find(b"\r\n\r\n")
                if j < 0:
                    if len(self.buf) > 65536:
                        self.error = "part headers too large"
                    return
                name = filename = None
                ctype = None
                for line in self.buf[:j].decode("latin-1").split("\r\n"):
                    k, _, v = line.partition(":")
                    k = k.strip().lower()
                    if k == "content-disposition":
                        m = re.search(r'(?:^|;)\s*name="([^"]*)"', v) or \
                            re.search(r'(?:^|;)\s*name=([^;\s]+)', v)
                        name = m.group(1) if m else None
                        m = re.search(r'filename="([^"]*)"', v) or \
                            re.search(r'filename=([^;\s]+)', v)
                        filename = m.group(1) if m else None
                    elif k == "content-type":
                        ctype = v.strip()
                self.cur = {"name": name, "filename": filename, "ctype": ctype, "size": 0,
                            "_sha": hashlib.sha256(), "_val": bytearray()}
                self.buf = self.buf[j + 4:]
                self.state = "body"
            else:  # epilogue
                self.buf = b""
                return

    def close(self):
        if self.state not in ("epilogue",) and self.error is None:
            self.error = "unterminated multipart body"


# ---------------------------------------------------------------------------
# Request handler
# ---------------------------------------------------------------------------

class _Req:
    """Parsed request: path, params (query + urlencoded form merged, last wins),
    all token candidates, body facts."""

    def __init__(self):
        self.path = ""
        self.query = []
        self.form = []
        self.params = {}
        self.body_size = 0
        self.body_sha = ""
        self.multipart = None
        self.form_parsed = False
        self.kind = "other"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ArcGIS-e2e/11.1"
    sys_version = ""
    timeout = 120

    def version_string(self):
        return self.server_version

    def date_time_string(self, timestamp=None):
        # The Date header reads the server's clock, which clock_skew sets off from the real one.
        if timestamp is None:
            timestamp = time.time() + float(self.cfg.get("clock_skew") or 0)
        return super().date_time_string(timestamp)

    # -- connection lifecycle ------------------------------------------------
    def setup(self):
        try:
            self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        ctx = self.server.ssl_context
        if ctx is not None:
            self.request.settimeout(self.timeout)
            self.request = ctx.wrap_socket(self.request, server_side=True)
        super().setup()
        self.conn_requests = 0
        with self.st.stats.lock:
            self.st.stats.connections += 1

    def handle(self):
        try:
            super().handle()
        except (ConnectionError, socket.timeout, ssl.SSLError, OSError):
            pass

    def log_message(self, fmt, *args):
        if self.server.verbose:
            sys.stderr.write("arcgis: " + (fmt % args) + "\n")

    @property
    def st(self):
        return self.server.state

    @property
    def cfg(self):
        return self.server.state.cfg

    @property
    def app(self):
        return self.server.app

    # -- low-level I/O ---------------------------------------------------------
    def _iter_body(self):
        te = self.headers.get("Transfer-Encoding", "")
        if "chunked" in te.lower():
            while True:
                line = self.rfile.readline(65537)
                if not line:
                    raise ClientGone()
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while True:
                        t = self.rfile.readline(65537)
                        if t in (b"\r\n", b"\n", b""):
                            break
                    return
                remaining = size
                while remaining:
                    buf = self.rfile.read(min(remaining, 1 << 20))
                    if not buf:
                        raise ClientGone()
                    remaining -= len(buf)
                    yield buf
                self.rfile.readline(3)
        else:
            cl = self.headers.get("Content-Length")
            remaining = int(cl) if cl else 0
            if remaining < 0:
                raise ValueError("negative Content-Length")
            while remaining:
                buf = self.rfile.read(min(remaining, 1 << 20))
                if not buf:
                    raise ClientGone()
                remaining -= len(buf)
                yield buf

    def _consume_body(self, req):
        ctype = self.headers.get("Content-Type", "")
        low = ctype.lower()
        h = hashlib.sha256()
        size = 0
        keep = None
        scanner = None
        if low.startswith("application/x-www-form-urlencoded"):
            keep = bytearray()
        elif low.startswith("multipart/form-data"):
            m = re.search(r'boundary="?([^";]+)"?', ctype, re.I)
            if m:
                scanner = MultipartScanner(m.group(1).strip().encode("latin-1"))
        limit = UPLOAD_FORM_LIMIT if req.kind == "upload" else FORM_LIMIT
        for chunk in self._iter_body():
            size += len(chunk)
            h.update(chunk)
            if keep is not None:
                if len(keep) + len(chunk) <= limit:
                    keep += chunk
                else:
                    keep = None
            if scanner is not None:
                scanner.feed(chunk)
        req.body_size = size
        req.body_sha = h.hexdigest()
        if keep is not None and size:
            req.form = parse_qsl(keep.decode("utf-8", "replace"), keep_blank_values=True)
            req.form_parsed = True
        if scanner is not None:
            scanner.close()
            req.multipart = scanner

    def _encoding(self):
        """The content coding for this response (test option content_encoding), if the client accepts it."""
        enc = self.cfg.get("content_encoding")
        if not enc or self.path.startswith("/__"):
            return None
        accepted = [a.split(";")[0].strip().lower()
                    for a in (self.headers.get("Accept-Encoding") or "").split(",")]
        return enc if enc in accepted else None

    def send_bytes(self, status, body, ctype, headers=(), reason=None):
        """Head and body in one write (no Nagle / delayed-ACK stalls)."""
        enc = self._encoding() if body else None
        if enc == "gzip":
            body = gzip.compress(body, mtime=0)
        elif enc == "deflate":
            body = zlib.compress(body)
        elif enc == "br":
            body = brotli_stored(body)
        elif enc == "zstd":
            body = zstd_raw(body)
        self.send_response(status, reason)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if enc:
            self.send_header("Content-Encoding", enc)
            self.send_header("Vary", "Accept-Encoding")
        for k, v in headers:
            self.send_header(k, v)
        self._headers_buffer.append(b"\r\n")
        if self.command != "HEAD" and body:
            self._headers_buffer.append(body)
        data = b"".join(self._headers_buffer)
        self._headers_buffer = []
        pending, self._pending_log = self._pending_log, None
        if pending is not None:
            # recorded before the client can see the answer, with a hash of the bytes sent
            pending(status, hashlib.sha256(body).hexdigest(), enc)
        try:
            self.wfile.write(data)
        except (ConnectionError, socket.timeout, ssl.SSLError, OSError) as e:
            raise ClientGone() from e
        self._last_status = status

    def send_json(self, obj, req, status=200, headers=(), portal=False, reason=None):
        """JSON honouring f=pjson and callback= (JSONP)."""
        pretty = req.params.get("f", "").lower() == "pjson"
        text = obj if isinstance(obj, str) else _dumps(obj, pretty)
        cb = req.params.get("callback", "")
        if cb and _CALLBACK_RE.match(cb):
            self.send_bytes(200, ("%s(%s);" % (cb, text)).encode(), JSONP_CTYPE, headers)
            return
        ctype = PORTAL_JSON_CTYPE if portal else self.cfg["server_json_ctype"]
        self.send_bytes(status, text.encode("utf-8"), ctype, headers, reason)

    def send_html(self, status, text, headers=()):
        self.send_bytes(status, text.encode("utf-8"), "text/html;charset=utf-8", headers)

    # -- dispatch ------------------------------------------------------------
    def _dispatch(self):
        self._last_status = None
        self._pending_log = None
        limit = self.st.cfg.get("max_url_bytes")
        if limit and len(self.path) > limit and not self.path.startswith("/__"):
            # What IIS (and many front ends) do with a request line longer than they accept: 414, and the
            # request is never seen by ArcGIS Server.
            with self.st.stats.lock:
                self.st.stats.log.append({"t": _now(), "method": self.command, "path": urlsplit(self.path).path,
                                          "kind": "rejected", "status": 414, "url_bytes": len(self.path)})
            self.close_connection = True
            return self.send_bytes(414, b"<h2>HTTP Error 414. The request URL is too long.</h2>", "text/html",
                                   reason="URI Too Long")
        req = _Req()
        split = urlsplit(self.path)
        req.path = split.path or "/"
        req.query = parse_qsl(split.query, keep_blank_values=True)
        req.kind = self.app.classify(req.path)
        internal = bool(self.headers.get(INTERNAL_HEADER))
        self.conn_requests += 1
        if internal and self.conn_requests == 1:
            with self.st.stats.lock:          # back-channel connections are not counted
                self.st.stats.connections -= 1
        try:
            self._consume_body(req)
        except (ValueError, ClientGone):
            self.close_connection = True
            return
        params = dict(req.query)
        if self.command != "GET":
            params.update(dict(req.form))
        req.params = params
        if not internal and not req.path.startswith("/__"):
            with self.st.stats.lock:
                self.st.stats.requests[req.kind] = self.st.stats.requests.get(req.kind, 0) + 1
        try:
            self.app.route(self, req)
        except ClientGone:
            self.close_connection = True

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _dispatch


# ---------------------------------------------------------------------------
# Application logic
# ---------------------------------------------------------------------------

class _App:
    def __init__(self, state, httpd):
        self.st = state
        self.httpd = httpd
        self.print = printing.PrintState()

    def r_print(self, h, req):
        printing.serve(self, h, req, tile_png(1, 2, 3))

    def r_print_output(self, h, req):
        printing.serve_output(self, h, req)

    # -- URLs ------------------------------------------------------------------
    @property
    def cfg(self):
        return self.st.cfg

    @property
    def base_url(self):
        return self.httpd.base_url

    @property
    def has_portal(self):
        return self.cfg["role"] in ("portal", "both")

    @property
    def has_server(self):
        return self.cfg["role"] in ("server", "both")

    @property
    def portal_url(self):
        return self.base_url + self.cfg["portal_path"]

    @property
    def server_root(self):
        return self.base_url + self.cfg["server_path"]

    def _resolve(self, url):
        if url == "self":
            return self.portal_url
        return url

    @property
    def owning_system_url(self):
        return self._resolve(self.cfg["owning_system_url"])

    @property
    def trusted_portal(self):
        return self._resolve(self.cfg["trusted_portal"] or self.cfg["owning_system_url"])

    def short_lived_validity(self):
        v = self.cfg["short_lived_validity"]
        if v is None:
            v = max(1, -(-int(self.cfg["ttl"]) // 60))
        return v

    # -- classification ----------------------------------------------------------
    def classify(self, path):
        if path.startswith("/__"):
            return "admin"
        pp, sp = self.cfg["portal_path"], self.cfg["server_path"]
        if self.has_server and (path == sp or path.startswith(sp + "/")):
            rest = path[len(sp):]
            if rest in ("/rest/info", "/rest/info/"):
                return "server_info"
            if rest.rstrip("/") in ("/tokens", "/tokens/generateToken"):
                return "server_generate_token"
            if rest == "/rest/services" or rest == "/rest/services/":
                return "catalog"
            printing_kind = printing.classify(unquote(rest))
            if printing_kind:
                return printing_kind
            if rest.startswith("/rest/services/"):
                low = rest.lower()
                if low.endswith("/upload"):
                    return "upload"
                if "/mapserver/tile/" in low:
                    return "tile"
                if low.endswith("/query"):
                    return "query"
                return "service"
        if self.has_portal and (path == pp or path.startswith(pp + "/")):
            rest = path[len(pp):]
            for pre in ("/sharing/rest", "/sharing"):
                if rest.startswith(pre + "/") or rest == pre:
                    rest2 = rest[len(pre):].rstrip("/")
                    table = {
                        "/info": "portal_info",
                        "": "portal_root",
                        "/generateToken": "portal_generate_token",
                        "/oauth2/token": "oauth_token",
                        "/oauth2/authorize": "oauth_authorize",
                        "/oauth2/revokeToken": "oauth_revoke",
                        "/oauth2/approval": "oauth_approval",
                        "/oauth2/signin": "oauth_signin",
                        "/portals/self": "portal_self",
                        "/community/self": "community_self",
                    }
                    if rest2 in table:
                        return table[rest2]
                    return "portal_other"
        if path.startswith("/idp/"):
            return "idp_login"
        if path.rstrip("/").endswith(("/sharing/rest/oauth2/signin", "/sharing/oauth2/signin")):
            return "oauth_signin"           # the sign-in page, also where a server-only instance points to

        return "not_found"

    def _reported_ms(self, t):
        """A moment as the server reports it: on its own clock, clock_skew seconds off the real one (tokens
        are still checked against the real time: only what the server says is skewed)."""
        return _ms(t + float(self.cfg.get("clock_skew") or 0))

    # -- stats helpers ----------------------------------------------------------
    def _token_call(self, endpoint, kind, ok, reason=None):
        s = self.st.stats
        with s.lock:
            s.token_requests.append({"t": _now(), "endpoint": endpoint, "kind": kind,
                                     "ok": ok, "reason": reason,
                                     "traceparent": getattr(_request_context, "traceparent", None)})
            del s.token_requests[:-1000]
            if ok:
                s.tokens_issued[kind] = s.tokens_issued.get(kind, 0) + 1
            else:
                s.token_failures[reason] = s.token_failures.get(reason, 0) + 1

    def _log(self, h, req, **kw):
        """Record the request in /__requests when its response is sent."""
        s = self.st.stats
        entry = {"t": _now(), "method": h.command, "path": req.path, "kind": req.kind,
                 "referer": h.headers.get("Referer"), "client": h.client_address[0], "body_size": req.body_size,
                 "status": None, "traceparent": h.headers.get("traceparent")}
        entry.update(kw)

        def commit(status, sent_sha256=None, encoding=None):
            entry["status"] = status
            entry["sent_sha256"] = sent_sha256
            entry["content_encoding"] = encoding
            with s.lock:
                s.log.append(entry)
                del s.log[:-500]
        h._pending_log = commit

    # -- token service outage ----------------------------------------------------
    def _service_down(self, h, req, endpoint, kind):
        """If the token service is switched off, answer and return True."""
        with self.st.lock:
            ts = self.st.token_service
            mode = ts["mode"]
            if mode == "ok":
                return False
            if ts["remaining"] is not None:
                ts["remaining"] -= 1
                if ts["remaining"] <= 0:
                    ts["mode"], ts["remaining"] = "ok", None
            status, seconds = ts["status"], ts["seconds"]
        self._token_call(endpoint, kind, False, "service_down")
        if mode == "hang":
            time.sleep(seconds)
        if mode == "reset":
            h.close_connection = True
            try:
                h.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return True
        if mode == "garbage":
            h.send_bytes(200, b'{"token": "abc", "expires": ', "application/json")
            return True
        if mode == "error":
            self._json(h, req, {"error": {"code": 500, "message": "Unable to generate token.",
                                          "details": ["Token service is unavailable."]}})
            return True
        h.send_html(status, "<html><head><title>%d Service Unavailable</title></head><body>"
                            "<h1>Service Unavailable</h1><p>The token service is not "
                            "available.</p></body></html>" % status)
        return True

    def _json(self, h, req, obj, status=200, headers=()):
        portal = req.kind.startswith(("portal", "oauth", "community"))
        h.send_json(obj, req, status, headers, portal=portal)

    # -- web tier ----------------------------------------------------------------
    def _signin_location(self, original):
        """Where the web tier in front of the server sends a client without a valid token."""
        mode = self.cfg["signin_redirect"]
        portal = (self.owning_system_url or self.portal_url).rstrip("/")
        back = quote(original, safe="")
        if mode == "portal":
            return (portal + "/sharing/oauth2/authorize?client_id=arcgisonline&response_type=token"
                    "&expiration=20160&redirect_uri=" + back)
        if mode == "signin":
            return portal + "/sharing/rest/oauth2/signin?returnUrl=" + back
        if mode == "saml":
            authn = ('<samlp:AuthnRequest xmlns:samlp="urn:oasis:names:tc:SAML:2.0:protocol" ID="_%s" '
                     'Version="2.0" AssertionConsumerServiceURL="%s/sharing/rest/oauth2/saml/signin"/>'
                     % (secrets.token_hex(8), portal))
            raw = zlib.compressobj(9, zlib.DEFLATED, -15)
            packed = raw.compress(authn.encode()) + raw.flush()
            return (self.base_url + "/idp/adfs/ls/?SAMLRequest=" + quote(base64.b64encode(packed).decode(), safe="")
                    + "&RelayState=" + back)
        return self.base_url + "/idp/login?returnUrl=" + back        # "idp": an IdP known only by its URL

    def _signin_redirect(self, h, req, code, reason, logkw):
        loc = self._signin_location(self.base_url + h.path)
        self._log(h, req, outcome="302", reason=reason, form="signin_redirect", **(logkw or {}))
        with self.st.stats.lock:
            self.st.stats.signin_redirects += 1
        page = ('<html><head><title>Object moved</title></head><body><h2>Object moved to '
                '<a href="%s">here</a>.</h2></body></html>' % html.escape(loc))
        h.send_bytes(302, page.encode(), "text/html;charset=utf-8", [("Location", loc), (REASON_HEADER, reason)],
                     reason="Found")

    def r_oauth_signin(self, h, req):
        self.r_idp_login(h, req)

    def r_idp_login(self, h, req):
        """The login page a browser would fill in: what a GIS client must never get instead of data."""
        h.send_html(200, "<html><head><title>Sign In</title></head><body><form method=\"post\">"
                         "<input name=\"username\"><input name=\"password\" type=\"password\">"
                         "<button>Sign In</button></form></body></html>")

    # -- token issuing -----------------------------------------------------------
    def _lifetime(self, expiration_minutes, cap=None):
        cap = self.cfg["ttl"] if cap is None else cap
        try:
            m = float(expiration_minutes)
            if m > 0:
                return min(cap, m * 60.0)
        except (TypeError, ValueError):
            pass
        return cap

    def _issue(self, kind, username, client_id, lifetime, audience, client=None,
               referer=None, ip=None, refresh=None, revocable=False):
        now = _now()
        t = Token(_new_token(), kind, username, client_id, now, now + lifetime, audience,
                  client, referer, ip, refresh, revocable)
        with self.st.lock:
            self.st.tokens[t.value] = t
        return t

    def _binding(self, h, params):
        """(client, referer, ip) for generateToken, or an error detail string."""
        client = (params.get("client") or "").strip().lower()
        referer = params.get("referer") or None
        if client in ("", "requestip"):
            if not client and referer:
                return "referer", referer, None
            return "requestip", None, h.client_address[0]
        if client in ("referer", "http referer"):
            if not referer:
                return "'referer' must be specified."
            return "referer", referer, None
        if client == "ip":
            ip = params.get("ip")
            if not ip:
                return "'ip' must be specified."
            return "ip", None, ip
        return "Invalid client type '%s'." % params.get("client")

    # -- API key credentials -----------------------------------------------------------
    def create_api_key(self, item, slot, ttl=365 * 86400.0, referrers=None, username=None, expires=None):
        """(Re)generate the key in `slot` (1 or 2) of API key credentials `item` (created on first use; `referrers`
        then sets its httpReferrers, later None keeps them). The slot's previous key stops working, as when a key is
        regenerated in the portal. `expires`: epoch seconds (else now + ttl). Returns the APIKey."""
        slot = int(slot)
        if slot not in (1, 2):
            raise ValueError("slot must be 1 or 2")
        with self.st.lock:
            it = self.st.api_items.get(item)
            if it is None:
                it = APIKeyItem(item, username or self.cfg["default_user"], referrers)
                self.st.api_items[item] = it
            elif referrers is not None:
                it.referrers = list(referrers)
            old = it.slots.get(slot)
            if old is not None:
                old.invalidated = True
            k = APIKey(_new_api_key(slot), item, slot,
                       float(expires) if expires is not None else _now() + float(ttl))
            it.slots[slot] = k
            self.st.api_keys[k.value] = k
        return k

    def invalidate_api_key(self, item, slot):
        """Invalidate the key in `slot` of `item` (the portal's "invalidate API key"). True if there was one."""
        with self.st.lock:
            it = self.st.api_items.get(item)
            k = it.slots.get(int(slot)) if it else None
            if k is None or k.invalidated:
                return False
            k.invalidated = True
            return True

    def set_api_key_referrers(self, item, referrers):
        with self.st.lock:
            it = self.st.api_items.get(item)
            if it is None:
                return False
            it.referrers = list(referrers or [])
            return True

    def check_api_key(self, h, value):
        """None when `value` is no API key of this instance; else (ok, reason, username, slot)."""
        with self.st.lock:
            k = self.st.api_keys.get(value)
            if k is None:
                return None
            it = self.st.api_items[k.item]
            referrers = list(it.referrers)
            username = it.username
        if k.invalidated:
            return False, "revoked", None, k.slot
        if _now() >= k.expires:
            return False, "expired", None, k.slot
        if referrers and self.cfg["enforce_referer"] and not _referrer_allows(referrers, h.headers.get("Referer")):
            return False, "referer_mismatch", None, k.slot
        return True, None, username, k.slot

    # -- token validation ----------------------------------------------------------
    def _check_binding(self, h, tok_client, tok_referer, tok_ip):
        if tok_client == "referer" and self.cfg["enforce_referer"]:
            ref = h.headers.get("Referer") or ""
            if not (ref == tok_referer or ref.startswith(tok_referer)):
                return "referer_mismatch"
        if tok_client in ("requestip", "ip") and self.cfg["enforce_ip"]:
            if tok_ip and tok_ip != h.client_address[0]:
                return "ip_mismatch"
        return None

    def _local_check(self, value, for_portal):
        """Validate against this instance's store: (ok, reason, Token|None)."""
        with self.st.lock:
            t = self.st.tokens.get(value)
            epoch = self.st.expire_epoch
        if t is None:
            return False, "unknown_token", None
        if t.revoked:
            return False, "revoked", t
        if _now() >= t.expires or t.issued <= epoch:
            return False, "expired", t
        if for_portal:
            if t.audience is not None:
                return False, "wrong_audience", t
        return True, None, t

    def validate_for_portal(self, h, value):
        ok, reason, t = self._local_check(value, True)
        if ok:
            reason = self._check_binding(h, t.client, t.referer, t.ip)
            ok = reason is None
        return ok, reason, t

    def validate_for_server(self, h, value):
        """(ok, reason, username) for a token presented to this ArcGIS Server."""
        root = norm_root(self.server_root)
        ok, reason, t = self._local_check(value, False)
        if t is not None:
            if not ok:
                return False, reason, None
            if t.audience is None:
                # a portal token presented directly to a server (role=both only)
                portal_ok = (self.has_portal and self.cfg["accept_portal_tokens"]
                             and norm_root(self.trusted_portal or "") == norm_root(self.portal_url))
                if not portal_ok:
                    return False, "portal_token_not_accepted", None
            elif norm_root(t.audience) != root:
                return False, "wrong_audience", None
            reason = self._check_binding(h, t.client, t.referer, t.ip)
            return reason is None, reason, t.username
        portal = self.trusted_portal
        if not portal or (self.has_portal and norm_root(portal) == norm_root(self.portal_url)):
            return False, "unknown_token", None
        info = self._backchannel_validate(portal, value)
        if info is None:
            return False, "portal_unreachable", None
        if not info.get("valid"):
            return False, info.get("reason") or "invalid", None
        aud = info.get("audience")
        if aud is None:
            if not self.cfg["accept_portal_tokens"]:
                return False, "portal_token_not_accepted", None
        elif norm_root(aud) != root:
            return False, "wrong_audience", None
        with self.st.lock:
            epoch = self.st.expire_epoch
        if info.get("issued", 0) / 1000.0 <= epoch:
            return False, "expired", None
        reason = self._check_binding(h, info.get("client"), info.get("referer"), info.get("ip"))
        return reason is None, reason, info.get("username")

    def _open(self, url, data=None, timeout=5.0):
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                             urllib.request.HTTPSHandler(context=ctx))
        r = urllib.request.Request(url, data=data, headers={INTERNAL_HEADER: "1"})
        with opener.open(r, timeout=timeout) as resp:
            return json.loads(resp.read().decode("utf-8"))

    def _backchannel_validate(self, portal, value):
        try:
            return self._open(self._portal_backchannel_base(portal) + "/__admin/validate",
                              urlencode({"token": value}).encode())
        except (OSError, ValueError, urllib.error.URLError):
            return None

    def _portal_backchannel_base(self, portal):
        s = urlsplit(portal)
        return "%s://%s" % (s.scheme, s.netloc)

    # -- token extraction ------------------------------------------------------------
    def extract_tokens(self, h, req):
        sources = []
        for k, v in req.query:
            if k == "token" and v:
                sources.append(("query", v))
        if h.command != "GET":
            for k, v in req.form:
                if k == "token" and v:
                    sources.append(("form", v))
        if req.multipart is not None:
            for v in req.multipart.fields.get("token", []):
                if v:
                    sources.append(("multipart", v))
        for hdr, src in (("X-Esri-Authorization", "x-esri-authorization"),
                         ("Authorization", "authorization")):
            for v in h.headers.get_all(hdr) or []:
                v = v.strip()
                if v.lower().startswith("bearer "):
                    t = v[7:].strip()
                    if t:
                        sources.append((src, t))
                elif hdr == "X-Esri-Authorization" and v:
                    sources.append((src, v))
        return sources

    # -- rejection forms -----------------------------------------------------------
    def _error_form(self, req):
        form = req.params.get("__err") or self.st.error_form
        if not form or form == "auto":
            form = "html" if req.kind == "tile" else "json"
        return form

    def reject(self, h, req, code, reason, portal=False, logkw=None):
        """Answer a token failure (code 498/499) in the selected form."""
        if code in (498, 499) and not portal and self.cfg.get("signin_redirect") \
                and req.kind in ("query", "tile", "service", "upload"):
            return self._signin_redirect(h, req, code, reason, logkw)
        form = self._error_form(req)
        hdrs = [(REASON_HEADER, reason)]
        cb = req.params.get("callback", "")
        if form == "403":
            code = 403
        elif form == "403-body" and code != 403:
            form = "json"                       # token errors look as usual; only "no permission" differs
        label = form if not cb else "jsonp"
        self._log(h, req, outcome=str(code), reason=reason, form=label, **(logkw or {}))
        s = self.st.stats
        with s.lock:
            if reason == "double_token":
                s.double_token += 1
            elif code == 498:
                s.rejected_498 += 1
            elif code == 499:
                s.rejected_499 += 1
            else:
                s.rejected_403 += 1
        body = {498: ERR_498, 499: ERR_499, 403: ERR_403}[code]
        if cb or form == "jsonp":
            if not (cb and _CALLBACK_RE.match(cb)):
                cb = "callback"
            h.send_bytes(200, ("%s(%s);" % (cb, _dumps(body))).encode(), JSONP_CTYPE, hdrs)
            return form if form == "jsonp" else form + "+jsonp"
        ctype = PORTAL_JSON_CTYPE if portal else self.cfg["server_json_ctype"]
        if form == "403":
            h.send_bytes(403, _dumps(body).encode(), ctype, hdrs)
        elif form == "403-body":
            h.send_bytes(200, _dumps(body).encode(), ctype, hdrs)
        elif form == "json-spaced":
            h.send_bytes(200, _SPACED[code].encode(), ctype, hdrs)
        elif form == "status":
            h.send_bytes(code, _dumps(body).encode(), ctype, hdrs,
                         reason=_HTML_ERR[code])
        elif form == "unwrapped":
            h.send_bytes(200, _dumps(_UNWRAPPED[code]).encode(), ctype, hdrs)
        elif form == "html":
            title = _HTML_ERR[code]
            h.send_html(200, "<html><head><title>Error: %s</title></head><body>"
                             "<h2>Error: %s</h2><p>Error code %d</p></body></html>"
                        % (title, title, code), hdrs)
        else:
            h.send_bytes(200, _dumps(body).encode(), ctype, hdrs)
        return form

    def authorize_request(self, h, req, secured=True, portal=False):
        """Token gate.  Returns (True, username, source) or answers and returns
        (False, None, None)."""
        sources = self.extract_tokens(h, req)
        s = self.st.stats
        distinct = sorted(set(v for _, v in sources))
        with s.lock:
            for src, _ in sources:
                s.token_sources[src] = s.token_sources.get(src, 0) + 1
            if len(sources) > 1 and len(distinct) == 1:
                s.same_token_twice += 1
        srcnames = [src for src, _ in sources]
        logkw = {"token_sources": srcnames, "token_count": len(sources),
                 "distinct_tokens": len(distinct), "double_token": len(distinct) > 1,
                 "token": distinct[0] if len(distinct) == 1 else (distinct or None)}
        if req.params.get("__err") == "403" and secured:
            self.reject(h, req, 403, "forbidden", portal, logkw)
            return False, None, None
        if len(distinct) > 1:
            self.reject(h, req, 498, "double_token", portal, logkw)
            return False, None, None
        if self.cfg.get("reject_all") and secured and distinct:
            # test switch: a server that rejects every token (misconfigured referer, clock skew, ...)
            self.reject(h, req, 498, "reject_all", portal, logkw)
            return False, None, None
        if not distinct:
            if not secured:
                self._log(h, req, outcome="ok", reason="anonymous", **logkw)
                return True, None, None
            self.reject(h, req, 499, "missing_token", portal, logkw)
            return False, None, None
        value = distinct[0]
        key = self.check_api_key(h, value)
        if key is not None:
            # An API key works on the portal and the services of the instance that issued it (as keys of ArcGIS
            # Online work on its hosted services); its slot is in the request log.
            ok, reason, user, logkw["api_key_slot"] = key
        elif portal:
            ok, reason, t = self.validate_for_portal(h, value)
            user = t.username if t is not None else None
        else:
            ok, reason, user = self.validate_for_server(h, value)
        if not ok:
            self.reject(h, req, 498, reason, portal, logkw)
            return False, None, None
        if secured and self._error_form(req) == "403-body":
            self.reject(h, req, 403, "no_permission", portal, logkw)
            return False, None, None
        with s.lock:
            s.accepted += 1
        self._log(h, req, outcome="ok", reason=None, user=user, **logkw)
        return True, user, srcnames[0]

    # -- routing -----------------------------------------------------------------
    def route(self, h, req):
        k = req.kind
        # The W3C trace context the request came with (recorded with token calls and in /__requests).
        _request_context.traceparent = h.headers.get("traceparent")
        if k == "admin":
            return self.admin(h, req)
        handler = getattr(self, "r_" + k, None)
        if handler is None:
            self._json(h, req, {"error": {"code": 404, "message": "Not Found", "details": []}},
                       status=404)
            return
        handler(h, req)

    # ---- server -----------------------------------------------------------------
    def r_server_info(self, h, req):
        info = {"currentVersion": CURRENT_VERSION, "fullVersion": FULL_VERSION,
                "soapUrl": self.server_root + "/services", "secureSoapUrl": None}
        owning = self.owning_system_url
        if owning:
            info["owningSystemUrl"] = owning
            tsu = owning.rstrip("/") + "/sharing/rest/generateToken"
        elif self.cfg["legacy_tokens_url"]:
            tsu = self.server_root + "/tokens/"
        else:
            tsu = self.server_root + "/tokens/generateToken"
        info["authInfo"] = {"isTokenBasedSecurity": True, "tokenServicesUrl": tsu,
                            "shortLivedTokenValidity": self.short_lived_validity()}
        self._json(h, req, info)

    def _creds_in_query(self, req):
        keys = {k for k, _ in req.query}
        return "username" in keys or "password" in keys

    def r_server_generate_token(self, h, req):
        ep = "server.generateToken"
        kind = "generate_password"
        if h.command == "GET" or self._creds_in_query(req):
            self._token_call(ep, kind, False, "method_not_allowed")
            detail = ("Generate Token request should not contain username and password in "
                      "the query string." if self._creds_in_query(req)
                      else "GET is not supported for this operation. Use POST.")
            self._json(h, req, {"error": {"code": 405, "message": "Method not supported",
                                          "details": detail}})
            return
        if self._service_down(h, req, ep, kind):
            return
        self._generate_password(h, req, ep, audience=self.server_root)

    def _generate_password(self, h, req, ep, audience):
        if self.st.cfg.get("token_delay"):
            time.sleep(self.st.cfg["token_delay"])
        p = req.params
        user, pw = p.get("username", ""), p.get("password", "")
        missing = [("'%s' must be specified." % f) for f in ("username", "password")
                   if not p.get(f)]
        if missing:
            self._token_call(ep, "generate_password", False, "missing_credentials")
            self._json(h, req, {"error": {"code": 400, "message": "Unable to generate token.",
                                          "details": missing}})
            return
        with self.st.lock:
            good = self.st.users.get(user) == pw
        if not good:
            self._token_call(ep, "generate_password", False, "bad_credentials")
            self._json(h, req, {"error": {"code": 400, "message": "Unable to generate token.",
                                          "details": ["Invalid username or password."]}})
            return
        b = self._binding(h, p)
        if isinstance(b, str):
            self._token_call(ep, "generate_password", False, "bad_client")
            self._json(h, req, {"error": {"code": 400, "message": "Unable to generate token.",
                                          "details": [b]}})
            return
        t = self._issue("generate_password", user, None, self._lifetime(p.get("expiration")),
                        audience, *b)
        self._token_call(ep, "generate_password", True)
        self._json(h, req, {"token": t.value, "expires": self._reported_ms(t.expires),
                            "ssl": self.cfg["ssl"]})

    def r_catalog(self, h, req):
        ok, _, _ = self.authorize_request(h, req, secured=False)
        if not ok:
            return
        self._json(h, req, {"currentVersion": CURRENT_VERSION, "folders": ["Public", "Secure"],
                            "services": []})

    def _service_parts(self, path):
        rest = path[len(self.cfg["server_path"]) + len("/rest/services/"):]
        segs = [s for s in rest.split("/") if s]
        for i, s in enumerate(segs):
            if s.lower().endswith("server"):
                if i == 0:
                    return [], "", s, segs[1:]
                return segs[:i - 1], segs[i - 1], s, segs[i + 1:]
        return segs, "", "", []

    def _secured(self, req):
        folder, _, _, _ = self._service_parts(req.path)
        return not (folder and folder[0].lower() == "public")

    def _serve_secured(self, h, req, producer):
        folder, _, _, _ = self._service_parts(req.path)
        if folder and folder[0].lower() == "moved":
            # An ordinary redirect: the service moved to the Secure folder (before any token check, as a web
            # server's rewrite rule would answer).
            sp = self.cfg["server_path"] + "/rest/services/"
            loc = self.base_url + sp + "Secure/" + req.path[len(sp) + len(folder[0]) + 1:]
            query = urlsplit(h.path).query
            if query:
                loc += "?" + query
            with self.st.stats.lock:
                self.st.stats.moved_redirects += 1
            self._log(h, req, outcome="301", reason="moved")
            return h.send_bytes(301, b"<html><body>Moved Permanently</body></html>", "text/html",
                                [("Location", loc)], reason="Moved Permanently")
        ok, user, src = self.authorize_request(h, req, secured=self._secured(req))
        if not ok:
            return
        producer(user, src)

    def r_query(self, h, req):
        def produce(user, src):
            p = req.params
            if p.get("returnCountOnly", "").lower() == "true":
                return self._json(h, req, {"count": len(ESRI_QUERY_DOC["features"])})
            if p.get("returnIdsOnly", "").lower() == "true":
                return self._json(h, req, {"objectIdFieldName": "OBJECTID",
                                           "objectIds": [1, 2, 3]})
            if p.get("f", "").lower() == "geojson":
                fc = {"type": "FeatureCollection", "features": [
                    {"type": "Feature", "id": f["attributes"]["OBJECTID"],
                     "geometry": {"type": "Point",
                                  "coordinates": [f["geometry"]["x"], f["geometry"]["y"]]},
                     "properties": f["attributes"]} for f in ESRI_QUERY_DOC["features"]]}
                return h.send_bytes(200, _dumps(fc).encode(), "application/geo+json")
            self._json(h, req, ESRI_QUERY_DOC)
        self._serve_secured(h, req, produce)

    def r_tile(self, h, req):
        def produce(user, src):
            nums = [s for s in req.path.split("/") if s.isdigit()][-3:]
            z, y, x = (int(n) for n in nums) if len(nums) == 3 else (0, 0, 0)
            h.send_bytes(200, tile_png(z, y, x), "image/png")
        self._serve_secured(h, req, produce)

    def r_service(self, h, req):
        def produce(user, src):
            folder, name, stype, tail = self._service_parts(req.path)
            if stype.lower() == "featureserver" and not tail:
                return self._json(h, req, {
                    "currentVersion": CURRENT_VERSION, "serviceDescription": "",
                    "hasVersionedData": False, "maxRecordCount": 1000,
                    "capabilities": "Query", "spatialReference": ESRI_QUERY_DOC["spatialReference"],
                    "layers": [{"id": 0, "name": name or "Points",
                                "geometryType": "esriGeometryPoint"}], "tables": []})
            if stype.lower() == "featureserver" and len(tail) == 1 and tail[0].isdigit():
                return self._json(h, req, {
                    "currentVersion": CURRENT_VERSION, "id": int(tail[0]),
                    "name": name or "Points", "type": "Feature Layer",
                    "geometryType": "esriGeometryPoint", "objectIdField": "OBJECTID",
                    "fields": ESRI_FIELDS, "maxRecordCount": 1000, "capabilities": "Query",
                    "supportsPagination": True,
                    "advancedQueryCapabilities": {"supportsPagination": True},
                    "extent": {"xmin": -180, "ymin": -90, "xmax": 180, "ymax": 90,
                               "spatialReference": ESRI_QUERY_DOC["spatialReference"]}})
            if stype.lower() == "mapserver" and not tail:
                return self._json(h, req, {
                    "currentVersion": CURRENT_VERSION, "mapName": name or "Map",
                    "singleFusedMapCache": True, "spatialReference": {"wkid": 102100,
                                                                       "latestWkid": 3857},
                    "tileInfo": {"rows": 256, "cols": 256, "dpi": 96, "format": "PNG",
                                 "origin": {"x": -20037508.342787, "y": 20037508.342787},
                                 "spatialReference": {"wkid": 102100, "latestWkid": 3857},
                                 "lods": [{"level": 0, "resolution": 156543.033928,
                                           "scale": 591657527.591555}]}})
            self._json(h, req, {"error": {"code": 400, "message": "Invalid URL",
                                          "details": ["Invalid URL"]}})
        self._serve_secured(h, req, produce)

    def r_upload(self, h, req):
        def produce(user, src):
            with self.st.stats.lock:
                self.st.stats.upload_bytes += req.body_size
            doc = {"size": req.body_size, "sha256": req.body_sha, "token_seen": src is not None,
                   "token_source": src, "user": user,
                   "content_type": h.headers.get("Content-Type"),
                   "chunked": "chunked" in (h.headers.get("Transfer-Encoding") or "").lower()}
            if req.multipart is not None:
                doc["parts"] = req.multipart.parts
                if req.multipart.error:
                    doc["multipart_error"] = req.multipart.error
            self._json(h, req, doc)
        self._serve_secured(h, req, produce)

    # ---- portal -----------------------------------------------------------------
    def r_portal_root(self, h, req):
        self._json(h, req, {"currentVersion": str(CURRENT_VERSION)})

    def r_portal_info(self, h, req):
        # Public on real portals: clients call it without a token for discovery.
        self._json(h, req, {
            "owningSystemUrl": self.portal_url,
            "authInfo": {"tokenServicesUrl": self.portal_url + "/sharing/rest/generateToken",
                         "isTokenBasedSecurity": True}})

    def r_portal_self(self, h, req):
        ok, user, _ = self.authorize_request(h, req, secured=True, portal=True)
        if not ok:
            return
        self._json(h, req, {
            "id": "0123456789ABCDEF", "name": "authproxy e2e portal", "isPortal": True,
            "portalName": "ArcGIS Enterprise", "currentVersion": str(CURRENT_VERSION),
            "portalHostname": urlsplit(self.portal_url).netloc + self.cfg["portal_path"],
            "allSSL": self.cfg["ssl"], "supportsOAuth": True,
            "authorizedCrossOriginDomains": [],
            "user": {"username": user} if user else None})

    def r_community_self(self, h, req):
        ok, user, _ = self.authorize_request(h, req, secured=True, portal=True)
        if not ok:
            return
        self._json(h, req, {"username": user, "fullName": user, "role": "org_user"})

    def r_portal_other(self, h, req):
        self._json(h, req, {"error": {"code": 400, "messageCode": "CONT_0001",
                                      "message": "Invalid URL", "details": []}})

    def _is_federated(self, server_url):
        root = norm_root(server_url)
        if not root:
            return None
        with self.st.lock:
            if root in self.st.federated or root in self.st.probe_ok:
                return root
        if self.has_server and root == norm_root(self.server_root) and \
                norm_root(self.owning_system_url or "") == norm_root(self.portal_url):
            return root
        if not self.cfg["auto_federate"]:
            return None
        try:
            info = self._open(root + "/rest/info?f=json")
        except (OSError, ValueError, urllib.error.URLError):
            return None
        if norm_root(info.get("owningSystemUrl") or "") == norm_root(self.portal_url):
            with self.st.lock:
                self.st.probe_ok.add(root)
            return root
        return None

    def r_portal_generate_token(self, h, req):
        ep = "portal.generateToken"
        p = req.params
        exchange = bool(p.get("serverUrl")) and not p.get("username")
        kind = "generate_federated" if exchange else "generate_password"
        if self._creds_in_query(req):
            self._token_call(ep, kind, False, "method_not_allowed")
            self._json(h, req, {"error": {"code": 400, "message": "Unable to generate token.",
                                          "details": ["POST request should not contain username "
                                                      "and password in the query string."]}})
            return
        if h.command == "GET":
            self._token_call(ep, kind, False, "method_not_allowed")
            self._json(h, req, {"error": {"code": 405, "message": "Method not supported",
                                          "details": ["GET is not supported for this "
                                                      "operation. Use POST."]}})
            return
        if self._service_down(h, req, ep, kind):
            return
        server_url = p.get("serverUrl")
        audience = None
        if server_url:
            audience = self._is_federated(server_url)
            if audience is None:
                self._token_call(ep, kind, False, "not_federated")
                self._json(h, req, {"error": {"code": 400, "message": "Unable to generate token.",
                                              "details": ["'serverUrl' is not a server "
                                                          "federated with this portal."]}})
                return
        if not exchange:
            self._generate_password(h, req, ep, audience)
            return
        # federation exchange: token (form/query param, or header) + serverUrl
        sources = [v for src, v in self.extract_tokens(h, req)]
        value = p.get("token") or (sources[0] if sources else "")
        if not value:
            self._token_call(ep, kind, False, "missing_token")
            self._json(h, req, ERR_499)
            return
        # The portal token is used here like anywhere: a referer-bound one needs its Referer on this request too.
        ok, reason, t = self.validate_for_portal(h, value)
        if not ok:
            self._token_call(ep, kind, False, "invalid_portal_token")
            self._json(h, req, ERR_498, headers=[(REASON_HEADER, reason)])
            return
        if p.get("client"):
            b = self._binding(h, p)
            if isinstance(b, str):
                self._token_call(ep, kind, False, "bad_client")
                self._json(h, req, {"error": {"code": 400, "message": "Unable to generate token.",
                                              "details": [b]}})
                return
        else:
            b = (t.client, t.referer, t.ip)
        nt = self._issue("generate_federated", t.username or t.client_id, t.client_id,
                         self._lifetime(p.get("expiration")), audience, *b)
        self._token_call(ep, kind, True)
        self._json(h, req, {"token": nt.value, "expires": self._reported_ms(nt.expires),
                            "ssl": self.cfg["ssl"]})

    # ---- OAuth 2.0 ----------------------------------------------------------------
    def _oauth_error(self, h, req, error, desc, reason, kind):
        self._token_call("oauth2.token" if req.kind == "oauth_token" else req.kind,
                         kind, False, reason)
        self._json(h, req, {"error": {"code": 400, "error": error, "error_description": desc,
                                      "message": desc, "details": []}},
                   status=self.cfg["oauth_error_status"])

    def r_oauth_token(self, h, req):
        p = req.params
        grant = p.get("grant_type", "")
        kind = {"client_credentials": "oauth_client_credentials",
                "authorization_code": "oauth_authorization_code",
                "refresh_token": "oauth_refresh",
                "exchange_refresh_token": "oauth_exchange_refresh"}.get(grant, "oauth_" + (grant or "none"))
        if self._service_down(h, req, "oauth2.token", kind):
            return
        cid = p.get("client_id", "")
        with self.st.lock:
            secret = self.st.apps.get(cid)
        if not cid or secret is None:
            return self._oauth_error(h, req, "invalid_client_id", "Invalid client_id",
                                     "invalid_client", kind)
        if p.get("client_secret") and p.get("client_secret") != secret:
            return self._oauth_error(h, req, "invalid_client", "Invalid client_secret",
                                     "invalid_client_secret", kind)
        ttl_cap = self.cfg["ttl"]
        if grant == "client_credentials":
            if p.get("client_secret") != secret:
                return self._oauth_error(h, req, "invalid_client", "Invalid client_secret",
                                         "invalid_client_secret", kind)
            t = self._issue(kind, None, cid, self._lifetime(p.get("expiration"), ttl_cap), None,
                            revocable=self.cfg["revoke_app_tokens"])
            self._token_call("oauth2.token", kind, True)
            return self._json(h, req, {"access_token": t.value,
                                       "expires_in": int(round(t.expires - t.issued))})
        if grant == "authorization_code":
            code = p.get("code", "")
            with self.st.lock:
                c = self.st.codes.get(code)
                valid = (c is not None and not c.used and c.client_id == cid
                         and _now() - c.created < self.cfg["code_ttl"])
                if valid:
                    c.used = True
            if not valid:
                return self._oauth_error(h, req, "invalid_request", "Invalid authorization code",
                                         "invalid_code", kind)
            if not p.get("redirect_uri"):
                return self._oauth_error(h, req, "invalid_request", "redirect_uri not specified",
                                         "invalid_redirect_uri", kind)
            if p.get("redirect_uri") != c.redirect_uri:
                return self._oauth_error(h, req, "invalid_request", "Invalid redirect_uri",
                                         "invalid_redirect_uri", kind)
            if c.challenge:
                ver = p.get("code_verifier", "")
                if not ver:
                    return self._oauth_error(h, req, "invalid_request",
                                             "code_verifier not specified", "pkce", kind)
                calc = pkce_challenge(ver) if c.method == "S256" else ver
                if calc != c.challenge:
                    return self._oauth_error(h, req, "invalid_request", "Invalid code_verifier",
                                             "pkce", kind)
            rt = self._new_refresh(cid, c.username, c.refresh_minutes, c.redirect_uri)
            t = self._issue(kind, c.username, cid, ttl_cap, None, refresh=rt.value,
                            revocable=True)
            self._token_call("oauth2.token", kind, True)
            return self._json(h, req, self._user_token_doc(t, rt))
        if grant in ("refresh_token", "exchange_refresh_token"):
            rv = p.get("refresh_token", "")
            with self.st.lock:
                rt = self.st.refresh.get(rv)
                epoch = self.st.refresh_expire_epoch
            if grant == "exchange_refresh_token" and rt is not None and rt.exchanged:
                with self.st.stats.lock:
                    self.st.stats.refresh_exchange_repeats += 1
            if (rt is None or rt.revoked or rt.client_id != cid or rt.issued <= epoch
                    or (rt.expires is not None and _now() >= rt.expires)):
                return self._oauth_error(h, req, "invalid_request", "Invalid refresh_token",
                                         "invalid_refresh_token", kind)
            if grant == "refresh_token":
                t = self._issue(kind, rt.username, cid, ttl_cap, None, refresh=rt.value,
                                revocable=True)
                self._token_call("oauth2.token", kind, True)
                return self._json(h, req, self._user_token_doc(t, None))
            if not p.get("redirect_uri"):
                return self._oauth_error(h, req, "invalid_request", "redirect_uri not specified",
                                         "invalid_redirect_uri", kind)
            if rt.redirect_uri and p.get("redirect_uri") != rt.redirect_uri:
                return self._oauth_error(h, req, "invalid_request", "Invalid redirect_uri",
                                         "invalid_redirect_uri", kind)
            # A new refresh token of the full configured life (not the authorize `expiration` of the sign-in).
            nrt = self._new_refresh(cid, rt.username, None, rt.redirect_uri)
            with self.st.lock:
                rt.exchanged += 1
                if self.cfg["exchange_revokes_old"]:
                    rt.revoked = True
            with self.st.stats.lock:
                self.st.stats.refresh_exchanges += 1
            t = self._issue(kind, rt.username, cid, ttl_cap, None, refresh=nrt.value,
                            revocable=True)
            self._token_call("oauth2.token", kind, True)
            return self._json(h, req, self._user_token_doc(t, nrt))
        return self._oauth_error(h, req, "unsupported_grant_type",
                                 "Unsupported grant_type" if grant else "grant_type not specified",
                                 "unsupported_grant_type", kind)

    def _new_refresh(self, cid, username, minutes, redirect_uri):
        now = _now()
        life = self.cfg["refresh_ttl"]
        try:
            if minutes is not None and float(minutes) > 0:
                life = min(life, float(minutes) * 60.0)
            elif minutes is not None and float(minutes) == -1:
                life = None
        except ValueError:
            pass
        rt = RefreshToken(_new_token(), cid, username, now,
                          None if life is None else now + life, redirect_uri)
        with self.st.lock:
            self.st.refresh[rt.value] = rt
        return rt

    def _user_token_doc(self, t, rt):
        doc = {"access_token": t.value, "expires_in": int(round(t.expires - t.issued)),
               "username": t.username, "ssl": self.cfg["ssl"]}
        if rt is not None:
            doc["refresh_token"] = rt.value
            doc["refresh_token_expires_in"] = (int(round(rt.expires - rt.issued))
                                               if rt.expires is not None else -1)
        return doc

    def r_oauth_authorize(self, h, req):
        p = req.params
        cid = p.get("client_id", "")
        redirect = p.get("redirect_uri", "")
        rtype = p.get("response_type", "")
        with self.st.lock:
            known = cid in self.st.apps
        if not known:
            return self._authorize_error_page(h, 400, "Invalid client_id")
        if not redirect:
            return self._authorize_error_page(h, 400, "Invalid redirect_uri")
        allowed = self.cfg["redirect_uris"]
        if allowed and redirect != OOB_REDIRECT and not any(redirect.startswith(a)
                                                            for a in allowed):
            return self._authorize_error_page(h, 400, "Invalid redirect_uri")
        state = p.get("state")
        if rtype not in ("code", "token"):
            return self._authorize_redirect(h, redirect, {
                "error": "unsupported_response_type",
                "error_description": "Invalid response_type"}, state)
        if p.get("__deny"):
            return self._authorize_redirect(h, redirect, {
                "error": "access_denied",
                "error_description": "The user denied your request."}, state)
        challenge = p.get("code_challenge") or None
        method = p.get("code_challenge_method") or ("plain" if challenge else None)
        if challenge and method not in ("S256", "plain"):
            return self._authorize_redirect(h, redirect, {
                "error": "invalid_request",
                "error_description": "Invalid code_challenge_method"}, state)
        with self.st.lock:
            users = list(self.st.users)
        username = p.get("__user") or self.cfg["default_user"] or (users[0] if users else None)
        if rtype == "token":
            t = self._issue("oauth_implicit", username, cid,
                            self._lifetime(p.get("expiration")), None, revocable=True)
            self._token_call("oauth2.authorize", "oauth_implicit", True)
            frag = {"access_token": t.value, "expires_in": int(round(t.expires - t.issued)),
                    "username": username, "ssl": "true" if self.cfg["ssl"] else "false"}
            if state is not None:
                frag["state"] = state
            h.send_bytes(302, b"", "text/html;charset=utf-8",
                         [("Location", redirect + "#" + urlencode(frag))])
            return
        code = AuthCode(secrets.token_urlsafe(24), cid, redirect, challenge, method, username,
                        p.get("expiration"))
        with self.st.lock:
            self.st.codes[code.value] = code
        if redirect == OOB_REDIRECT:
            return self._oob_page(h, code.value)
        q = {"code": code.value}
        self._authorize_redirect(h, redirect, q, state)

    def _authorize_redirect(self, h, redirect, q, state):
        if state is not None:
            q = dict(q, state=state)
        sep = "&" if "?" in redirect else "?"
        h.send_bytes(302, b"", "text/html;charset=utf-8",
                     [("Location", redirect + sep + urlencode(q, quote_via=quote))])

    def _authorize_error_page(self, h, status, msg):
        h.send_html(status, "<!DOCTYPE html><html><head><title>Error</title></head><body>"
                            "<div id=\"error\">%s</div></body></html>" % html.escape(msg))

    def _oob_page(self, h, code):
        h.send_html(200, "<!DOCTYPE html><html><head><meta charset=\"UTF-8\">"
                         "<title>SUCCESS code=%s</title></head><body>"
                         "<p>Copy this code and paste it in your application:</p>"
                         "<input type=\"text\" id=\"code\" readonly value=\"%s\">"
                         "</body></html>" % (code, code))

    def r_oauth_approval(self, h, req):
        code = req.params.get("code", "")
        with self.st.lock:
            known = code in self.st.codes
        if not known:
            return self._authorize_error_page(h, 400, "Invalid code")
        self._oob_page(h, code)

    def r_oauth_revoke(self, h, req):
        p = req.params
        with self.st.stats.lock:
            self.st.stats.revoke_calls += 1
        cid = p.get("client_id", "")
        with self.st.lock:
            known = cid in self.st.apps
        if not known:
            self._json(h, req, {"error": {"code": 400, "error": "invalid_client_id",
                                          "error_description": "Invalid client_id",
                                          "message": "Invalid client_id", "details": []}},
                       status=self.cfg["oauth_error_status"])
            return
        value = p.get("auth_token") or p.get("token") or ""
        n = 0
        with self.st.lock:
            rt = self.st.refresh.get(value)
            if rt is not None and rt.client_id == cid and not rt.revoked:
                rt.revoked = True
                n += 1
                for t in self.st.tokens.values():
                    if t.refresh == value and not t.revoked:
                        t.revoked = True
                        n += 1
            t = self.st.tokens.get(value)
            if t is not None and t.client_id == cid and t.revocable and not t.revoked:
                t.revoked = True
                n += 1
        with self.st.stats.lock:
            self.st.stats.revocations += n
            if not n:
                self.st.stats.revoke_noop += 1
        # Real portals answer success even for unknown tokens (no information leak).
        self._json(h, req, {"success": True})

    def r_not_found(self, h, req):
        h.send_bytes(404, _dumps({"error": {"code": 404, "message": "Not Found",
                                            "details": []}}).encode(),
                     "application/json", [])

    # ---- test-only endpoints -------------------------------------------------------
    def admin(self, h, req):
        p = req.params
        path = req.path.rstrip("/")
        st = self.st
        if path == "/__stats":
            return h.send_bytes(200, _dumps(st.stats.snapshot()).encode(), "application/json")
        if path == "/__stats/reset":
            with st.stats.lock:
                st.stats.reset()
            return h.send_bytes(200, b'{"reset":true}', "application/json")
        if path == "/__requests":
            with st.stats.lock:
                log = list(st.stats.log)
            return h.send_bytes(200, _dumps(log).encode(), "application/json")
        if path == "/__config":
            return h.send_bytes(200, _dumps(self.describe()).encode(), "application/json")
        if path == "/__admin/validate":
            with st.stats.lock:
                st.stats.validate_calls += 1
            ok, reason, t = self._local_check(p.get("token", ""), False)
            doc = {"valid": ok, "reason": reason}
            if t is not None:
                doc.update(t.public())
            return h.send_bytes(200, _dumps(doc).encode(), "application/json")
        if path == "/__admin/expire":
            what = p.get("what", "access")
            now = _now()
            with st.lock:
                if what in ("access", "all"):
                    st.expire_epoch = now
                if what in ("refresh", "all"):
                    st.refresh_expire_epoch = now
                    for c in st.codes.values():
                        c.used = True
            time.sleep(0.002)   # tokens issued after this call are strictly newer
            return h.send_bytes(200, _dumps({"expired": what, "at": _ms(now)}).encode(),
                                "application/json")
        if path == "/__admin/token-service":
            mode = p.get("mode", "ok")
            if mode not in ("ok", "down", "error", "reset", "hang"):
                return h.send_bytes(400, b'{"error":"bad mode"}', "application/json")
            with st.lock:
                ts = st.token_service
                ts["mode"] = mode
                ts["status"] = int(p.get("status", "503"))
                ts["seconds"] = float(p.get("seconds", "5"))
                ts["remaining"] = int(p["count"]) if p.get("count") else None
                doc = dict(ts)
            return h.send_bytes(200, _dumps(doc).encode(), "application/json")
        if path == "/__admin/password":
            user = p.get("username", "")
            if not user:
                return h.send_bytes(400, b'{"error":"username required"}', "application/json")
            with st.lock:
                if p.get("delete"):
                    st.users.pop(user, None)
                else:
                    st.users[user] = p.get("password", "")
            return h.send_bytes(200, _dumps({"username": user}).encode(), "application/json")
        if path == "/__admin/error-form":
            form = p.get("form", "auto")
            if form not in ERROR_FORMS + ("auto",):
                return h.send_bytes(400, b'{"error":"bad form"}', "application/json")
            with st.lock:
                st.error_form = None if form == "auto" else form
            return h.send_bytes(200, _dumps({"form": form}).encode(), "application/json")
        if path == "/__admin/federate":
            url = p.get("serverUrl", "")
            with st.lock:
                st.federated.add(norm_root(url))
                fed = sorted(st.federated)
            return h.send_bytes(200, _dumps({"federated": fed}).encode(), "application/json")
        if path == "/__admin/set":
            try:
                self.set_options(p)
            except (KeyError, ValueError) as e:
                return h.send_bytes(400, _dumps({"error": str(e)}).encode(), "application/json")
            return h.send_bytes(200, _dumps(self.describe()).encode(), "application/json")
        if path == "/__admin/issue":
            # mint a token without going through (or counting as) a token-service call
            aud = p.get("audience", "server" if self.has_server else "portal")
            audience = (None if aud == "portal" else
                        self.server_root if aud == "server" else aud)
            ttl = float(p.get("ttl", self.cfg["ttl"]))
            client = p.get("client") or None
            t = self._issue("admin", p.get("username") or self.cfg["default_user"], None, ttl,
                            audience, client, p.get("referer") or None, p.get("ip") or None)
            return h.send_bytes(200, _dumps({"token": t.value, "expires": _ms(t.expires),
                                             "ssl": self.cfg["ssl"]}).encode(),
                                "application/json")
        if path == "/__admin/api-key":
            try:
                refs = p.get("referrers")
                k = self.create_api_key(
                    p.get("item", "api-key-item"), p.get("slot", "1"), ttl=float(p.get("ttl", 365 * 86400)),
                    referrers=None if refs is None else [r for r in refs.split(",") if r],
                    username=p.get("username") or None,
                    expires=float(p["expires"]) / 1000.0 if p.get("expires") else None)
            except ValueError as e:
                return h.send_bytes(400, _dumps({"error": str(e)}).encode(), "application/json")
            return h.send_bytes(200, _dumps({"key": k.value, "item": k.item, "slot": k.slot,
                                             "expires": _ms(k.expires)}).encode(), "application/json")
        if path == "/__admin/api-key/invalidate":
            done = self.invalidate_api_key(p.get("item", "api-key-item"), p.get("slot", "1"))
            return h.send_bytes(200, _dumps({"invalidated": done}).encode(), "application/json")
        if path == "/__admin/api-key/referrers":
            refs = [r for r in p.get("referrers", "").split(",") if r]
            done = self.set_api_key_referrers(p.get("item", "api-key-item"), refs)
            return h.send_bytes(200, _dumps({"updated": done, "referrers": refs}).encode(), "application/json")
        if path == "/__admin/invalidate":
            with st.lock:
                t = st.tokens.get(p.get("token", ""))
                if t is not None:
                    t.revoked = True
            return h.send_bytes(200, _dumps({"invalidated": t is not None}).encode(),
                                "application/json")
        h.send_bytes(404, b'{"error":"unknown admin endpoint"}', "application/json")

    SETTABLE = {"ttl": float, "refresh_ttl": float, "ssl": "bool", "short_lived_validity": int,
                "owning_system_url": str, "trusted_portal": str, "accept_portal_tokens": "bool",
                "oauth_error_status": int, "enforce_referer": "bool", "enforce_ip": "bool",
                "legacy_tokens_url": "bool", "auto_federate": "bool", "default_user": str,
                "revoke_app_tokens": "bool", "server_json_ctype": str, "reject_all": "bool",
                "content_encoding": str, "clock_skew": float, "exchange_revokes_old": "bool",
                "signin_redirect": str}

    def set_options(self, opts):
        for k, v in opts.items():
            if k not in self.SETTABLE:
                raise KeyError("unknown option %s" % k)
            conv = self.SETTABLE[k]
            if conv == "bool":
                v = v if isinstance(v, bool) else str(v).lower() in ("1", "true", "yes", "on")
            elif v in ("", None, "none") and conv is str:
                v = None
            elif v is not None:
                v = conv(v)
            with self.st.lock:
                self.st.cfg[k] = v

    def describe(self):
        c = self.cfg
        d = {"role": c["role"], "url": self.base_url, "ttl": c["ttl"],
             "refresh_ttl": c["refresh_ttl"], "ssl": c["ssl"],
             "users": sorted(self.st.users), "apps": sorted(self.st.apps),
             "default_user": c["default_user"], "error_form": self.st.error_form or "auto",
             "token_service": dict(self.st.token_service),
             "accept_portal_tokens": c["accept_portal_tokens"],
             "oauth_error_status": c["oauth_error_status"],
             "reject_all": c.get("reject_all", False),
             "signin_redirect": c.get("signin_redirect"),
             "content_encoding": c.get("content_encoding")}
        if self.has_portal:
            d["portal_url"] = self.portal_url
            d["federated_servers"] = sorted(self.st.federated | self.st.probe_ok)
        if self.has_server:
            d["server_root"] = self.server_root
            d["owning_system_url"] = self.owning_system_url
            d["trusted_portal"] = self.trusted_portal
            d["short_lived_validity"] = self.short_lived_validity()
        return d


# ---------------------------------------------------------------------------
# Server objects
# ---------------------------------------------------------------------------

class _HTTPServer(LoopbackServer, ThreadingHTTPServer):
    server_label = "arcgis"
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr, family, ssl_context, verbose, state):
        self.address_family = family
        self.ssl_context = ssl_context
        self.verbose = verbose
        self.state = state
        super().__init__(addr, _Handler)
        self.app = _App(state, self)


def _pairs(items, what):
    out = {}
    for item in items or ():
        for part in str(item).split(","):
            part = part.strip()
            if not part:
                continue
            k, sep, v = part.partition(":")
            if not sep:
                raise ValueError("%s must be NAME:SECRET, got %r" % (what, part))
            out[k] = v
    return out


class ArcGISServer:
    """In-process ArcGIS portal / server.

    role: "portal" | "server" | "both".  ttl: lifetime (s) of every access token
    (requested ``expiration`` minutes are capped to it).  users / apps:
    iterables of "name:secret" (or dicts).  owning_system_url: the portal this
    server is federated with ("self" = this instance's portal).  trusted_portal:
    portal whose tokens this server accepts (default owning_system_url).
    federated_servers: server roots this portal federates (it also accepts any
    server whose rest/info names it as owningSystemUrl, unless auto_federate=False).
    clock_skew: seconds the server's clock is off (negative: behind); it shows in the Date header and in the
    ``expires`` of generateToken answers, while tokens are still valid for ``ttl`` real seconds.
    """

    def __init__(self, role="both", host="127.0.0.1", port=0, ttl=60.0, users=None,
                 apps=None, owning_system_url=None, trusted_portal=None,
                 federated_servers=(), ssl=False, short_lived_validity=None, tls=None,
                 refresh_ttl=14 * 24 * 3600.0, default_user=None, portal_path="/portal",
                 server_path="/arcgis", accept_portal_tokens=False, oauth_error_status=200,
                 error_form=None, legacy_tokens_url=False, enforce_referer=True, enforce_ip=True,
                 auto_federate=True, revoke_app_tokens=False, redirect_uris=(), code_ttl=300.0,
                 server_json_ctype=SERVER_JSON_CTYPE, federate_self=False, verbose=False,
                 reject_all=False, content_encoding=None, clock_skew=0.0, max_url_bytes=None, token_delay=0.0,
                 exchange_revokes_old=False, signin_redirect=None):
        if role not in ("portal", "server", "both"):
            raise ValueError("role must be portal, server or both")
        if error_form not in (None, "auto") + ERROR_FORMS:
            raise ValueError("bad error_form")
        if content_encoding not in (None, "", "gzip", "deflate", "br", "zstd"):
            raise ValueError("content_encoding must be gzip, deflate, br or zstd")
        users = users if isinstance(users, dict) else _pairs(
            DEFAULT_USERS if users is None else users, "user")
        apps = apps if isinstance(apps, dict) else _pairs(
            DEFAULT_APPS if apps is None else apps, "app")
        if federate_self:
            if role != "both":
                raise ValueError("federate_self needs role=both")
            owning_system_url = owning_system_url or "self"
        cfg = {
            "role": role, "ttl": float(ttl), "refresh_ttl": float(refresh_ttl),
            "users": users, "apps": apps, "owning_system_url": owning_system_url or None,
            "trusted_portal": trusted_portal or None, "ssl": bool(ssl),
            "short_lived_validity": short_lived_validity,
            "default_user": default_user or (next(iter(users)) if users else None),
            "portal_path": portal_path.rstrip("/"), "server_path": server_path.rstrip("/"),
            "accept_portal_tokens": bool(accept_portal_tokens),
            "oauth_error_status": int(oauth_error_status),
            "error_form": None if error_form in (None, "auto") else error_form,
            "legacy_tokens_url": bool(legacy_tokens_url),
            "enforce_referer": bool(enforce_referer), "enforce_ip": bool(enforce_ip),
            "auto_federate": bool(auto_federate), "revoke_app_tokens": bool(revoke_app_tokens),
            "redirect_uris": tuple(redirect_uris or ()), "code_ttl": float(code_ttl),
            "server_json_ctype": server_json_ctype,
            "reject_all": bool(reject_all),
            "exchange_revokes_old": bool(exchange_revokes_old),
            "content_encoding": content_encoding or None,
            "clock_skew": float(clock_skew or 0),
            "max_url_bytes": int(max_url_bytes) if max_url_bytes else None,
            # Seconds generateToken takes (a slow token service: what waiting for another replica costs).
            "token_delay": float(token_delay or 0),
            # Web-tier / SAML mode: a missing, invalid or expired token on a service gets a 302 to sign in
            # (portal | signin | saml | idp) instead of 498/499.
            "signin_redirect": signin_redirect or None,
        }
        if cfg["portal_path"] == cfg["server_path"] and role == "both":
            raise ValueError("portal_path and server_path must differ")
        self.state = _State(cfg)
        for s in federated_servers or ():
            self.state.federated.add(norm_root(s))
        ctx = None
        if tls:
            ctx = _sslmod.SSLContext(_sslmod.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(tls[0], tls[1])
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.host = host
        self.tls = bool(tls)
        self.httpd = _HTTPServer((host, port), family, ctx, verbose, self.state)
        self.port = self.httpd.server_port
        self.httpd.base_url = self.url
        self._thread = None

    # -- identity ------------------------------------------------------------
    @property
    def authority(self):
        h = "[%s]" % self.host if ":" in self.host else self.host
        return "%s:%d" % (h, self.port)

    @property
    def url(self):
        return "%s://%s" % ("https" if self.tls else "http", self.authority)

    @property
    def app(self):
        return self.httpd.app

    @property
    def role(self):
        return self.state.cfg["role"]

    @property
    def portal_url(self):
        """e.g. http://127.0.0.1:PORT/portal (owningSystemUrl form)."""
        return self.app.portal_url

    @property
    def sharing_url(self):
        """e.g. http://127.0.0.1:PORT/portal/sharing/rest"""
        return self.app.portal_url + "/sharing/rest"

    @property
    def server_root(self):
        """e.g. http://127.0.0.1:PORT/arcgis"""
        return self.app.server_root

    def service_url(self, folder="Secure", name="Points", stype="FeatureServer"):
        return "%s/rest/services/%s%s/%s" % (self.server_root, folder + "/" if folder else "",
                                             name, stype)

    def query_url(self, folder="Secure", name="Points", layer=0):
        return self.service_url(folder, name) + "/%d/query" % layer

    def tile_url(self, z=0, y=0, x=0, folder="Secure", name="Basemap"):
        return self.service_url(folder, name, "MapServer") + "/tile/%d/%d/%d" % (z, y, x)

    def upload_url(self, folder="Secure", name="Uploads"):
        return self.service_url(folder, name, "GPServer") + "/upload"

    # -- lifecycle -----------------------------------------------------------
    def start(self):
        self._thread = threading.Thread(target=self.httpd.serve_forever,
                                        kwargs={"poll_interval": 0.1},
                                        name="arcgis-%d" % self.port, daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- test controls (same as the /__admin endpoints) -----------------------
    def stats(self):
        return self.state.stats.snapshot()

    def reset_stats(self):
        with self.state.stats.lock:
            self.state.stats.reset()

    def request_log(self):
        with self.state.stats.lock:
            return list(self.state.stats.log)

    def print_url(self, folder="Utilities", name="PrintingTools"):
        """The print service (GPServer) URL; its task is `Export Web Map Task`."""
        return self.service_url(folder, name, "GPServer")

    def print_log(self):
        """One entry per print run: {"service", "op", "ok", "layers": [{"url","token","ok","error"}]}."""
        with self.app.print.lock:
            return [dict(e) for e in self.app.print.log]

    def expire_all(self, what="access"):
        now = _now()
        with self.state.lock:
            if what in ("access", "all"):
                self.state.expire_epoch = now
            if what in ("refresh", "all"):
                self.state.refresh_expire_epoch = now
        time.sleep(0.002)

    def revoke_all(self):
        """Every access and refresh token issued so far stops working at once ("revoke all tokens",
        a portal restart, a password change)."""
        self.expire_all("all")

    def token_calls(self, endpoint=None, kind=None):
        """The token-service calls so far (from stats), optionally only one endpoint / kind."""
        return [r for r in self.stats()["token_requests"]
                if (endpoint is None or r["endpoint"] == endpoint) and (kind is None or r["kind"] == kind)]

    def set_token_service(self, mode="ok", status=503, count=None, seconds=5.0):
        with self.state.lock:
            self.state.token_service.update(mode=mode, status=int(status), seconds=seconds,
                                            remaining=count)

    def set_password(self, username, password):
        with self.state.lock:
            self.state.users[username] = password

    def set_error_form(self, form=None):
        if form not in (None, "auto") + ERROR_FORMS:
            raise ValueError(form)
        with self.state.lock:
            self.state.error_form = None if form == "auto" else form

    def set(self, **opts):
        self.app.set_options(opts)

    def add_federated_server(self, server_url):
        with self.state.lock:
            self.state.federated.add(norm_root(server_url))

    def issue_token(self, username=None, ttl=None, audience="server", client=None,
                    referer=None, ip=None):
        """Mint a token directly (not counted as a token-service call); e.g. for
        pre-generated token credentials.  audience: "server", "portal" or a root URL."""
        aud = None if audience == "portal" else (
            self.server_root if audience == "server" else audience)
        t = self.app._issue("admin", username or self.state.cfg["default_user"], None,
                            self.state.cfg["ttl"] if ttl is None else ttl, aud, client,
                            referer, ip)
        return t.value

    def create_api_key(self, item="api-key-item", slot=1, ttl=365 * 86400.0, referrers=None, username=None,
                       expires=None):
        """A key in `slot` of API key credentials `item` (see the README): returns its value."""
        return self.app.create_api_key(item, slot, ttl, referrers, username, expires).value

    def invalidate_api_key(self, item="api-key-item", slot=1):
        return self.app.invalidate_api_key(item, slot)

    def set_api_key_referrers(self, item="api-key-item", referrers=()):
        return self.app.set_api_key_referrers(item, referrers)

    def describe(self):
        return self.app.describe()


def federate(portal, server, accept_portal_tokens=None):
    """Wire an in-process portal and server (separate instances) together."""
    portal.add_federated_server(server.server_root)
    opts = {"owning_system_url": portal.portal_url}
    if accept_portal_tokens is not None:
        opts["accept_portal_tokens"] = accept_portal_tokens
    server.set(**opts)


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--print-port", action="store_true",
                    help="print the bound port on stdout (one line) once listening")
    ap.add_argument("--role", choices=("portal", "server", "both"), default="both")
    ap.add_argument("--ttl", type=float, default=60.0, help="access token lifetime, seconds")
    ap.add_argument("--refresh-ttl", type=float, default=14 * 24 * 3600.0)
    ap.add_argument("--user", action="append", metavar="USER:PASSWORD",
                    help="repeatable or comma-separated (default alice:alice-pass,bob:bob-pass)")
    ap.add_argument("--app", action="append", metavar="CLIENT_ID:SECRET",
                    help="OAuth app, repeatable (default proxyapp:proxyapp-secret)")
    ap.add_argument("--default-user", help="user the authorize endpoint auto-approves as")
    ap.add_argument("--owning-system-url", help="portal URL this server is federated with "
                                               "('self' = this instance's portal)")
    ap.add_argument("--trusted-portal", help="portal whose tokens this server accepts "
                                             "(default: --owning-system-url)")
    ap.add_argument("--federated-server", action="append", default=[],
                    help="server root this portal federates (repeatable)")
    ap.add_argument("--federate-self", action="store_true",
                    help="role=both: the server part is federated with the portal part")
    ap.add_argument("--no-auto-federate", action="store_true",
                    help="portal: only accept serverUrl values from --federated-server")
    ap.add_argument("--accept-portal-tokens", action="store_true",
                    help="server: also accept portal tokens directly (ArcGIS Online style)")
    ap.add_argument("--ssl", action="store_true", help="'ssl' flag value returned in tokens")
    ap.add_argument("--short-lived-validity", type=int,
                    help="minutes reported as authInfo.shortLivedTokenValidity")
    ap.add_argument("--oauth-error-status", type=int, default=200, choices=(200, 400))
    ap.add_argument("--error-form", choices=("auto",) + ERROR_FORMS, default="auto")
    ap.add_argument("--legacy-tokens-url", action="store_true",
                    help="advertise <root>/tokens/ instead of <root>/tokens/generateToken")
    ap.add_argument("--portal-path", default="/portal")
    ap.add_argument("--server-path", default="/arcgis")
    ap.add_argument("--no-enforce-referer", action="store_true")
    ap.add_argument("--no-enforce-ip", action="store_true")
    ap.add_argument("--revoke-app-tokens", action="store_true")
    ap.add_argument("--signin-redirect", choices=("portal", "signin", "saml", "idp"),
                    help="web-tier mode: redirect to sign in instead of answering 498/499 on services")
    ap.add_argument("--redirect-uri", action="append", default=[],
                    help="allowed redirect_uri prefix (default: any)")
    ap.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args(argv)
    srv = ArcGISServer(
        role=a.role, host=a.host, port=a.port, ttl=a.ttl, refresh_ttl=a.refresh_ttl,
        users=a.user, apps=a.app, default_user=a.default_user,
        owning_system_url=a.owning_system_url, trusted_portal=a.trusted_portal,
        federated_servers=a.federated_server, federate_self=a.federate_self,
        auto_federate=not a.no_auto_federate, accept_portal_tokens=a.accept_portal_tokens,
        ssl=a.ssl, short_lived_validity=a.short_lived_validity,
        oauth_error_status=a.oauth_error_status, error_form=a.error_form,
        legacy_tokens_url=a.legacy_tokens_url, portal_path=a.portal_path,
        server_path=a.server_path, enforce_referer=not a.no_enforce_referer,
        enforce_ip=not a.no_enforce_ip, revoke_app_tokens=a.revoke_app_tokens,
        redirect_uris=a.redirect_uri, tls=a.tls, verbose=a.verbose, signin_redirect=a.signin_redirect)
    if a.print_port:
        print(srv.port, flush=True)
    else:
        print("arcgis %s listening on %s" % (a.role, srv.url), file=sys.stderr, flush=True)

    def _term(*_):
        threading.Thread(target=srv.httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, _term)
    signal.signal(signal.SIGINT, _term)
    srv.httpd.serve_forever(poll_interval=0.1)
    srv.httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
