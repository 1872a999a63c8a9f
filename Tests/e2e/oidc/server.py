#!/usr/bin/env python3
"""A small, faithful OpenID Connect provider and an OAuth2-protected resource server for the authproxy e2e suite.

Standard library plus `cryptography` (to verify private_key_jwt assertions). Threaded ``http.server``, HTTP/1.1
keep-alive, every response framed with Content-Length.

Provider (``OIDCProvider``), issuer ``http://127.0.0.1:PORT/realms/test`` (Keycloak's shape):

  GET  /realms/test/.well-known/openid-configuration   discovery (issuer, token_endpoint,
                                                        token_endpoint_auth_methods_supported)
  GET  /realms/test/protocol/openid-connect/auth       authorization (auto-approved; PKCE S256 required): 302 to the
                                                        registered redirect_uri with a single-use code
  POST /realms/test/protocol/openid-connect/token      grants client_credentials, authorization_code (the PKCE
                                                        verifier checked) and refresh_token (with rotation:
                                                        a spent refresh token is refused as invalid_grant);
                                                        client authentication client_secret_basic,
                                                        client_secret_post, private_key_jwt (signature verified
                                                        with the registered public key, claims iss/sub/aud/exp/jti,
                                                        the x5t#S256 header when a certificate is registered) and a
                                                        federated client_assertion (compared with the file the
                                                        workload identity writes, read at each request), and
                                                        tls_client_auth (served over https with ``tls`` set: the
                                                        client certificate's CN)

  GET  /realms/test/protocol/openid-connect/certs      the realm's signing keys (JWKS, RS256; rotate_signing_key())
  POST /realms/test/__test/sign-in                     a web app's sign-in in one call (user, password, client_id,
                                                        lifetime): ``{"id_token": …}`` signed RS256 with the current
                                                        key, aud = client_id, ``groups`` and
                                                        ``realm_access.roles`` from add_user(); readable from any
                                                        origin (CORS *)

Google's shapes, on the same listener:

  POST /token                                           Google's token endpoint (oauth2.googleapis.com/token):
                                                        grant urn:ietf:params:oauth:grant-type:jwt-bearer with a
                                                        service account's assertion (RS256 signature verified
                                                        with the account's registered public key, kid, iss = sub =
                                                        the account email, aud = this endpoint, iat/exp at most an
                                                        hour apart). With ``target_audience`` the answer is only
                                                        ``{"id_token": …}``: an RS256 OIDC ID token signed with the
                                                        provider's own RSA key (iss ``google_issuer``, aud =
                                                        target_audience, azp/email = the account, exp after
                                                        ``id_token_lifetime``); with ``scope`` an access token.
                                                        Errors as Google words them (400 invalid_grant "Invalid JWT
                                                        Signature.", "Invalid JWT: Token must be a short-lived
                                                        token…").
  GET  /oauth2/v3/certs                                 the ID tokens' public keys (JWKS)
  POST /v1/token                                        an STS (Google's sts.googleapis.com, workload identity
                                                        federation): RFC 8693 token exchange without client
                                                        authentication, ``audience`` required

The realm token endpoint takes RFC 8693 token exchange too (Keycloak's shape: client authenticated as for any
grant). Both verify the subject token: a JWT signed (RS256) by an issuer registered with
``trust_subject_issuer`` (the workload's platform: Kubernetes, a CI system), not expired, with that issuer's
audience; the access token issued carries the subject's ``sub`` and the ``audience`` asked for.

Access tokens are JWTs (HS256 with the provider's own key) carrying ``exp``; ``expires_in`` is configurable (None
leaves it out, so the client must read ``exp``). Failure modes: ``mode`` = "invalid_client", "503", "empty200",
"429" (with ``Retry-After: retry_after`` when that is set). Every token request is logged (``token_requests()``).

Resource server (``ResourceServer``): ``GET /ogc/collections/<c>/items`` answers a GeoJSON FeatureCollection when the
bearer (``Authorization: Bearer`` or ``access_token=``) is one the provider issued and not expired, and
``401 WWW-Authenticate: Bearer error="invalid_token"`` otherwise (``Bearer realm="ogc"`` without any token).
``POST /ogc/upload`` answers the SHA-256 and length of the body it read. Every request is logged with the token
it carried and whether that token had expired.
"""

import base64
import hashlib
import hmac
import json
import secrets
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, unquote, urlsplit

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

REALM_PATH = "/realms/test"
SIGN_IN_PATH = "/__test/sign-in"
ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
JWT_BEARER_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
TOKEN_EXCHANGE_GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
JWT_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:jwt"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
GOOGLE_TOKEN_PATH = "/token"
STS_TOKEN_PATH = "/v1/token"


