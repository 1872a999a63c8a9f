"""An identity-aware proxy (Entra Application Proxy, Google IAP, Cloudflare Access in their API-client shape) for
the authproxy e2e suite: it lets a request through to the service behind it only with an access token the test
OIDC provider issued and that has not expired, and takes its own token out before passing the request on (the
service behind it never sees the gateway's credential).

Without a valid token it answers as such gateways do, per ``rejection``:
  "401"  ``401 WWW-Authenticate: Bearer error="invalid_token"`` (an API client's answer)
  "302"  a redirect to the provider's authorization endpoint (a browser's sign-in; what ArcGIS Pro meets)

The token is read from ``Authorization: Bearer`` or, with ``placement="query"``, from ``access_token=``. Every
request is logged (``requests()``) with the gateway token's state and the fields passed on.

With ``mode="iap"`` it is Google Identity-Aware Proxy in front of an app, as an API client meets it: it wants an
OIDC ID token the provider signed (RS256, its current key: ``OIDCProvider.verify_id_token``) with ``iss`` the
provider's ``google_issuer``, ``aud`` the IAP OAuth client id (``audience``) and ``exp`` ahead, read from
``Proxy-Authorization: Bearer`` first — then ``Authorization`` is the app's and passes through untouched — or else
from ``Authorization: Bearer`` (taken out before the app). A missing or bad token is ``401`` with IAP's body
(``Invalid IAP credentials: …``) and ``X-Goog-IAP-Generated-Response: true``, no ``WWW-Authenticate``; with
``rejection="302"`` it is sent to sign in at the provider's host instead, as IAP does a browser. IAP's other behaviours (its cookie, the ``x-goog-iap-jwt-assertion`` it adds for the app, the OAuth
consent screen) are not imitated.
"""

import http.client
from urllib.parse import parse_qsl, urlencode, urlsplit

from .server import _Base, _Listener

HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}


class _GatewayHandler(_Base):
    def _take_token(self, u):
        gw = self.srv
        if gw.placement == "query":
            q = parse_qsl(u.query, keep_blank_values=True)
            tokens = [v for k, v in q if k == "access_token"]
            rest = urlencode([(k, v) for k, v in q if k != "access_token"])
            return (tokens[0] if tokens else None), u.path + ("?" + rest if rest else "")
        a = self.headers.get("Authorization") or ""
        token = a[7:].strip() if a.lower().startswith("bearer ") else None
        return token, self.path

    def _iap_token(self):
        """(token, where, why) as IAP reads it: Proxy-Authorization first, then Authorization."""
        for name in ("Proxy-Authorization", "Authorization"):
            v = self.headers.get(name)
            if v and v.lower().startswith("bearer "):
                return v[7:].strip(), name.lower(), None
        return None, None, "empty token"

    def _handle(self):
        gw = self.srv
        u = urlsplit(self.path)
        why = None
        where = None
        if gw.mode == "iap":
            token, where, why = self._iap_token()
            passed_path = self.path
            if token:
                claims, why = gw.provider.verify_id_token(token, gw.audience)
            state = "none" if not token else ("ok" if why is None else "invalid")
        else:
            token, passed_path = self._take_token(u)
            state = gw.provider.check(token) if token else "none"
        body = self.body()
        entry = {"method": self.command, "path": u.path, "gateway_token": token, "state": state, "why": why,
                 "token_from": where, "authorization": self.headers.get("Authorization"),
                 "proxy_authorization": self.headers.get("Proxy-Authorization"),
                 "x_esri_authorization": self.headers.get("X-Esri-Authorization"),
                 "passed_path": passed_path, "body_len": len(body)}
        with gw.lock:
            gw.log.append(entry)
        if gw.mode == "iap" and state != "ok":
            if gw.rejection == "302":
                return self.send(302, b"", ctype=None, headers=[
                    ("Location", gw.provider.base + "/o/oauth2/v2/auth?client_id=%s&response_type=code" % gw.audience)])
            return self.send(401, ("Invalid IAP credentials: %s" % why).encode(), ctype="text/html; charset=UTF-8",
                             headers=[("X-Goog-IAP-Generated-Response", "true")])
        if state != "ok":
            if gw.rejection == "302":
                return self.send(302, b"", ctype=None, headers=[
                    ("Location", gw.provider.issuer + "/protocol/openid-connect/auth?client_id=gateway&response_type=code")])
            return self.send(401, {"error": "invalid_token"}, headers=[
                ("WWW-Authenticate", 'Bearer realm="gateway", error="invalid_token"')])
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in HOP_BY_HOP and k.lower() not in ("host", "proxy-authorization")}
        if (gw.mode == "iap" and where == "authorization") or (gw.mode != "iap" and gw.placement == "header"):
            headers.pop("Authorization", None)
        headers["Content-Length"] = str(len(body))
        target = urlsplit(gw.upstream)
        c = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
        try:
            c.request(self.command, passed_path, body=body, headers=headers)
            r = c.getresponse()
            data = r.read()
            passed = [(k, v) for k, v in r.getheaders()
                      if k.lower() not in HOP_BY_HOP and k.lower() not in ("content-length", "content-type")]
            self.send(r.status, data, ctype=r.getheader("Content-Type"), headers=passed)
        finally:
            c.close()

    do_GET = _handle
    do_POST = _handle
    do_HEAD = _handle


class IdentityAwareProxy(_Listener):
    handler = _GatewayHandler

    def __init__(self, provider, upstream, rejection="401", placement="header", mode="oauth", audience=None):
        super().__init__()
        self.provider = provider
        self.upstream = upstream
        self.rejection = rejection
        self.placement = placement
        self.mode = mode
        self.audience = audience
        if mode == "iap" and not audience:
            raise ValueError("an IAP gateway needs its OAuth client id as audience")
