"""The ArcGIS print service (`Export Web Map Task` of `Utilities/PrintingTools/GPServer`), as the test server runs it.

As ArcGIS does, the service loads every layer of `Web_Map_as_JSON` itself, straight from the layer's server (no
proxy), with the layer's own `token` (and the print request's `Referer`, which referer-bound tokens need: the print
service does not support IP-bound tokens, so it passes the referer on); a secured layer without a valid token makes
the whole print fail with the error ArcGIS gives. A print that succeeds makes a small PNG under
`<root>/rest/directories/arcgisoutput/...`, which the client downloads (with a token: the directory is secured here).

Endpoints, under `<root>/rest/services/<Folder>/<Name>/GPServer/<Task>/`:
  execute                 -> {"results":[{"paramName":"Output_File","dataType":"GPDataFile","value":{"url":…}}],
                              "messages":[…]} or {"error":{"code":400,"message":"Unable to complete operation.",…}}
  submitJob               -> {"jobId":…,"jobStatus":"esriJobSubmitted"}
  jobs/<id>               -> {"jobId","jobStatus":"esriJobSucceeded"|"esriJobFailed","results":{"Output_File":
                              {"paramUrl":"results/Output_File"}},"inputs":{},"messages":[…]}
  jobs/<id>/results/Output_File -> {"paramName":"Output_File","dataType":"GPDataFile","value":{"url":…}}

The messages echo the tool call with its parameters, web map included, as a GP service does at message level
"info": a token put into the web map comes back in them.
"""
import json
import secrets
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request

OUTPUT_KEEP = 64          # outputs and jobs kept per instance (oldest dropped)


class PrintState:
    def __init__(self):
        self.lock = threading.Lock()
        self.outputs = {}      # file name -> PNG bytes
        self.jobs = {}         # job id -> job document
        self.log = []          # one entry per print: {"service", "op", "ok", "layers": [...]}

    def keep(self, table, key, value):
        with self.lock:
            table[key] = value
            while len(table) > OUTPUT_KEEP:
                table.pop(next(iter(table)))


def classify(rest):
    """`rest`: the path after the server path, percent-decoded. The print kinds, or None."""
    low = rest.lower()
    if low.startswith("/rest/directories/arcgisoutput/"):
        return "print_output"
    if low.startswith("/rest/services/") and "/gpserver/" in low:
        tail = low.split("/gpserver/", 1)[1].strip("/").split("/")
        if len(tail) == 2 and tail[1] in ("execute", "submitjob"):
            return "print"
        if len(tail) >= 3 and tail[1] == "jobs":
            return "print"
    return None


def _layers(web_map):
    out = []
    for lyr in web_map.get("operationalLayers") or []:
        if isinstance(lyr, dict) and lyr.get("url"):
            out.append(lyr)
    base = web_map.get("baseMap") or {}
    for lyr in (base.get("baseMapLayers") or []) if isinstance(base, dict) else []:
        if isinstance(lyr, dict) and lyr.get("url"):
            out.append(lyr)
    return out


def _load_layer(url, token, referer):
    """Loads a layer as the print service does (its JSON, `f=json`), directly. Returns None or the failure."""
    q = {"f": "json"}
    if token:
        q["token"] = token
    sep = "&" if "?" in url else "?"
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx))
    headers = {"User-Agent": "ArcGIS Server PrintingTools"}
    if referer:
        headers["Referer"] = referer
    try:
        with opener.open(urllib.request.Request(url + sep + urllib.parse.urlencode(q), headers=headers),
                         timeout=10) as r:
            doc = json.loads(r.read().decode("utf-8"))
    except (OSError, ValueError, urllib.error.URLError) as e:
        return "Unable to connect to map server at %s. %s" % (url, type(e).__name__)
    err = doc.get("error") if isinstance(doc, dict) else None
    if err is None and isinstance(doc, dict) and doc.get("code") in (498, 499):
        err = doc
    if err:
        return "Failed to create layer from service at %s. %s" % (url, err.get("message", "error"))
    return None


