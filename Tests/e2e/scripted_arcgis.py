"""A minimal ArcGIS Server on loopback whose services answer what a test scripts: `rest/info` names its own
`generateToken`, which issues T1, T2, … (each valid an hour) to the one account it is made with (`username`,
`password`; any other login gets ArcGIS's "Invalid username or password." and no token, so no test can pass on a
credential the proxy got wrong), and every other GET is answered by
`answer(server, path, token)` -> (status, body), with `token` the request's `token=` (None without one). For the
token lifecycles the faithful test server (Tests/e2e/arcgis) cannot be made to play: a 503 then a revocation
between two attempts, one service rejecting what the others accept."""
import http.server
import json
import threading
import time
import urllib.parse


class ScriptedArcGIS:
    def __init__(self, answer, username="u", password="p"):
        self.answer = answer
        self.username, self.password = username, password
        self.lock = threading.Lock()
        self.issued = 0
        self.refused_logins = 0
        self.valid = set()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def send(self, body, status=200):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                form = urllib.parse.parse_qs(self.rfile.read(int(self.headers.get("Content-Length", 0))).decode())
                if (self.path.split("?")[0] != "/arcgis/tokens/generateToken"
                        or form.get("username") != [owner.username] or form.get("password") != [owner.password]):
                    with owner.lock:
                        owner.refused_logins += 1
                    return self.send(json.dumps({"error": {"code": 400, "message": "Unable to generate token.",
                                                           "details": ["Invalid username or password."]}}).encode())
                with owner.lock:
                    owner.issued += 1
                    t = "T%d" % owner.issued
                    owner.valid.add(t)
                self.send(json.dumps({"token": t, "expires": int(time.time() * 1000) + 3600000, "ssl": False}).encode())

            def do_GET(self):
                if self.path.startswith("/arcgis/rest/info"):
                    return self.send(json.dumps({"currentVersion": 11.1, "authInfo": {
                        "isTokenBasedSecurity": True, "shortLivedTokenValidity": 60,
                        "tokenServicesUrl": owner.root + "/tokens/generateToken"}}).encode())
                token = self.path.split("token=")[-1].split("&")[0] if "token=" in self.path else None
                status, body = owner.answer(owner, self.path, token)
                self.send(body, status)

        self._srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._srv.server_address[1]

    @property
    def root(self):
        return "http://127.0.0.1:%d/arcgis" % self.port

    def start(self):
        threading.Thread(target=self._srv.serve_forever, daemon=True).start()
        return self

    def stop(self):
        self._srv.shutdown()
        self._srv.server_close()


INVALID_TOKEN = b'{"error":{"code":498,"message":"Invalid token.","details":[]}}'
