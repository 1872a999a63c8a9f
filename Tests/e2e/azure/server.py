#!/usr/bin/env python3
"""Azure Blob Storage and a Planetary Computer-style SAS token endpoint, for the authproxy end-to-end suite.

Standard library only. Two threaded ``http.server`` instances (HTTP/1.1 keep-alive, every response framed with
Content-Length), sharing one storage account and its key:

* ``BlobStore``: ``GET``/``HEAD /{container}/{blob}`` (path style: the account is the store's, as a host that does
  not name it), with ``Range``/``x-ms-range``; every request must carry a service SAS (``sv``, ``sr``, ``sp``,
  ``se``, ``sig``; ``st``, ``spr``, ``si``, ``sip`` and the ``rsc*`` overrides are read too) whose ``sig`` is the
  HMAC-SHA256, under the account key, of the string-to-sign Azure defines for ``sv`` >= 2020-12-06. A bad, expired,
  malformed or re-keyed SAS is ``403`` with ``x-ms-error-code: AuthenticationFailed`` and Azure's XML error body
  (HEAD: the header, no body); no SAS at all is ``409 PublicAccessNotPermitted`` (an account with public access
  off, the default since 2023).
* ``SASTokenService``: ``GET /api/sas/v1/token/{collection}`` and ``GET /api/sas/v1/token/{account}/{container}``
  answer ``{"msft:expiry": "...Z", "token": "st=...&se=...&sp=rl&sv=...&sr=c&sig=..."}`` (values percent-encoded,
  as Planetary Computer's). Optional ``Ocp-Apim-Subscription-Key`` check (401 with API Management's JSON), unknown
  ids are 404 with FastAPI's ``{"detail": ...}``, and a ``mode`` makes it fail (503, 429 with Retry-After, an empty
  200, a stall).

In-process:  ``store = BlobStore().start(); sas = SASTokenService(store, ttl=60).start()``.
As a process: ``python3 Tests/e2e/azure/server.py --file cogs/a.tif=PATH --print-port`` prints both ports.
"""

import argparse
import base64
import calendar
import hashlib
import hmac
import json
import secrets
import signal
import socketserver
import sys
import threading
import time
import uuid
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, quote, unquote, urlsplit

SAS_VERSION = "2024-11-04"

# The fields of a service SAS string-to-sign for sv >= 2020-12-06, in order (the canonicalized resource goes after se).
_SIGNED_BEFORE_RESOURCE = ("sp", "st", "se")
_SIGNED_AFTER_RESOURCE = ("si", "sip", "spr", "sv", "sr", "snapshot", "ses", "rscc", "rscd", "rsce", "rscl", "rsct")
SAS_FIELDS = {"sv", "ss", "srt", "sp", "se", "st", "spr", "sip", "si", "sr", "sig", "sdd", "ses", "skoid", "sktid",
              "skt", "ske", "sks", "skv", "saoid", "suoid", "scid", "sduoid", "rscc", "rscd", "rsce", "rscl", "rsct"}


