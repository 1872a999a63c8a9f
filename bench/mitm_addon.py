# mitmproxy addon for bench/https.sh: the same work as authproxy's api-key credential
# (add token=BENCHKEY to the query of every request sent upstream).
def request(flow): flow.request.query["token"] = "BENCHKEY"