def sign_rs256(private_key, header, claims):
    """A compact JWS (RS256) of two dicts."""
    h = b64url(json.dumps(header, separators=(",", ":")).encode())
    c = b64url(json.dumps(claims, separators=(",", ":")).encode())
    sig = private_key.sign((h + "." + c).encode(), padding.PKCS1v15(), hashes.SHA256())
    return h + "." + c + "." + b64url(sig)


def verify_rs256(jwt, public_key):
    """(header, claims) of a JWS whose RS256 signature `public_key` verifies; raises ValueError saying why not."""
    parts = (jwt or "").split(".")
    if len(parts) != 3:
        raise ValueError("not a JWS")
    try:
        header = json.loads(b64url_decode(parts[0]))
        claims = json.loads(b64url_decode(parts[1]))
        sig = b64url_decode(parts[2])
    except Exception:
        raise ValueError("undecodable JWT")
    if header.get("alg") != "RS256":
        raise ValueError("alg %r, not RS256" % header.get("alg"))
    try:
        public_key.verify(sig, (parts[0] + "." + parts[1]).encode(), padding.PKCS1v15(), hashes.SHA256())
    except InvalidSignature:
        raise ValueError("bad signature")
    return header, claims


def claims_of(jwt):
    """The claims of a JWT, unverified (tests read what a token says)."""
    return json.loads(b64url_decode(jwt.split(".")[1]))


def write_service_account_file(path, email, private_key_pem, kid, token_uri):
    """A Google service-account JSON key file, as `gcloud iam service-accounts keys create` writes it."""
    doc = {"type": "service_account", "project_id": "test-project", "private_key_id": kid,
           "private_key": private_key_pem.decode() if isinstance(private_key_pem, bytes) else private_key_pem,
           "client_email": email, "client_id": "1234567890",
           "auth_uri": "https://accounts.google.com/o/oauth2/auth", "token_uri": token_uri,
           "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs"}
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
    return path


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # 200 concurrent connections from the proxy: with the default backlog of 5 the kernel drops SYNs and the
    # retransmissions (1, 3, 7, 15 s) would be measured instead of the proxy.
    request_queue_size = 512