def iso(t):
    """Azure's SAS time format: whole seconds, UTC, with Z."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def parse_iso(s):
    for fmt in ("%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%MZ", "%Y-%m-%d"):
        try:
            return calendar.timegm(time.strptime(s, fmt))
        except ValueError:
            continue
    return None


def string_to_sign(fields, account, container, blob=None):
    """The service SAS string-to-sign (sv >= 2020-12-06): sr=c signs the container, sr=b the blob."""
    resource = "/blob/%s/%s" % (account, container)
    if fields.get("sr") == "b" and blob:
        resource += "/" + blob
    parts = [fields.get(k, "") for k in _SIGNED_BEFORE_RESOURCE] + [resource]
    parts += [fields.get(k, "") for k in _SIGNED_AFTER_RESOURCE]
    return "\n".join(parts)


def signature(key_b64, text):
    return base64.b64encode(hmac.new(base64.b64decode(key_b64), text.encode("utf-8"), hashlib.sha256).digest()).decode()


def make_sas(key_b64, account, container, start, expiry, permissions="rl", protocol=None):
    """A container SAS as Planetary Computer hands it out: the query string, values percent-encoded."""
    fields = {"st": iso(start), "se": iso(expiry), "sp": permissions, "sv": SAS_VERSION, "sr": "c"}
    if protocol:
        fields["spr"] = protocol
    fields["sig"] = signature(key_b64, string_to_sign(fields, account, container))
    order = ["st", "se", "sp", "spr", "sv", "sr", "sig"]
    return "&".join("%s=%s" % (k, quote(fields[k], safe="")) for k in order if k in fields)


# ---------------------------------------------------------------------------
# shared plumbing
# ---------------------------------------------------------------------------

class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr, handler, app):
        self.app = app
        super().__init__(addr, handler)

    def server_bind(self):
        socketserver.TCPServer.server_bind(self)
        self.server_name = "127.0.0.1"
        self.server_port = self.socket.getsockname()[1]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30

    def version_string(self):
        return self.server.app.server_header

    def log_message(self, fmt, *args):  # quiet
        pass

    def send(self, status, body=b"", headers=(), head=False):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and not head:
            self.wfile.write(body)

    def do_GET(self):
        self.server.app.handle(self, head=False)

    def do_HEAD(self):
        self.server.app.handle(self, head=True)


class _Service:
    server_header = "test"

    def __init__(self, host, port):
        self.lock = threading.Lock()
        self.log = []
        self.httpd = _Server((host, port), _Handler, self)
        self.host = host
        self.port = self.httpd.server_port
        self._thread = None

    @property
    def url(self):
        return "http://%s:%d" % (self.host, self.port)

    def start(self):
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="%s-%d" % (type(self).__name__, self.port), daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def requests(self):
        with self.lock:
            return [dict(e) for e in self.log]

    def reset(self):
        with self.lock:
            self.log.clear()

    def _record(self, entry):
        with self.lock:
            self.log.append(entry)


# ---------------------------------------------------------------------------
# Blob store
# ---------------------------------------------------------------------------

_AUTH_MESSAGE = ("Server failed to authenticate the request. Make sure the value of Authorization header is formed "
                 "correctly including the signature.")


class BlobStore(_Service):
    """One storage account (``account``, key ``key``) serving the blobs put into it."""

    server_header = "Windows-Azure-Blob/1.0 Microsoft-HTTPAPI/2.0"

    def __init__(self, account="pcstore", host="127.0.0.1", port=0):
        super().__init__(host, port)
        self.account = account
        self.key = base64.b64encode(secrets.token_bytes(64)).decode()
        self.containers = {}
        self.modified = formatdate(time.time(), usegmt=True)

    def put(self, container, name, data):
        with self.lock:
            self.containers.setdefault(container, {})[name] = bytes(data)

    def add_container(self, container):
        with self.lock:
            self.containers.setdefault(container, {})

    def rotate_key(self):
        """Regenerate the account key, as `az storage account keys renew` does: every SAS signed before fails."""
        with self.lock:
            self.key = base64.b64encode(secrets.token_bytes(64)).decode()

    def blob_url(self, container, name):
        return "%s/%s/%s" % (self.url, container, name)

    def outcomes(self):
        """The SAS outcome of every request so far: "ok", an error code, or "no-sas"."""
        return [e["outcome"] for e in self.requests()]

    # -- request handling -----------------------------------------------------
    def _error(self, status, code, message, detail=None):
        request_id = str(uuid.uuid4())
        text = "%s\nRequestId:%s\nTime:%s" % (message, request_id,
                                              time.strftime("%Y-%m-%dT%H:%M:%S.0000000Z", time.gmtime()))
        body = '<?xml version="1.0" encoding="utf-8"?><Error><Code>%s</Code><Message>%s</Message>' % (
            code, _xml(text))
        if detail is not None:
            body += "<AuthenticationErrorDetail>%s</AuthenticationErrorDetail>" % _xml(detail)
        body += "</Error>"
        headers = [("Content-Type", "application/xml"), ("x-ms-request-id", request_id),
                   ("x-ms-error-code", code)]
        return code, status, body.encode(), headers

    def handle(self, h, head):
        split = urlsplit(h.path)
        path = unquote(split.path)
        container, _, blob = path.lstrip("/").partition("/")
        pairs = parse_qsl(split.query, keep_blank_values=True)
        entry = {"method": h.command, "path": split.path, "query": split.query, "container": container, "blob": blob,
                 "range": h.headers.get("x-ms-range") or h.headers.get("Range"), "sig": None,
                 "headers": dict(h.headers.items()), "t": time.time()}
        try:
            entry["outcome"], entry["status"], body, headers = self._serve(h, container, blob, pairs, entry)
        finally:
            self._record(entry)
        h.send(entry["status"], body, headers, head=head)

    def _serve(self, h, container, blob, pairs, entry):
        """(outcome, status, body, headers): outcome is "ok" or the error code."""
        fields = {}
        repeated = False
        for k, v in pairs:
            if k in SAS_FIELDS:
                repeated = repeated or k in fields
                fields[k] = v
        if "sig" not in fields:
            return self._error(409, "PublicAccessNotPermitted",
                               "Public access is not permitted on this storage account.")
        entry["sig"] = fields["sig"]
        auth = lambda detail: self._error(403, "AuthenticationFailed", _AUTH_MESSAGE, detail)
        if repeated or any(k not in fields for k in ("sv", "sr", "sp", "se")):
            return auth("Signature fields not well formed.")
        now = time.time()
        start = parse_iso(fields["st"]) if "st" in fields else None
        expiry = parse_iso(fields["se"])
        if expiry is None or ("st" in fields and start is None):
            return auth("Signature fields not well formed.")
        if now >= expiry or (start is not None and now < start):
            return auth("Signature not valid in the specified time frame: Start [%s] - Expiry [%s] - Current [%s]" % (
                formatdate(start, usegmt=True) if start else "", formatdate(expiry, usegmt=True),
                formatdate(now, usegmt=True)))
        with self.lock:
            key = self.key
        text = string_to_sign(fields, self.account, container, blob)
        if not hmac.compare_digest(signature(key, text).encode(), fields["sig"].encode()):
            return auth("Signature did not match. String to sign used was %s" % text)
        if fields.get("spr") == "https":
            return self._error(403, "AuthorizationProtocolMismatch",
                               "This request is not authorized to perform this operation using this protocol.")
        if "r" not in fields["sp"]:
            return self._error(403, "AuthorizationPermissionMismatch",
                               "This request is not authorized to perform this operation using this permission.")
        with self.lock:
            blobs = self.containers.get(container)
            data = None if blobs is None else blobs.get(blob)
        if blobs is None:
            return self._error(404, "ContainerNotFound", "The specified container does not exist.")
        if data is None:
            return self._error(404, "BlobNotFound", "The specified blob does not exist.")
        etag = '"0x%s"' % hashlib.sha1(data).hexdigest()[:15].upper()
        headers = [("Content-Type", "image/tiff" if blob.lower().endswith((".tif", ".tiff")) else
                    "application/octet-stream"),
                   ("ETag", etag), ("Last-Modified", self.modified), ("Accept-Ranges", "bytes"),
                   ("x-ms-blob-type", "BlockBlob"), ("x-ms-version", fields["sv"]),
                   ("x-ms-request-id", str(uuid.uuid4())), ("x-ms-server-encrypted", "true")]
        spec = entry["range"]
        if spec and h.command == "GET":
            r = _byte_range(spec, len(data))
            if r is None:
                return self._error(416, "InvalidRange",
                                   "The range specified is invalid for the current size of the resource.")
            a, b = r
            return "ok", 206, data[a:b + 1], headers + [("Content-Range", "bytes %d-%d/%d" % (a, b, len(data)))]
        return "ok", 200, data, headers


def _byte_range(spec, size):
    """One range of a `bytes=` header (Azure serves one), clipped to the blob; None when unsatisfiable."""
    unit, _, ranges = spec.partition("=")
    if unit.strip() != "bytes" or "," in ranges:
        return None
    first, _, last = ranges.strip().partition("-")
    try:
        if first == "":
            n = int(last)
            return (max(0, size - n), size - 1) if n > 0 and size > 0 else None
        a = int(first)
        b = int(last) if last else size - 1
    except ValueError:
        return None
    if a >= size or b < a:
        return None
    return a, min(b, size - 1)


def _xml(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# ---------------------------------------------------------------------------
# SAS token endpoint
# ---------------------------------------------------------------------------

class SASTokenService(_Service):
    """The Planetary Computer Data Authentication API's token routes, signing for ``store``'s containers.

    ttl: lifetime (s) of every token. collections: STAC collection id -> container of ``store``.
    subscription_key: when set, every request must carry it (``Ocp-Apim-Subscription-Key`` or the
    ``subscription-key`` query parameter). delay: seconds each answer waits (to pile requests up).
    signing_key: sign with this key instead of the store's (an endpoint whose key the account no longer has).
    """

    server_header = "Microsoft-HTTPAPI/2.0"
    PREFIX = "/api/sas/v1/token/"

    def __init__(self, store, ttl=3600.0, collections=None, subscription_key=None, delay=0.0, protocol=None,
                 host="127.0.0.1", port=0):
        super().__init__(host, port)
        self.store = store
        self.ttl = ttl
        self.collections = dict(collections or {})
        self.subscription_key = subscription_key
        self.delay = delay
        self.protocol = protocol
        self.mode = "ok"
        self.retry_after = 2
        self.signing_key = None

    def token_url(self, *parts):
        return self.url + self.PREFIX + "/".join(parts)

    def set_mode(self, mode, retry_after=2):
        """"ok", "unavailable" (503), "throttled" (429 + Retry-After), "empty" (200, no body), "stall" (no answer)."""
        with self.lock:
            self.mode = mode
            self.retry_after = retry_after

    def token_requests(self, path=None):
        return [e for e in self.requests() if path is None or e["path"] == path]

    def handle(self, h, head):
        split = urlsplit(h.path)
        entry = {"method": h.command, "path": split.path, "t": time.time(), "key": "not-required",
                 "headers": dict(h.headers.items())}
        try:
            answer = self._serve(h, split, entry)
            entry["status"] = answer[0] if answer else 0
        finally:
            self._record(entry)
        if answer:
            h.send(*answer, head=head)
        else:
            h.close_connection = True

    @staticmethod
    def _json(status, obj, headers=()):
        return status, json.dumps(obj).encode(), [("Content-Type", "application/json")] + list(headers)

    def _serve(self, h, split, entry):
        """(status, body, headers), or None to close the connection without an answer."""
        if self.delay:
            time.sleep(self.delay)
        with self.lock:
            mode, retry_after = self.mode, self.retry_after
        if mode == "stall":
            time.sleep(60)
            return None
        if mode == "unavailable":
            return self._json(503, {"detail": "Service Unavailable"})
        if mode == "throttled":
            return self._json(429, {"detail": "Rate limit exceeded"}, [("Retry-After", str(retry_after))])
        if self.subscription_key is not None:
            given = h.headers.get("Ocp-Apim-Subscription-Key") or dict(parse_qsl(split.query)).get("subscription-key")
            if given is None:
                entry["key"] = "missing"
                return self._json(401, {"statusCode": 401, "message": "Access denied due to missing subscription "
                                           "key. Make sure to include subscription key when making requests to an "
                                           "API."})
            if not hmac.compare_digest(given.encode(), self.subscription_key.encode()):
                entry["key"] = "invalid"
                return self._json(401, {"statusCode": 401, "message": "Access denied due to invalid subscription "
                                           "key. Make sure to provide a valid key for an active subscription."})
            entry["key"] = "ok"
        if not split.path.startswith(self.PREFIX):
            return self._json(404, {"detail": "Not Found"})
        parts = [unquote(p) for p in split.path[len(self.PREFIX):].split("/")]
        with self.store.lock:
            known = set(self.store.containers)
        if len(parts) == 1:
            entry["collection"] = parts[0]
            container = self.collections.get(parts[0])
            if container is None:
                return self._json(404, {"detail": "Collection not found: %s" % parts[0]})
            account = self.store.account
        elif len(parts) == 2:
            account, container = parts
            if account != self.store.account or container not in known:
                return self._json(404, {"detail": "No token available for %s/%s" % (account, container)})
        else:
            return self._json(404, {"detail": "Not Found"})
        entry["account"], entry["container"] = account, container
        if mode == "empty":
            return 200, b"", [("Content-Type", "application/json")]
        now = time.time()
        expiry = now + self.ttl
        with self.store.lock:
            key = self.signing_key or self.store.key
        token = make_sas(key, account, container, now - 15 * 60, expiry, protocol=self.protocol)
        entry["sig"] = unquote(token.rpartition("sig=")[2])
        entry["expiry"] = iso(expiry)
        return self._json(200, {"msft:expiry": iso(expiry), "token": token})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--account", default="pcstore")
    ap.add_argument("--file", action="append", default=[], help="CONTAINER/BLOB=LOCAL_PATH (repeatable)")
    ap.add_argument("--collection", action="append", default=[], help="COLLECTION=CONTAINER (repeatable)")
    ap.add_argument("--ttl", type=float, default=3600.0)
    ap.add_argument("--subscription-key")
    ap.add_argument("--print-port", action="store_true", help="print 'blob=PORT sas=PORT' and nothing else")
    args = ap.parse_args(argv)
    store = BlobStore(account=args.account)
    for spec in args.file:
        name, _, local = spec.partition("=")
        container, _, blob = name.partition("/")
        with open(local, "rb") as f:
            store.put(container, blob, f.read())
    sas = SASTokenService(store, ttl=args.ttl, subscription_key=args.subscription_key,
                          collections=dict(c.split("=", 1) for c in args.collection))
    store.start()
    sas.start()
    if args.print_port:
        print("blob=%d sas=%d" % (store.port, sas.port), flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    sas.stop()
    store.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
