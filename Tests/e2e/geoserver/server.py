#!/usr/bin/env python3
"""GeoServer-like OGC server with the authkey module, for the authproxy end-to-end suite.

Standard library only. Threaded ``http.server``, HTTP/1.1 keep-alive. Usable

* in-process:  ``srv = GeoServer(keys={"<uuid>": "admin"}).start(); ...; srv.stop()``
* as a process: ``python3 Tests/e2e/geoserver/server.py --port 0 --print-port --key <uuid>``

Every request needs ``authkey=<key>`` in its query (or an urlencoded POST form), as GeoServer's authkey module
with anonymous access off: none is a 401 with GeoServer's Basic challenge, an unknown one a 403. What it serves
under ``/geoserver/{ows,wms,wfs}`` (see README.md for how faithfully):

  WMS  GetCapabilities (1.3.0)   every OnlineResource / LegendURL echoes ``authkey=<key>``, as GeoServer's
                                 authkey module writes it into backlinks
       GetMap                    a PNG of WIDTH x HEIGHT (at most 1024 x 1024)
  WFS  GetCapabilities (1.1.0)   operation URLs echo the key
       DescribeFeatureType       XSD of ``topp:states``
       GetFeature                GML 3.1.1 (schemaLocation echoes the key), GeoJSON with
                                 ``outputFormat=application/json`` (paging links echo the key),
                                 ``resultType=hits``
  other paths                    Jetty's HTML 404 page, which echoes the request URI (key included)

Response knobs (attributes, or ``set(...)``): ``gzip`` = "auto" (when the client accepts it, GeoServer's
GZIP filter), "always" (regardless of Accept-Encoding), "deflate" (zlib, regardless), "never"; ``framing`` =
"length" | "chunked"; ``piece`` = write bodies in pieces of that many bytes, each flushed on its own
(``TCP_NODELAY``), so a key is split across the proxy's reads; ``big_capabilities`` = pad the WMS capabilities
to more than 1 MB with layers (each with its backlinks).
"""

import argparse
import gzip as gziplib
import html
import json
import signal
import socket
import struct
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, quote, urlsplit

STATES = [
    ("Illinois", 11430602, 40.0, -89.2),
    ("Colorado", 3294394, 39.0, -105.5),
    ("Oregon", 2842321, 44.0, -120.5),
]


