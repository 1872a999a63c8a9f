"""An S3 endpoint whose clock is off: it checks a SigV4 request's `X-Amz-Date` against its own clock (the host's
clock plus `offset` seconds) as S3 does, allowing 15 minutes, and answers a request outside that with S3's
`403 RequestTimeTooSkewed` body (`RequestTime`, `ServerTime`, `MaxAllowedSkewMilliseconds`); a request within it
gets 200 and a small body. moto does not check the request time, so this stands in for that one S3 behaviour; it
does not check signatures (moto does, in the other tests).
"""

import datetime
import http.server
import threading

MAX_SKEW_MS = 900000


class SkewedS3:
    def __init__(self, offset):
        self.offset = offset
        self.requests = []  # (method, path, X-Amz-Date, has Authorization)
        s3 = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                amz = self.headers.get("X-Amz-Date")
                auth = self.headers.get("Authorization") or ""
                s3.requests.append((self.command, self.path, amz, auth.startswith("AWS4-HMAC-SHA256 ")))
                status, body = s3._answer(amz, auth)
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_HEAD = do_GET

            def log_message(self, *args):
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port

    def now(self):
        return datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=self.offset)

    def _answer(self, amz, auth):
        if not auth.startswith("AWS4-HMAC-SHA256 ") or not amz:
            return 403, b"<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"
        try:
            sent = datetime.datetime.strptime(amz, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
        except ValueError:
            return 403, b"<Error><Code>AccessDenied</Code><Message>AWS authentication requires a valid Date or x-amz-date header</Message></Error>"
        server = self.now()
        if abs((server - sent).total_seconds()) * 1000 > MAX_SKEW_MS:
            return 403, (
                '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>RequestTimeTooSkewed</Code>'
                "<Message>The difference between the request time and the current time is too large.</Message>"
                "<RequestTime>%s</RequestTime><ServerTime>%s</ServerTime>"
                "<MaxAllowedSkewMilliseconds>%d</MaxAllowedSkewMilliseconds>"
                "<RequestId>4442587FB7D0A2F9</RequestId><HostId>skewed</HostId></Error>"
                % (amz, server.strftime("%Y-%m-%dT%H:%M:%SZ"), MAX_SKEW_MS)).encode()
        return 200, b"in time"

    def start(self):
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self):
        self._server.shutdown()
        self._server.server_close()