class _Base(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        with self.srv.conn_lock:
            self.srv.connections.add(self.connection)

    def finish(self):
        with self.srv.conn_lock:
            self.srv.connections.discard(self.connection)
        super().finish()

    def log_message(self, *a):
        pass

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        out = bytearray()
        while len(out) < n:
            chunk = self.rfile.read(min(1 << 20, n - len(out)))
            if not chunk:
                break
            out += chunk
        return bytes(out)

    def send(self, status, body=b"", ctype="application/json", headers=()):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        self.send_response(status)
        if body or ctype:
            self.send_header("Content-Type", ctype)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class _Listener:
    """A threaded server on 127.0.0.1 that can go down and come back on the same port, with a log of what it was
    asked (``requests()``, ``reset_log()``; handlers append under ``lock``)."""

    handler = None

    def __init__(self):
        self.port = 0
        self.tls = None  # an ssl.SSLContext: serve https
        self._srv = None
        self._thread = None
        self.conn_lock = threading.Lock()
        self.connections = set()
        self.lock = threading.Lock()
        self.log = []

    def requests(self):
        with self.lock:
            return list(self.log)

    def reset_log(self):
        with self.lock:
            self.log = []

    def start(self):
        owner = self

        class H(self.handler):
            srv = owner

        self._srv = _Server(("127.0.0.1", self.port), H)
        if self.tls:
            self._srv.socket = self.tls.wrap_socket(self._srv.socket, server_side=True)
        self.port = self._srv.server_address[1]
        self._thread = threading.Thread(target=self._srv.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self):
        if self._srv:
            self._srv.shutdown()
            self._srv.server_close()
            self._srv = None

    def go_down(self):
        """Nothing listens on the port until come_back(), and kept-alive connections are cut."""
        self.stop()
        with self.conn_lock:
            conns = list(self.connections)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def come_back(self):
        self.start()

    @property
    def base(self):
        return "%s://127.0.0.1:%d" % ("https" if self.tls else "http", self.port)


class _ProviderHandler(_Base):
    def do_GET(self):
        p = self.srv
        path = urlsplit(self.path).path
        if path == REALM_PATH + "/.well-known/openid-configuration":
            with p.lock:
                p.discovery_requests += 1
            doc = {
                "issuer": p.document_issuer or p.issuer,
                "token_endpoint": p.token_endpoint,
                "authorization_endpoint": p.issuer + "/protocol/openid-connect/auth",
                "jwks_uri": p.issuer + "/protocol/openid-connect/certs",
                "grant_types_supported": ["client_credentials", "refresh_token", "authorization_code"],
            }
            if p.auth_methods is not None:
                doc["token_endpoint_auth_methods_supported"] = p.auth_methods
            if p.mtls_alias:
                doc["mtls_endpoint_aliases"] = {"token_endpoint": p.mtls_alias}
            return self.send(200, doc)
        if path == REALM_PATH + "/protocol/openid-connect/auth":
            return self.authorize()
        if path in ("/oauth2/v3/certs", REALM_PATH + "/protocol/openid-connect/certs"):
            with p.lock:
                p.jwks_requests += 1
            return self.send(200, p.jwks())
        self.send(404, {"error": "not_found"})

    def authorize(self):
        """Auto-approves a sign-in: checks the client, its redirect URI and the PKCE challenge method, then redirects
        back with a single-use code bound to them."""
        p = self.srv
        q = dict(parse_qsl(urlsplit(self.path).query, keep_blank_values=True))
        c = p.clients.get(q.get("client_id"))
        redirect = q.get("redirect_uri")
        if not c or redirect not in c.get("redirect_uris", ()):
            return self.send(400, {"error": "invalid_request", "error_description": "unknown client or redirect_uri"})
        if q.get("response_type") != "code" or q.get("code_challenge_method") != "S256" or not q.get("code_challenge"):
            return self.send(400, {"error": "invalid_request", "error_description": "PKCE S256 and response_type=code required"})
        code = "code-" + secrets.token_urlsafe(12)
        with p.lock:
            p.codes[code] = {"client_id": q["client_id"], "redirect_uri": redirect, "challenge": q["code_challenge"],
                             "scope": q.get("scope")}
            p.authorize_requests.append(q)
        sep = "&" if "?" in redirect else "?"
        self.send(302, b"", ctype=None, headers=[("Location", redirect + sep + "code=%s&state=%s" % (code, q.get("state", "")))])

    def do_POST(self):
        p = self.srv
        path = urlsplit(self.path).path
        if path == REALM_PATH + SIGN_IN_PATH:
            # A web app's sign-in, reduced to one call (a test page has nobody to type a password): the user's ID
            # token for the app (aud = client_id). Readable from any origin, as the app's own page calls it.
            form = dict(parse_qsl(self.body().decode("latin-1"), keep_blank_values=True))
            user = p.users.get(form.get("user"))
            if user is None or form.get("password") != user["password"]:
                return self.send(401, {"error": "invalid_grant"}, headers=[("Access-Control-Allow-Origin", "*")])
            token = p.user_token(form["user"], form.get("client_id", ""), lifetime=int(form.get("lifetime", "300")))
            return self.send(200, {"id_token": token, "token_type": "Bearer"},
                             headers=[("Access-Control-Allow-Origin", "*"), ("Cache-Control", "no-store")])
        if path not in (urlsplit(p.token_endpoint).path, GOOGLE_TOKEN_PATH, STS_TOKEN_PATH):
            return self.send(404, {"error": "not_found"})
        raw = self.body()
        form = dict(parse_qsl(raw.decode("latin-1"), keep_blank_values=True))
        entry = {"time": time.time(), "grant_type": form.get("grant_type"), "form": form,
                 "authorization": self.headers.get("Authorization"), "endpoint": path}
        peer = self.connection.getpeercert() if p.tls else None
        if path == GOOGLE_TOKEN_PATH:
            status, answer = p.google_token_request(form, entry)
        elif path == STS_TOKEN_PATH:
            status, answer = p.sts_request(form, entry)
        else:
            status, answer = p.token_request(form, self.headers.get("Authorization"), entry, peer)
        entry["status"] = status
        with p.lock:
            p.log.append(entry)
        extra = [("Retry-After", str(p.retry_after))] if status in (429, 503) and p.retry_after is not None else []
        if isinstance(answer, bytes):
            return self.send(status, answer, ctype="application/json", headers=extra)
        self.send(status, answer, headers=[("Cache-Control", "no-store")] + extra)


class OIDCProvider(_Listener):
    handler = _ProviderHandler

    def __init__(self, expires_in=60, auth_methods=("client_secret_basic", "client_secret_post", "private_key_jwt")):
        super().__init__()
        self.clients = {}
        self.expires_in = expires_in
        self.auth_methods = list(auth_methods) if auth_methods is not None else None
        self.mode = None
        self.retry_after = None  # seconds sent as Retry-After with a 429 or 503 mode
        self.document_issuer = None  # set to make discovery name another issuer
        self.mtls_alias = None  # set to name mtls_endpoint_aliases.token_endpoint in discovery
        self.discovery_requests = 0
        self.tokens = {}  # access token -> (client_id, exp)
        self.codes = {}  # authorization code -> what it was issued for
        self.authorize_requests = []
        self.refresh_tokens = {}  # refresh token -> client_id (live ones)
        self.spent_refresh_tokens = set()
        self.jtis = set()
        self.key = secrets.token_bytes(32)
        # Google's shapes: service accounts, the RSA key ID tokens are signed with, trusted subject-token issuers.
        self.service_accounts = {}  # email -> {"key": public key, "kid": str or None}
        self.signing_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.signing_kid = "idt-" + secrets.token_hex(4)
        self.retired_keys = []  # (kid, public key) of rotated keys: listed in the JWKS, refused by verify_id_token
        self.id_token_lifetime = 3600
        self.subject_issuers = {}  # iss -> {"key": public key, "audience": str or None}
        self.users = {}  # web-app users: name -> {"password": str, "groups": [str]}
        self.jwks_requests = 0

    @property
    def issuer(self):
        return self.base + REALM_PATH

    @property
    def token_endpoint(self):
        return self.issuer + "/protocol/openid-connect/token"

    # -- registration ------------------------------------------------------------------------------------------
    def add_client(self, client_id, secret=None, methods=None, public_key_pem=None, certificate_pem=None, kid=None,
                   assertion_file=None, redirect_uris=(), tls_subject_cn=None):
        """Registers a client. methods: the authentication methods it may use (default: what its settings allow)."""
        allowed = set(methods or [])
        if not methods:
            if secret:
                allowed |= {"client_secret_basic", "client_secret_post"}
            if public_key_pem or certificate_pem:
                allowed.add("private_key_jwt")
            if assertion_file:
                allowed.add("federated_assertion")
            if tls_subject_cn:
                allowed.add("tls_client_auth")
        key = None
        thumb = None
        if certificate_pem:
            cert = x509.load_pem_x509_certificate(certificate_pem)
            key = cert.public_key()
            thumb = b64url(hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).digest())
        elif public_key_pem:
            key = serialization.load_pem_public_key(public_key_pem)
        self.clients[client_id] = {"secret": secret, "methods": allowed, "key": key, "x5t": thumb, "kid": kid,
                                   "assertion_file": assertion_file, "redirect_uris": tuple(redirect_uris),
                                   "tls_subject_cn": tls_subject_cn}

    def add_service_account(self, email, public_key_pem, kid=None):
        """A Google service account whose key (`kid` = its private_key_id) signs jwt-bearer assertions."""
        self.service_accounts[email] = {"key": serialization.load_pem_public_key(public_key_pem), "kid": kid}

    def trust_subject_issuer(self, issuer, public_key_pem, audience=None):
        """Subject tokens signed by `issuer` (RS256) may be exchanged; with `audience`, only those for it."""
        self.subject_issuers[issuer] = {"key": serialization.load_pem_public_key(public_key_pem), "audience": audience}

    @property
    def google_issuer(self):
        """The `iss` of the ID tokens (Google's is https://accounts.google.com)."""
        return self.base

    @property
    def google_token_endpoint(self):
        return self.base + GOOGLE_TOKEN_PATH

    @property
    def sts_endpoint(self):
        return self.base + STS_TOKEN_PATH

    def jwks(self):
        def jwk(kid, pub):
            n = pub.public_numbers()
            return {"kty": "RSA", "alg": "RS256", "use": "sig", "kid": kid,
                    "n": b64url(n.n.to_bytes((n.n.bit_length() + 7) // 8, "big")),
                    "e": b64url(n.e.to_bytes((n.e.bit_length() + 7) // 8, "big"))}
        with self.lock:
            keys = [(self.signing_kid, self.signing_key.public_key())] + list(self.retired_keys)
        return {"keys": [jwk(k, p) for k, p in keys]}

    def add_user(self, name, password, groups=()):
        """A person who signs in to a web app (``POST /realms/test/__test/sign-in``)."""
        self.users[name] = {"password": password, "groups": list(groups)}

    def user_token(self, user, audience, lifetime=300, issuer=None, signing_key=None, kid=None, extra=None):
        """An RS256 ID token for a web-app user, as the realm issues it at sign-in (Keycloak's shape: ``groups``,
        ``realm_access.roles``), signed with the current key unless `signing_key` is given."""
        now = int(time.time())
        info = self.users.get(user, {"groups": []})
        claims = {"iss": issuer or self.issuer, "aud": audience, "azp": audience, "sub": "user-" + user,
                  "preferred_username": user, "groups": info["groups"],
                  "realm_access": {"roles": ["user"] + info["groups"]},
                  "iat": now, "exp": now + lifetime, "typ": "ID"}
        claims.update(extra or {})
        with self.lock:
            key, k = (signing_key, kid) if signing_key is not None else (self.signing_key, self.signing_kid)
        return sign_rs256(key, {"alg": "RS256", "kid": k, "typ": "JWT"}, claims)

    def rotate_signing_key(self):
        """A new key signs ID tokens from now on; tokens signed with the old one are no longer accepted (as when
        Google's keys rotate and a verifier drops the old one)."""
        with self.lock:
            self.retired_keys.append((self.signing_kid, self.signing_key.public_key()))
            self.signing_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            self.signing_kid = "idt-" + secrets.token_hex(4)

    def verify_id_token(self, token, audience):
        """(claims, None) for an ID token this provider signed with its current key, for `audience`, not
        expired; (None, why) otherwise."""
        with self.lock:
            kid, key = self.signing_kid, self.signing_key.public_key()
        try:
            header, claims = verify_rs256(token, key)
        except ValueError as e:
            return None, str(e)
        if header.get("kid") != kid:
            return None, "kid %r is not the current key" % header.get("kid")
        if claims.get("iss") != self.google_issuer:
            return None, "iss %r" % claims.get("iss")
        if claims.get("aud") != audience:
            return None, "aud %r, expected %r" % (claims.get("aud"), audience)
        exp = claims.get("exp")
        if not isinstance(exp, int) or exp <= time.time():
            return None, "expired"
        return claims, None

    def issue_refresh_token(self, client_id):
        t = "rt-" + secrets.token_urlsafe(16)
        self.refresh_tokens[t] = client_id
        return t

    # -- state for tests ---------------------------------------------------------------------------------------
    def token_requests(self):
        return self.requests()

    def expire_all(self):
        """Every access token issued so far is expired from now on (the client does not know)."""
        with self.lock:
            for t, (c, _) in list(self.tokens.items()):
                self.tokens[t] = (c, time.time() - 1)

    def check(self, token):
        """'ok', 'expired' or 'unknown'."""
        with self.lock:
            v = self.tokens.get(token)
        if v is None:
            return "unknown"
        return "ok" if v[1] > time.time() else "expired"

    # -- the token endpoint ------------------------------------------------------------------------------------
    def _error(self, entry, status, error, description):
        entry["outcome"] = error
        return status, {"error": error, "error_description": description}

    def token_request(self, form, authorization, entry, peer=None):
        mode = self.mode
        if mode == "503":
            entry["outcome"] = "503"
            return 503, b"<html>Service Unavailable</html>"
        if mode == "429":
            entry["outcome"] = "429"
            return 429, {"error": "slow_down"}
        if mode == "empty200":
            entry["outcome"] = "empty200"
            return 200, b""
        client_id, method, why = self._authenticate(form, authorization, peer)
        entry["client_id"] = client_id
        entry["auth_method"] = method
        if mode == "invalid_client" or why:
            return self._error(entry, 401, "invalid_client", why or "client disabled")
        grant = form.get("grant_type")
        refresh = None
        if grant == "client_credentials":
            pass
        elif grant == "refresh_token":
            rt = form.get("refresh_token", "")
            with self.lock:
                owner = self.refresh_tokens.pop(rt, None)
                if owner is None:
                    reused = rt in self.spent_refresh_tokens
                else:
                    self.spent_refresh_tokens.add(rt)
            if owner != client_id:
                entry["refresh_reused"] = owner is None and reused
                return self._error(entry, 400, "invalid_grant", "refresh token is not active")
            refresh = self.issue_refresh_token(client_id)
        elif grant == "authorization_code":
            with self.lock:
                issued = self.codes.pop(form.get("code", ""), None)
            if not issued or issued["client_id"] != client_id or issued["redirect_uri"] != form.get("redirect_uri"):
                return self._error(entry, 400, "invalid_grant", "code not active for this client and redirect_uri")
            verifier = form.get("code_verifier", "")
            if b64url(hashlib.sha256(verifier.encode()).digest()) != issued["challenge"]:
                return self._error(entry, 400, "invalid_grant", "PKCE verification failed")
            refresh = self.issue_refresh_token(client_id)
        elif grant == TOKEN_EXCHANGE_GRANT:
            return self._exchange(form, entry, client_id)
        else:
            return self._error(entry, 400, "unsupported_grant_type", "grant %r" % grant)
        now = int(time.time())
        lifetime = self.expires_in if self.expires_in is not None else 60
        exp = now + (self.token_lifetime_override or lifetime)
        header = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
        claims = {"iss": self.issuer, "sub": client_id, "azp": client_id, "iat": now, "exp": exp,
                  "jti": secrets.token_hex(8)}
        for k in ("scope", "audience", "resource"):
            if k in form:
                claims[k] = form[k]
        body = b64url(json.dumps(claims).encode())
        sig = b64url(hmac.new(self.key, (header + "." + body).encode(), hashlib.sha256).digest())
        token = header + "." + body + "." + sig
        with self.lock:
            # Valid for exactly the lifetime announced (the JWT's exp is whole seconds, up to 1 s earlier).
            self.tokens[token] = (client_id, time.time() + (self.token_lifetime_override or lifetime))
        answer = {"access_token": token, "token_type": "Bearer"}
        if self.expires_in is not None:
            answer["expires_in"] = self.expires_in
        if refresh:
            answer["refresh_token"] = refresh
        entry["outcome"] = "ok"
        entry["access_token"] = token
        entry["refresh_token_issued"] = refresh
        return 200, answer

    token_lifetime_override = None

    def _access_token(self, subject, extra_claims, lifetime):
        """An HS256 access token for `subject` that the resource server accepts for `lifetime` seconds."""
        now = int(time.time())
        header = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
        claims = {"iss": self.issuer, "sub": subject, "iat": now, "exp": now + lifetime, "jti": secrets.token_hex(8)}
        claims.update(extra_claims)
        body = b64url(json.dumps(claims).encode())
        sig = b64url(hmac.new(self.key, (header + "." + body).encode(), hashlib.sha256).digest())
        token = header + "." + body + "." + sig
        with self.lock:
            self.tokens[token] = (subject, time.time() + lifetime)
        return token

    # -- Google's token endpoint: the jwt-bearer grant of a service account ------------------------------------
    def google_token_request(self, form, entry):
        if self.mode in ("503", "429", "empty200"):
            return self.token_request(form, None, entry)
        if form.get("grant_type") != JWT_BEARER_GRANT:
            return self._error(entry, 400, "unsupported_grant_type", "Invalid grant_type: %s" % form.get("grant_type"))
        if "client_id" in form or "client_secret" in form or "client_assertion" in form:
            return self._error(entry, 400, "invalid_request", "unexpected client authentication")
        jwt = form.get("assertion", "")
        parts = jwt.split(".")
        try:
            claims = json.loads(b64url_decode(parts[1])) if len(parts) == 3 else {}
        except Exception:
            claims = {}
        account = self.service_accounts.get(claims.get("iss"))
        entry["client_id"] = claims.get("iss")
        entry["assertion_claims"] = claims
        if account is None:
            return self._error(entry, 400, "invalid_grant", "Invalid JWT Signature.")
        try:
            header, claims = verify_rs256(jwt, account["key"])
        except ValueError:
            return self._error(entry, 400, "invalid_grant", "Invalid JWT Signature.")
        if account["kid"] and header.get("kid") != account["kid"]:
            return self._error(entry, 400, "invalid_grant", "Invalid JWT Signature.")
        now = time.time()
        iat, exp = claims.get("iat"), claims.get("exp")
        if not isinstance(iat, int) or not isinstance(exp, int) or exp - iat > 3600 or exp <= now or iat > now + 60:
            return self._error(entry, 400, "invalid_grant",
                               "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. "
                               "Check your iat and exp values in the JWT claim.")
        if claims.get("aud") != self.google_token_endpoint:
            return self._error(entry, 400, "invalid_grant", "Invalid JWT: Failed audience check.")
        if claims.get("sub", claims["iss"]) != claims["iss"]:
            return self._error(entry, 400, "unauthorized_client", "Client is unauthorized to retrieve access tokens using this method.")
        target, scope = claims.get("target_audience"), claims.get("scope")
        entry["outcome"] = "ok"
        if target:
            t = int(now)
            id_claims = {"iss": self.google_issuer, "aud": target, "azp": claims["iss"], "email": claims["iss"],
                         "email_verified": True, "sub": "1000" + str(abs(hash(claims["iss"])) % 10 ** 12),
                         "iat": t, "exp": t + int(self.id_token_lifetime)}
            with self.lock:
                key, kid = self.signing_key, self.signing_kid
            token = sign_rs256(key, {"alg": "RS256", "kid": kid, "typ": "JWT"}, id_claims)
            entry["id_token"] = token
            return 200, {"id_token": token}
        if scope:
            token = self._access_token(claims["iss"], {"scope": scope}, self.expires_in or 3599)
            entry["access_token"] = token
            return 200, {"access_token": token, "expires_in": self.expires_in or 3599, "token_type": "Bearer"}
        return self._error(entry, 400, "invalid_scope", "Invalid OAuth scope or ID token audience provided.")

    # -- RFC 8693 token exchange ---------------------------------------------------------------------------------
    def sts_request(self, form, entry):
        """Google's STS shape: no client authentication; the audience names the workload identity provider."""
        if self.mode in ("503", "429", "empty200"):
            return self.token_request(form, None, entry)
        if form.get("grant_type") != TOKEN_EXCHANGE_GRANT:
            return self._error(entry, 400, "unsupported_grant_type", "grant %r" % form.get("grant_type"))
        if not form.get("audience"):
            return self._error(entry, 400, "invalid_request", "audience is required")
        if "client_id" in form or entry.get("authorization"):
            return self._error(entry, 400, "invalid_request", "the STS takes no client authentication")
        return self._exchange(form, entry, None)

    def _exchange(self, form, entry, client_id):
        subject = form.get("subject_token", "")
        entry["subject_token_type"] = form.get("subject_token_type")
        if form.get("subject_token_type") != JWT_TOKEN_TYPE:
            return self._error(entry, 400, "invalid_request", "subject_token_type %r is not supported" % form.get("subject_token_type"))
        try:
            unverified = claims_of(subject)
        except Exception:
            return self._error(entry, 400, "invalid_request", "subject_token is not a JWT")
        trusted = self.subject_issuers.get(unverified.get("iss"))
        if trusted is None:
            return self._error(entry, 400, "invalid_grant", "the subject token's issuer is not trusted")
        try:
            _, claims = verify_rs256(subject, trusted["key"])
        except ValueError as e:
            return self._error(entry, 400, "invalid_grant", "subject token: %s" % e)
        if not isinstance(claims.get("exp"), int) or claims["exp"] <= time.time():
            return self._error(entry, 400, "invalid_grant", "the subject token has expired")
        if trusted["audience"] and claims.get("aud") != trusted["audience"]:
            return self._error(entry, 400, "invalid_grant", "the subject token's aud is %r" % claims.get("aud"))
        requested = form.get("requested_token_type") or ACCESS_TOKEN_TYPE
        if requested != ACCESS_TOKEN_TYPE:
            return self._error(entry, 400, "invalid_request", "requested_token_type %r is not supported" % requested)
        entry["subject"] = claims.get("sub")
        extra = {"act_for": client_id} if client_id else {}
        for k in ("audience", "resource", "scope"):
            if k in form:
                extra[k] = form[k]
        lifetime = self.token_lifetime_override or self.expires_in or 60
        token = self._access_token(claims.get("sub"), extra, lifetime)
        entry["outcome"] = "ok"
        entry["access_token"] = token
        answer = {"access_token": token, "issued_token_type": ACCESS_TOKEN_TYPE, "token_type": "Bearer"}
        if self.expires_in is not None:
            answer["expires_in"] = lifetime
        return 200, answer

    def _authenticate(self, form, authorization, peer=None):
        """(client_id, method, refusal or None)."""
        if authorization and authorization.lower().startswith("basic "):
            try:
                cid, _, secret = base64.b64decode(authorization[6:]).decode().partition(":")
            except Exception:
                return None, "client_secret_basic", "malformed Basic credentials"
            cid, secret = unquote(cid.replace("+", " ")), unquote(secret.replace("+", " "))
            c = self.clients.get(cid)
            if not c or "client_secret_basic" not in c["methods"] or not hmac.compare_digest(c["secret"] or "", secret):
                return cid, "client_secret_basic", "bad client credentials"
            if form.get("client_secret") or form.get("client_assertion"):
                return cid, "client_secret_basic", "more than one client authentication"
            return cid, "client_secret_basic", None
        cid = form.get("client_id")
        c = self.clients.get(cid)
        if "client_secret" in form:
            if not c or "client_secret_post" not in c["methods"] or not hmac.compare_digest(c["secret"] or "", form["client_secret"]):
                return cid, "client_secret_post", "bad client credentials"
            return cid, "client_secret_post", None
        if "client_assertion" in form:
            if form.get("client_assertion_type") != ASSERTION_TYPE:
                return cid, "private_key_jwt", "client_assertion_type is %r" % form.get("client_assertion_type")
            return self._check_assertion(cid, c, form["client_assertion"])
        if c and "tls_client_auth" in c["methods"]:
            # RFC 8705 §2.1: the client certificate of the TLS connection, with the registered subject.
            subject = dict(x[0] for x in (peer or {}).get("subject", ()))
            if subject.get("commonName") != c["tls_subject_cn"]:
                return cid, "tls_client_auth", "no client certificate with CN=%s" % c["tls_subject_cn"]
            return cid, "tls_client_auth", None
        if c and "none" in c["methods"]:
            return cid, "none", None  # a public client
        return cid, "none", "no client authentication"

    def _check_assertion(self, cid, c, jwt):
        if not c:
            return cid, "private_key_jwt", "unknown client"
        if c["assertion_file"]:
            # A federated workload identity: the assertion is the token the platform projected into the file now.
            with open(c["assertion_file"]) as f:
                current = f.read().strip()
            if jwt != current:
                return cid, "federated_assertion", "the client assertion is not the current workload token"
            return cid, "federated_assertion", None
        parts = jwt.split(".")
        if len(parts) != 3:
            return cid, "private_key_jwt", "not a JWS"
        try:
            header = json.loads(b64url_decode(parts[0]))
            claims = json.loads(b64url_decode(parts[1]))
            sig = b64url_decode(parts[2])
        except Exception:
            return cid, "private_key_jwt", "undecodable assertion"
        signed = (parts[0] + "." + parts[1]).encode()
        alg = header.get("alg")
        key = c["key"]
        try:
            if alg == "RS256" and isinstance(key, rsa.RSAPublicKey):
                key.verify(sig, signed, padding.PKCS1v15(), hashes.SHA256())
            elif alg == "PS256" and isinstance(key, rsa.RSAPublicKey):
                key.verify(sig, signed, padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=32), hashes.SHA256())
            elif alg == "ES256" and isinstance(key, ec.EllipticCurvePublicKey):
                if len(sig) != 64:
                    return cid, "private_key_jwt", "ES256 signature of %d bytes, not 64" % len(sig)
                der = encode_dss_signature(int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:], "big"))
                key.verify(der, signed, ec.ECDSA(hashes.SHA256()))
            else:
                return cid, "private_key_jwt", "alg %r does not fit the registered key" % alg
        except InvalidSignature:
            return cid, "private_key_jwt", "bad signature"
        if header.get("typ") not in (None, "JWT"):
            return cid, "private_key_jwt", "typ %r" % header.get("typ")
        if c["x5t"] and header.get("x5t#S256") != c["x5t"]:
            return cid, "private_key_jwt", "x5t#S256 %r is not the registered certificate's" % header.get("x5t#S256")
        if c["kid"] and header.get("kid") != c["kid"]:
            return cid, "private_key_jwt", "kid %r" % header.get("kid")
        now = time.time()
        if claims.get("iss") != cid or claims.get("sub") != cid:
            return cid, "private_key_jwt", "iss/sub must be the client id"
        if claims.get("aud") not in (self.token_endpoint, self.issuer):
            return cid, "private_key_jwt", "aud %r" % claims.get("aud")
        exp = claims.get("exp")
        if not isinstance(exp, int) or exp <= now or exp > now + 600:
            return cid, "private_key_jwt", "exp %r" % exp
        iat = claims.get("iat")
        if not isinstance(iat, int) or iat > now + 60:
            return cid, "private_key_jwt", "iat %r" % iat
        jti = claims.get("jti")
        with self.lock:
            if not jti or jti in self.jtis:
                return cid, "private_key_jwt", "jti missing or replayed"
            self.jtis.add(jti)
        return cid, "private_key_jwt", None


class _ResourceHandler(_Base):
    def _token(self):
        a = self.headers.get("Authorization")
        if a and a.lower().startswith("bearer "):
            return a[7:].strip(), "header"
        q = dict(parse_qsl(urlsplit(self.path).query, keep_blank_values=True))
        if q.get("access_token"):
            return q["access_token"], "query"
        return None, None

    def _handle(self):
        r = self.srv
        u = urlsplit(self.path)
        body = self.body() if self.command == "POST" else b""
        token, where = self._token()
        state = r.provider.check(token) if token else "none"
        entry = {"time": time.time(), "method": self.command, "path": u.path, "query": u.query, "token": token,
                 "placement": where, "state": state, "authorization": self.headers.get("Authorization"),
                 "body_len": len(body), "body_sha256": hashlib.sha256(body).hexdigest()}
        with r.lock:
            r.log.append(entry)
        if not u.path.startswith("/ogc/"):
            return self.send(404, {"error": "not found"})
        if state == "none":
            return self.send(401, {"error": "unauthorized"}, headers=[("WWW-Authenticate", 'Bearer realm="ogc"')])
        if state != "ok":
            return self.send(401, {"error": "invalid_token"}, headers=[
                ("WWW-Authenticate", 'Bearer realm="ogc", error="invalid_token", error_description="The access token expired"')])
        if r.forbid_scope:
            return self.send(403, {"error": "insufficient_scope"}, headers=[
                ("WWW-Authenticate", 'Bearer realm="ogc", error="insufficient_scope", scope="write"')])
        if u.path == "/ogc/upload":
            return self.send(200, {"sha256": entry["body_sha256"], "length": len(body)})
        parts = u.path.strip("/").split("/")
        if len(parts) == 4 and parts[1] == "collections" and parts[3] == "items":
            fc = {"type": "FeatureCollection", "features": [
                {"type": "Feature", "id": i, "geometry": {"type": "Point", "coordinates": [7.0 + i, 46.0]},
                 "properties": {"name": "point %d" % i, "collection": parts[2]}} for i in range(3)],
                "numberReturned": 3}
            return self.send(200, fc, ctype="application/geo+json")
        self.send(404, {"error": "not found"})

    do_GET = _handle
    do_POST = _handle


class ResourceServer(_Listener):
    handler = _ResourceHandler

    def __init__(self, provider):
        super().__init__()
        self.provider = provider
        self.forbid_scope = False

    def items_url(self, collection="x"):
        return self.base + "/ogc/collections/%s/items" % collection
