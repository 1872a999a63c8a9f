"""An STS endpoint for `AssumeRoleWithWebIdentity` in front of moto, recording every exchange.

AWS STS takes `AssumeRoleWithWebIdentity` unsigned (the web identity token is the proof). moto with IAM enforcement
on cannot: it answers an unsigned request with a 500 (it looks for `Authorization`). So this relay receives the
proxy's request exactly as the proxy sends it to AWS, records it, signs a copy with the moto user's key and passes it
to moto, whose answer (the temporary credentials moto then verifies on every S3 request) comes back unchanged —
except, with `lifetime`, the `Expiration`, moved to `lifetime` seconds from now: AWS's shortest is 15 minutes, too
long for a test to wait for the proxy's refresh.
"""

import datetime
import http.server
import re
import threading
import urllib.parse

import requests
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials


class STSRelay:
    def __init__(self, moto, lifetime=None):
        self.moto = moto
        self.lifetime = lifetime
        self.exchanges = []  # the form fields of every request, as received
        self.answers = []  # (status, body text) as returned
        self._lock = threading.Lock()
        relay = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                status, ctype, answer = relay._exchange(body, self.headers.get("Accept"))
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = "http://127.0.0.1:%d/" % self.port

    def tokens(self):
        with self._lock:
            return [e.get("WebIdentityToken") for e in self.exchanges]

    def _exchange(self, body, accept):
        fields = dict(urllib.parse.parse_qsl(body.decode("latin-1"), keep_blank_values=True))
        with self._lock:
            self.exchanges.append(fields)
        req = AWSRequest(method="POST", url=self.moto.endpoint + "/", data=body,
                         headers={"Content-Type": "application/x-www-form-urlencoded", "Accept": accept or "*/*"})
        SigV4Auth(Credentials(self.moto.access_key_id, self.moto.secret_access_key), "sts", "us-east-1").add_auth(req)
        r = requests.post(req.url, data=body, headers=dict(req.headers), timeout=10)
        text = r.text
        if self.lifetime is not None and r.status_code == 200:
            until = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=self.lifetime)
            iso = until.strftime("%Y-%m-%dT%H:%M:%SZ")
            text = re.sub(r"<Expiration>[^<]*</Expiration>", "<Expiration>%s</Expiration>" % iso, text)
            text = re.sub(r'"Expiration"\s*:\s*("[^"]*"|[0-9.eE+]+)', '"Expiration": %.3f' % until.timestamp(), text)
        with self._lock:
            self.answers.append((r.status_code, text))
        return r.status_code, r.headers.get("Content-Type", "text/xml"), text.encode()

    def start(self):
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self):
        self._server.shutdown()
        self._server.server_close()
