"""An identity-aware proxy (Entra Application Proxy, Google IAP, Cloudflare Access in their API-client shape) for
the authproxy e2e suite: it lets a request through to the service behind it only with an access token the test
OIDC provider issued and that has not expired, and takes its own token out before passing the request on (the
service behind it never sees the gateway's credential).

Without a valid token it answers as such gateways do, per ``rejection``:
  "401"  ``401 WWW-Authenticate: Bearer error="invalid_token"`` (an API client's answer)
  "302"  a redirect to the provider's authorization endpoint (a browser's sign-in; what ArcGIS Pro meets)

The token is read from ``Authorization: Bearer`` or, with ``placement="query"``, from ``access_token=``. Every
request is logged (``requests()``) with the gateway token's state and the fields passed on.
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

    def _handle(self):
        gw = self.srv
        u = urlsplit(self.path)
        token, passed_path = self._take_token(u)
        state = gw.provider.check(token) if token else "none"
        body = self.body()
        entry = {"method": self.command, "path": u.path, "gateway_token": token, "state": state,
                 "authorization": self.headers.get("Authorization"),
                 "x_esri_authorization": self.headers.get("X-Esri-Authorization"),
                 "passed_path": passed_path, "body_len": len(body)}
        with gw.lock:
            gw.log.append(entry)
        if state != "ok":
            if gw.rejection == "302":
                return self.send(302, b"", ctype=None, headers=[
                    ("Location", gw.provider.issuer + "/protocol/openid-connect/auth?client_id=gateway&response_type=code")])
            return self.send(401, {"error": "invalid_token"}, headers=[
                ("WWW-Authenticate", 'Bearer realm="gateway", error="invalid_token"')])
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP and k.lower() != "host"}
        if gw.placement == "header":
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

    def __init__(self, provider, upstream, rejection="401", placement="header"):
        super().__init__()
        self.provider = provider
        self.upstream = upstream
        self.rejection = rejection
        self.placement = placement