def run(app, h, req, service, op, png):
    """Runs the Export Web Map tool: (result document, error document)."""
    text = req.params.get("Web_Map_as_JSON", "")
    fmt = req.params.get("Format", "PNG32")
    layout = req.params.get("Layout_Template", "MAP_ONLY")
    call = 'Executing (Export Web Map Task): ExportWebMap "%s" %s "%s"' % (text, fmt, layout)
    messages = [{"type": "esriJobMessageTypeInformative", "description": call}]
    entry = {"service": service, "op": op, "ok": False, "layers": []}
    try:
        web_map = json.loads(text) if text else None
    except ValueError:
        web_map = None
    if not isinstance(web_map, dict):
        detail = "Error executing tool. Export Web Map Task : Invalid value for parameter Web_Map_as_JSON."
        with app.print.lock:
            app.print.log.append(entry)
        return None, messages, detail
    failure = None
    referer = h.headers.get("Referer")
    for lyr in _layers(web_map):
        why = _load_layer(lyr["url"], lyr.get("token"), referer)
        entry["layers"].append({"url": lyr["url"], "token": bool(lyr.get("token")), "ok": why is None,
                                "error": why})
        if why and failure is None:
            failure = why
    with app.print.lock:
        app.print.log.append(entry)
        del app.print.log[:-200]
    if failure:
        detail = ("Error executing tool. Export Web Map Task : %s\nFailed to execute (Export Web Map).\n"
                  "Failed to execute (Export Web Map Task)." % failure)
        messages.append({"type": "esriJobMessageTypeError", "description": detail})
        return None, messages, detail
    entry["ok"] = True
    name = "_ags_%s.png" % secrets.token_hex(12)
    app.print.keep(app.print.outputs, name, png)
    url = "%s/rest/directories/arcgisoutput/Utilities/PrintingTools_GPServer/%s" % (app.server_root, name)
    messages.append({"type": "esriJobMessageTypeInformative", "description": "Succeeded"})
    return url, messages, None


def _result(url):
    return {"paramName": "Output_File", "dataType": "GPDataFile", "value": {"url": url}}


def serve(app, h, req, png):
    """`print`: execute, submitJob, job status and job results (behind the service's token gate)."""
    def produce(user, src):
        rest = urllib.parse.unquote(req.path[len(app.cfg["server_path"]):])
        service, tail = rest.split("/GPServer/", 1) if "/GPServer/" in rest else rest.split("/gpserver/", 1)
        parts = tail.strip("/").split("/")
        op = parts[1].lower()
        if op == "execute":
            url, messages, error = run(app, h, req, service, "execute", png)
            if error:
                return app._json(h, req, {"error": {"code": 400, "message": "Unable to complete operation.",
                                                    "details": [error]}})
            return app._json(h, req, {"results": [_result(url)], "messages": messages})
        if op == "submitjob":
            url, messages, error = run(app, h, req, service, "submitJob", png)
            job_id = "j" + secrets.token_hex(16)
            app.print.keep(app.print.jobs, job_id, {
                "jobId": job_id, "jobStatus": "esriJobFailed" if error else "esriJobSucceeded",
                "results": {} if error else {"Output_File": {"paramUrl": "results/Output_File"}},
                "inputs": {"Web_Map_as_JSON": {"paramUrl": "inputs/Web_Map_as_JSON"}},
                "messages": messages, "_url": url})
            return app._json(h, req, {"jobId": job_id, "jobStatus": "esriJobSubmitted"})
        # jobs/<id>[/results/Output_File]
        with app.print.lock:
            job = app.print.jobs.get(parts[2]) if len(parts) >= 3 else None
        if job is None:
            return app._json(h, req, {"error": {"code": 400, "message": "Invalid or missing job id",
                                                "details": []}})
        if len(parts) == 3:
            return app._json(h, req, {k: v for k, v in job.items() if not k.startswith("_")})
        if parts[3:] == ["results", "Output_File"] and job["_url"]:
            return app._json(h, req, _result(job["_url"]))
        return app._json(h, req, {"error": {"code": 400, "message": "Invalid URL", "details": []}})
    app._serve_secured(h, req, produce)


def serve_output(app, h, req):
    """`print_output`: a print's PNG (a valid token required: the output directory is secured here)."""
    ok, _, _ = app.authorize_request(h, req, secured=True)
    if not ok:
        return
    name = req.path.rsplit("/", 1)[-1]
    with app.print.lock:
        png = app.print.outputs.get(name)
    if png is None:
        return h.send_bytes(404, b"Not Found", "text/html")
    h.send_bytes(200, png, "image/png")
