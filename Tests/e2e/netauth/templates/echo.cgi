#!/usr/bin/python3
"""netauth echo handler (CGI, run by Apache as www-data).

Streams the request body (64 KiB reads, never held in memory), hashes it and
answers with the authenticated identity, method and body digest both as
response headers and as a small JSON document.
"""
import hashlib
import json
import os
import sys

env = os.environ
method = env.get("REQUEST_METHOD", "")
h = hashlib.sha256()
size = 0
inp = sys.stdin.buffer
while True:
    chunk = inp.read(65536)
    if not chunk:
        break
    size += len(chunk)
    h.update(chunk)

doc = {
    "vhost": env.get("NETAUTH_VHOST", ""),
    "user": env.get("REMOTE_USER", ""),
    "auth_type": env.get("AUTH_TYPE", ""),
    "method": method,
    "path": env.get("REQUEST_URI", ""),
    "body_size": size,
    "body_sha256": h.hexdigest(),
    "content_length": env.get("CONTENT_LENGTH", ""),
    "remote_addr": env.get("REMOTE_ADDR", ""),
    "remote_port": env.get("REMOTE_PORT", ""),
    "https": env.get("HTTPS", "") == "on",
    "client_subject": env.get("SSL_CLIENT_S_DN", ""),
    "client_issuer": env.get("SSL_CLIENT_I_DN", ""),
    "client_verify": env.get("SSL_CLIENT_VERIFY", ""),
    "gss_name": env.get("GSS_NAME", ""),
    "headers": {k[5:].replace("_", "-").title(): v for k, v in env.items()
                if k.startswith("HTTP_")},
}
# CGI passes these two request headers without the HTTP_ prefix
if env.get("CONTENT_TYPE"):
    doc["headers"]["Content-Type"] = env["CONTENT_TYPE"]
if env.get("CONTENT_LENGTH"):
    doc["headers"]["Content-Length"] = env["CONTENT_LENGTH"]
body = (json.dumps(doc, sort_keys=True) + "\n").encode()


def clean(v):
    return str(v).replace("\r", " ").replace("\n", " ")


out = ["Status: 200 OK",
       "Content-Type: application/json",
       "Content-Length: %d" % len(body),
       "Cache-Control: no-store",
       "X-Remote-User: " + clean(doc["user"]),
       "X-Auth-Type: " + clean(doc["auth_type"]),
       "X-Request-Method: " + clean(method),
       "X-Body-Size: %d" % size,
       "X-Body-Sha256: " + doc["body_sha256"],
       "X-Remote-Port: " + clean(doc["remote_port"]),
       "X-Netauth-Vhost: " + clean(doc["vhost"])]
if doc["client_subject"]:
    out.append("X-Client-Subject: " + clean(doc["client_subject"]))
    out.append("X-Client-Issuer: " + clean(doc["client_issuer"]))
    out.append("X-Client-Verify: " + clean(doc["client_verify"]))
sys.stdout.buffer.write(("\r\n".join(out) + "\r\n\r\n").encode("latin-1", "replace") + body)
sys.stdout.flush()