def png(width, height, rgb=(30, 120, 200)):
    """A valid PNG of one colour."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    row = b"\x00" + bytes(rgb) * width
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(row * height)) + chunk(b"IEND", b""))


class GeoServer:
    def __init__(self, keys=None, host="127.0.0.1", port=0):
        self.keys = dict(keys or {})
        self.gzip = "auto"
        self.framing = "length"
        self.piece = 0
        self.big_capabilities = False
        self.requests = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer((host, port), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.geoserver = self
        self.port = self._httpd.server_address[1]
        self.url = "http://%s:%d" % (host, self.port)
        self._thread = None

    def start(self):
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread:
            self._thread.join(5)

    def set(self, **options):
        for k, v in options.items():
            if not hasattr(self, k) or k.startswith("_"):
                raise AttributeError(k)
            setattr(self, k, v)
        return self

    def reset(self):
        self.set(gzip="auto", framing="length", piece=0, big_capabilities=False)
        with self._lock:
            self.requests.clear()

    def log(self, entry):
        with self._lock:
            self.requests.append(entry)

    def received(self):
        with self._lock:
            return list(self.requests)

    # -- documents -------------------------------------------------------------------------------------------------
    def base(self, host_header):
        return "http://%s/geoserver" % (host_header or "127.0.0.1:%d" % self.port)

    def wms_capabilities(self, base, key):
        k = "authkey=%s" % quote(key, safe="")
        ows = "%s/ows?SERVICE=WMS&amp;%s&amp;" % (base, k)
        layers = []
        count = 3
        if self.big_capabilities:
            count = 1050
        for i in range(count):
            name = "topp:states" if i == 0 else "topp:layer%d" % i
            layers.append(
                "<Layer queryable=\"1\" opaque=\"0\"><Name>%s</Name><Title>Layer %d</Title>"
                "<Abstract>A layer of the test server, with a description long enough to look like one a real "
                "catalogue carries.</Abstract><CRS>EPSG:4326</CRS><CRS>EPSG:3857</CRS>"
                "<EX_GeographicBoundingBox><westBoundLongitude>-124.7</westBoundLongitude>"
                "<eastBoundLongitude>-66.9</eastBoundLongitude><southBoundLatitude>24.9</southBoundLatitude>"
                "<northBoundLatitude>49.3</northBoundLatitude></EX_GeographicBoundingBox>"
                "<BoundingBox CRS=\"EPSG:4326\" minx=\"24.9\" miny=\"-124.7\" maxx=\"49.3\" maxy=\"-66.9\"/>"
                "<Style><Name>population</Name><Title>Population</Title>"
                "<LegendURL width=\"20\" height=\"20\"><Format>image/png</Format>"
                "<OnlineResource xmlns:xlink=\"http://www.w3.org/1999/xlink\" xlink:type=\"simple\" "
                "xlink:href=\"%s/ows?service=WMS&amp;request=GetLegendGraphic&amp;format=image%%2Fpng&amp;"
                "width=20&amp;height=20&amp;layer=%s&amp;%s\"/></LegendURL></Style></Layer>\n"
                % (name, i, base, quote(name, safe=""), k))
        return ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                "<WMS_Capabilities version=\"1.3.0\" updateSequence=\"42\" xmlns=\"http://www.opengis.net/wms\" "
                "xmlns:xlink=\"http://www.w3.org/1999/xlink\" xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" "
                "xsi:schemaLocation=\"http://www.opengis.net/wms %s/schemas/wms/1.3.0/capabilities_1_3_0.xsd\">\n"
                "<Service><Name>WMS</Name><Title>GeoServer Web Map Service</Title>"
                "<OnlineResource xlink:type=\"simple\" xlink:href=\"%s/ows?SERVICE=WMS&amp;%s\"/>"
                "<Fees>NONE</Fees><AccessConstraints>NONE</AccessConstraints></Service>\n"
                "<Capability><Request>"
                "<GetCapabilities><Format>text/xml</Format><DCPType><HTTP>"
                "<Get><OnlineResource xlink:type=\"simple\" xlink:href=\"%s\"/></Get>"
                "<Post><OnlineResource xlink:type=\"simple\" xlink:href=\"%s\"/></Post>"
                "</HTTP></DCPType></GetCapabilities>"
                "<GetMap><Format>image/png</Format><Format>image/jpeg</Format><DCPType><HTTP>"
                "<Get><OnlineResource xlink:type=\"simple\" xlink:href=\"%s\"/></Get></HTTP></DCPType></GetMap>"
                "<GetFeatureInfo><Format>text/plain</Format><Format>application/json</Format><DCPType><HTTP>"
                "<Get><OnlineResource xlink:type=\"simple\" xlink:href=\"%s\"/></Get></HTTP></DCPType>"
                "</GetFeatureInfo></Request>"
                "<Exception><Format>XML</Format><Format>INIMAGE</Format></Exception>\n"
                "<Layer><Title>GeoServer Web Map Service</Title><CRS>EPSG:4326</CRS><CRS>EPSG:3857</CRS>\n"
                "%s</Layer></Capability></WMS_Capabilities>\n"
                % (base, base, k, ows, ows, ows, ows, "".join(layers))).encode()

    def wfs_capabilities(self, base, key):
        href = "%s/wfs?authkey=%s" % (base, quote(key, safe=""))
        ops = "".join(
            "<ows:Operation name=\"%s\"><ows:DCP><ows:HTTP><ows:Get xlink:href=\"%s\"/><ows:Post xlink:href=\"%s\"/>"
            "</ows:HTTP></ows:DCP></ows:Operation>" % (op, href, href)
            for op in ("GetCapabilities", "DescribeFeatureType", "GetFeature"))
        return ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                "<wfs:WFS_Capabilities version=\"1.1.0\" xmlns=\"http://www.opengis.net/wfs\" xmlns:wfs=\"http://www.opengis.net/wfs\" "
                "xmlns:ows=\"http://www.opengis.net/ows\" xmlns:ogc=\"http://www.opengis.net/ogc\" "
                "xmlns:xlink=\"http://www.w3.org/1999/xlink\" xmlns:topp=\"http://www.openplans.org/topp\" "
                "xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" "
                "xsi:schemaLocation=\"http://www.opengis.net/wfs %s/schemas/wfs/1.1.0/wfs.xsd\" "
                "updateSequence=\"42\">\n"
                "<ows:ServiceIdentification><ows:Title>GeoServer Web Feature Service</ows:Title>"
                "<ows:ServiceType>WFS</ows:ServiceType><ows:ServiceTypeVersion>1.1.0</ows:ServiceTypeVersion>"
                "</ows:ServiceIdentification>\n"
                "<ows:OperationsMetadata>%s</ows:OperationsMetadata>\n"
                "<FeatureTypeList><Operations><Operation>Query</Operation></Operations>"
                "<FeatureType><Name>topp:states</Name><Title>USA Population</Title>"
                "<DefaultSRS>urn:x-ogc:def:crs:EPSG:4326</DefaultSRS><OutputFormats><Format>text/xml; "
                "subtype=gml/3.1.1</Format><Format>application/json</Format></OutputFormats>"
                "<ows:WGS84BoundingBox><ows:LowerCorner>-124.7 24.9</ows:LowerCorner>"
                "<ows:UpperCorner>-66.9 49.3</ows:UpperCorner></ows:WGS84BoundingBox></FeatureType>"
                "</FeatureTypeList>\n"
                "<ogc:Filter_Capabilities><ogc:Spatial_Capabilities><ogc:GeometryOperands>"
                "<ogc:GeometryOperand>gml:Envelope</ogc:GeometryOperand></ogc:GeometryOperands>"
                "<ogc:SpatialOperators><ogc:SpatialOperator name=\"BBOX\"/></ogc:SpatialOperators>"
                "</ogc:Spatial_Capabilities><ogc:Scalar_Capabilities><ogc:LogicalOperators/>"
                "<ogc:ComparisonOperators><ogc:ComparisonOperator>EqualTo</ogc:ComparisonOperator>"
                "</ogc:ComparisonOperators></ogc:Scalar_Capabilities><ogc:Id_Capabilities><ogc:FID/>"
                "</ogc:Id_Capabilities></ogc:Filter_Capabilities>\n"
                "</wfs:WFS_Capabilities>\n" % (base, ops)).encode()

    @staticmethod
    def describe_feature_type(base):
        return ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                "<xsd:schema xmlns:gml=\"http://www.opengis.net/gml\" xmlns:topp=\"http://www.openplans.org/topp\" "
                "xmlns:xsd=\"http://www.w3.org/2001/XMLSchema\" elementFormDefault=\"qualified\" "
                "targetNamespace=\"http://www.openplans.org/topp\">\n"
                "<xsd:import namespace=\"http://www.opengis.net/gml\" "
                "schemaLocation=\"%s/schemas/gml/3.1.1/base/gml.xsd\"/>\n"
                "<xsd:complexType name=\"statesType\"><xsd:complexContent>"
                "<xsd:extension base=\"gml:AbstractFeatureType\"><xsd:sequence>"
                "<xsd:element maxOccurs=\"1\" minOccurs=\"0\" name=\"the_geom\" nillable=\"true\" "
                "type=\"gml:PointPropertyType\"/>"
                "<xsd:element maxOccurs=\"1\" minOccurs=\"0\" name=\"STATE_NAME\" nillable=\"true\" "
                "type=\"xsd:string\"/>"
                "<xsd:element maxOccurs=\"1\" minOccurs=\"0\" name=\"PERSONS\" nillable=\"true\" type=\"xsd:double\"/>"
                "</xsd:sequence></xsd:extension></xsd:complexContent></xsd:complexType>\n"
                "<xsd:element name=\"states\" substitutionGroup=\"gml:_Feature\" type=\"topp:statesType\"/>\n"
                "</xsd:schema>\n" % base).encode()

    @staticmethod
    def features_gml(base, key, hits):
        members = "" if hits else "<gml:featureMembers>%s</gml:featureMembers>" % "".join(
            "<topp:states gml:id=\"states.%d\"><topp:the_geom><gml:Point srsName=\"urn:x-ogc:def:crs:EPSG:4326\">"
            "<gml:pos>%s %s</gml:pos></gml:Point></topp:the_geom><topp:STATE_NAME>%s</topp:STATE_NAME>"
            "<topp:PERSONS>%d.0</topp:PERSONS></topp:states>" % (i + 1, lat, lon, name, persons)
            for i, (name, persons, lat, lon) in enumerate(STATES))
        return ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                "<wfs:FeatureCollection numberOfFeatures=\"%d\" timeStamp=\"2026-11-28T12:00:00.000Z\" "
                "xmlns:wfs=\"http://www.opengis.net/wfs\" xmlns:gml=\"http://www.opengis.net/gml\" "
                "xmlns:topp=\"http://www.openplans.org/topp\" xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" "
                "xsi:schemaLocation=\"http://www.openplans.org/topp %s/wfs?service=WFS&amp;version=1.1.0&amp;"
                "request=DescribeFeatureType&amp;typeName=topp%%3Astates&amp;authkey=%s "
                "http://www.opengis.net/wfs %s/schemas/wfs/1.1.0/wfs.xsd\">%s</wfs:FeatureCollection>\n"
                % (len(STATES), base, quote(key, safe=""), base, members)).encode()

    @staticmethod
    def features_json(base, key):
        features = [{"type": "Feature", "id": "states.%d" % (i + 1),
                     "geometry": {"type": "Point", "coordinates": [lon, lat]},
                     "geometry_name": "the_geom", "properties": {"STATE_NAME": name, "PERSONS": persons}}
                    for i, (name, persons, lat, lon) in enumerate(STATES)]
        link = "%s/wfs?service=WFS&version=1.1.0&request=GetFeature&typeName=topp%%3Astates" \
               "&outputFormat=application%%2Fjson&startIndex=3&authkey=%s" % (base, quote(key, safe=""))
        doc = {"type": "FeatureCollection", "features": features, "totalFeatures": len(STATES),
               "numberMatched": len(STATES), "numberReturned": len(STATES),
               "timeStamp": "2026-11-28T12:00:00.000Z",
               "links": [{"title": "next page", "type": "application/json", "rel": "next", "href": link}],
               "crs": {"type": "name", "properties": {"name": "urn:ogc:def:crs:EPSG::4326"}}}
        return json.dumps(doc).encode()

    @staticmethod
    def jetty_404(uri):
        u = html.escape(uri)
        return ("<html>\n<head>\n<meta http-equiv=\"Content-Type\" content=\"text/html;charset=ISO-8859-1\"/>\n"
                "<title>Error 404 Not Found</title>\n</head>\n<body><h2>HTTP ERROR 404 Not Found</h2>\n"
                "<table>\n<tr><th>URI:</th><td>%s</td></tr>\n<tr><th>STATUS:</th><td>404</td></tr>\n"
                "<tr><th>MESSAGE:</th><td>Not Found</td></tr>\n<tr><th>SERVLET:</th><td>dispatcher</td></tr>\n"
                "</table>\n<p>Try <a href=\"%s\">the same request again</a>.</p>\n"
                "<hr><a href=\"https://eclipse.org/jetty\">Powered by Jetty:// 9.4.52.v20230823</a><hr/>\n\n"
                "</body>\n</html>\n" % (u, u)).encode("latin-1")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "Jetty(9.4.52.v20230823)"
    sys_version = ""

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    @property
    def gs(self):
        return self.server.geoserver

    def do_GET(self):
        self._serve(b"")

    def do_HEAD(self):
        self._serve(b"")

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        self._serve(self.rfile.read(n) if n else b"")

    def _serve(self, body):
        split = urlsplit(self.path)
        query = parse_qsl(split.query, keep_blank_values=True)
        if body and (self.headers.get("Content-Type") or "").startswith("application/x-www-form-urlencoded"):
            query += parse_qsl(body.decode("latin-1"), keep_blank_values=True)
        # KVP names are case-insensitive in OGC services; the authkey module reads `authkey` as written.
        params = {k.lower(): v for k, v in reversed(query)}
        keys = [v for k, v in query if k == "authkey"]
        self.gs.log({"method": self.command, "path": split.path, "query": query, "authkeys": keys,
                     "headers": list(self.headers.items()), "body": body})
        if not keys:
            return self._send(401, "text/html;charset=ISO-8859-1",
                              b"<html><body><h2>HTTP ERROR 401 Unauthorized</h2></body></html>\n",
                              extra=[("WWW-Authenticate", "Basic realm=\"GeoServer Realm\"")])
        key = keys[0]
        if key not in self.gs.keys:
            return self._send(403, "text/html;charset=ISO-8859-1",
                              b"<html><body><h2>HTTP ERROR 403 Forbidden</h2><p>Unknown authentication key."
                              b"</p></body></html>\n")
        base = self.gs.base(self.headers.get("Host"))
        service = params.get("service", "").upper()
        request = params.get("request", "").lower()
        path = split.path.rstrip("/")
        if path == "/geoserver/wms":
            service = service or "WMS"
        if path == "/geoserver/wfs":
            service = service or "WFS"
        if path not in ("/geoserver/ows", "/geoserver/wms", "/geoserver/wfs"):
            return self._send(404, "text/html;charset=ISO-8859-1", GeoServer.jetty_404(self.path))
        if service == "WMS" and request == "getcapabilities":
            return self._send(200, "text/xml;charset=UTF-8", self.gs.wms_capabilities(base, key))
        if service == "WMS" and request == "getmap":
            w = max(1, min(1024, int(params.get("width", "256") or 256)))
            h = max(1, min(1024, int(params.get("height", "256") or 256)))
            return self._send(200, "image/png", png(w, h))
        if service == "WMS" and request == "getlegendgraphic":
            return self._send(200, "image/png", png(20, 20, (200, 60, 30)))
        if service == "WFS" and request == "getcapabilities":
            return self._send(200, "text/xml;charset=UTF-8", self.gs.wfs_capabilities(base, key))
        if service == "WFS" and request == "describefeaturetype":
            return self._send(200, "text/xml; subtype=gml/3.1.1", GeoServer.describe_feature_type(base))
        if service == "WFS" and request == "getfeature":
            fmt = params.get("outputformat", "").lower()
            if fmt in ("application/json", "json", "geojson"):
                return self._send(200, "application/json;charset=UTF-8", GeoServer.features_json(base, key))
            hits = params.get("resulttype", "").lower() == "hits"
            return self._send(200, "text/xml; subtype=gml/3.1.1", GeoServer.features_gml(base, key, hits))
        report = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ServiceExceptionReport version=\"1.3.0\" "
                  "xmlns=\"http://www.opengis.net/ogc\"><ServiceException code=\"OperationNotSupported\">"
                  "No such operation WMS %s</ServiceException></ServiceExceptionReport>\n"
                  % html.escape(request or "(none)")).encode()
        return self._send(400, "application/vnd.ogc.se_xml;charset=UTF-8", report)

    def _send(self, status, ctype, body, extra=()):
        gs = self.gs
        accepts = "gzip" in (self.headers.get("Accept-Encoding") or "").lower()
        coding = None
        if gs.gzip == "always" or (gs.gzip == "auto" and accepts):
            coding, body = "gzip", gziplib.compress(body, 6)
        elif gs.gzip == "deflate":
            coding, body = "deflate", zlib.compress(body, 6)
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        if coding:
            self.send_header("Content-Encoding", coding)
            self.send_header("Vary", "Accept-Encoding")
        for k, v in extra:
            self.send_header(k, v)
        chunked = gs.framing == "chunked"
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command == "HEAD":
            self.wfile.flush()
            return
        piece = gs.piece or len(body) or 1
        for at in range(0, len(body), piece):
            part = body[at:at + piece]
            if chunked:
                part = b"%x\r\n%s\r\n" % (len(part), part)
            self.wfile.write(part)
            self.wfile.flush()
            if gs.piece:
                # Flushed on its own and a moment apart, so the proxy reads it separately.
                time.sleep(0.0005)
        if chunked:
            self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--key", action="append", default=[], help="an accepted authkey (repeatable)")
    ap.add_argument("--gzip", default="auto", choices=["auto", "always", "deflate", "never"])
    ap.add_argument("--framing", default="length", choices=["length", "chunked"])
    ap.add_argument("--piece", type=int, default=0)
    ap.add_argument("--big-capabilities", action="store_true")
    ap.add_argument("--print-port", action="store_true")
    a = ap.parse_args(argv)
    srv = GeoServer(keys={k: "user" for k in a.key}, host=a.host, port=a.port)
    srv.set(gzip=a.gzip, framing=a.framing, piece=a.piece, big_capabilities=a.big_capabilities)
    srv.start()
    if a.print_port:
        print(srv.port, flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    srv.stop()


if __name__ == "__main__":
    main()
