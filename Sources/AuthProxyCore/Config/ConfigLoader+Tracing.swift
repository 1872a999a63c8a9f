/// `[tracing]` and the OpenTelemetry environment variables, merged: a key set in `[tracing]` wins over its variable
/// (as an OTel SDK's programmatic settings win over the environment), and a variable fills in what the table leaves
/// out. Tracing is on when a traces endpoint is known from either, unless `enabled = false`, `OTEL_SDK_DISABLED=true`
/// (without `[tracing]`) or `OTEL_TRACES_EXPORTER=none`.
extension ConfigLoader {
    /// The variables read, in the order they are documented.
    static let tracingVariables = [
        "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
        "OTEL_BSP_SCHEDULE_DELAY", "OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
        "OTEL_EXPORTER_OTLP_CERTIFICATE", "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
    ]

    /// The tracing settings from `table` (`[tracing]`, nil when absent) and the environment; nil: tracing is off.
    func parseTracing(_ table: TableReader?) throws(ConfigError) -> TracingConfig? {
        let env = environment
        func variable(_ name: String) -> String? {
            guard let v = env[name]?.trimmingWhitespace(), !v.isEmpty else { return nil }
            return String(v)
        }
        func envError(_ name: String, _ message: String) -> ConfigError {
            ConfigError(key: name, line: nil, "(environment variable) \(message)")
        }
        func envInt(_ name: String, _ range: ClosedRange<Int>) throws(ConfigError) -> Int? {
            guard let v = variable(name) else { return nil }
            guard let n = Int(v), range.contains(n) else {
                throw envError(name, "'\(v)' is not a whole number in \(range.lowerBound)…\(range.upperBound)")
            }
            return n
        }
        var t = table
        let enabled = try t?.bool("enabled")
        if enabled == false {
            try t?.finish()
            return nil
        }
        if t == nil, variable("OTEL_SDK_DISABLED")?.lowercased() == "true" { return nil }
        if let exporter = variable("OTEL_TRACES_EXPORTER") {
            let names = exporter.split(separator: ",").map { $0.trimmingHTTPWhitespace().lowercased() }
            if names == ["none"], t == nil { return nil }
            guard names.allSatisfy({ $0 == "otlp" || $0 == "none" }) else {
                throw envError("OTEL_TRACES_EXPORTER", "'\(exporter)': only otlp (OTLP over HTTP) or none is supported")
            }
        }
        for name in ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"] {
            if let p = variable(name), p != "http/protobuf" {
                throw envError(
                    name, "'\(p)': authproxy exports OTLP over HTTP with protobuf only (http/protobuf, port 4318)")
            }
        }

        // The endpoint: traces_endpoint / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as is; endpoint /
        // OTEL_EXPORTER_OTLP_ENDPOINT with /v1/traces appended (the specification's rule for the two).
        var endpoint: (url: String, key: String, line: Int?)? = nil
        if let e = try t?.string("traces_endpoint") {
            endpoint = (e, "tracing.traces_endpoint", t?.line(of: "traces_endpoint"))
        } else if let e = try t?.string("endpoint") {
            endpoint = (Self.appendingTracesPath(e), "tracing.endpoint", t?.line(of: "endpoint"))
        } else if let e = variable("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            endpoint = (e, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", nil)
        } else if let e = variable("OTEL_EXPORTER_OTLP_ENDPOINT") {
            endpoint = (Self.appendingTracesPath(e), "OTEL_EXPORTER_OTLP_ENDPOINT", nil)
        }
        guard let endpoint else {
            if let t {
                throw ConfigError(
                    key: "tracing.endpoint", line: t.table.line,
                    "[tracing] needs endpoint (the collector's OTLP/HTTP base URL, e.g. \"http://otel-collector:4318\"), or set OTEL_EXPORTER_OTLP_ENDPOINT"
                )
            }
            return nil
        }
        guard let url = HTTPURL.parse(endpoint.url), url.target.scheme == "http" || url.target.scheme == "https" else {
            throw ConfigError(
                key: endpoint.key, line: endpoint.line,
                "is not an http:// or https:// URL like http://otel-collector:4318/v1/traces")
        }
        var c = TracingConfig(endpoint: url.string)

        if let h = try t?.string("headers") {
            c.headers = try Self.tracingHeaders(h, key: "tracing.headers", line: t?.line(of: "headers"))
        } else if let h = variable("OTEL_EXPORTER_OTLP_TRACES_HEADERS") ?? variable("OTEL_EXPORTER_OTLP_HEADERS") {
            let name =
                variable("OTEL_EXPORTER_OTLP_TRACES_HEADERS") != nil
                ? "OTEL_EXPORTER_OTLP_TRACES_HEADERS" : "OTEL_EXPORTER_OTLP_HEADERS"
            c.headers = try Self.tracingHeaders(h, key: name, line: nil)
        }
        if let s = try t?.string("service_name") {
            c.serviceName = s
        } else if let s = variable("OTEL_SERVICE_NAME") {
            c.serviceName = s
        } else if let s = variable("OTEL_RESOURCE_ATTRIBUTES").flatMap({
            Self.pairs($0)?.first { $0.name == "service.name" }?.value
        }) {
            c.serviceName = s
        }
        if let r = variable("OTEL_RESOURCE_ATTRIBUTES") {
            guard let pairs = Self.pairs(r) else {
                throw envError("OTEL_RESOURCE_ATTRIBUTES", "is not a list of key=value pairs separated by commas")
            }
            c.resourceAttributes = pairs.filter { $0.name != "service.name" }
        }

        let samplerName: (name: String, key: String, line: Int?)?
        if let s = try t?.string("sampler") {
            samplerName = (s, "tracing.sampler", t?.line(of: "sampler"))
        } else if let s = variable("OTEL_TRACES_SAMPLER") {
            samplerName = (s, "OTEL_TRACES_SAMPLER", nil)
        } else {
            samplerName = nil
        }
        let argument: (value: String, key: String, line: Int?)?
        if let a = try t?.string("sampler_arg") {
            argument = (a, "tracing.sampler_arg", t?.line(of: "sampler_arg"))
        } else if let a = variable("OTEL_TRACES_SAMPLER_ARG") {
            argument = (a, "OTEL_TRACES_SAMPLER_ARG", nil)
        } else {
            argument = nil
        }
        if let samplerName {
            switch TraceSampler.named(samplerName.name, argument: argument?.value) {
            case .success(let s)?: c.sampler = s
            case .failure(let p)?:
                throw ConfigError(key: argument?.key ?? samplerName.key, line: argument?.line, p.message)
            case nil:
                throw ConfigError(
                    key: samplerName.key, line: samplerName.line,
                    "'\(samplerName.name)' is not one of \(TraceSampler.names.joined(separator: ", "))")
            }
        }

        // A [tracing] key wins over its variables.
        func number(_ key: String, _ range: ClosedRange<Int>, _ names: [String]) throws(ConfigError) -> Int? {
            if let n = try t?.int(key, range: range) { return n }
            for name in names {
                if let n = try envInt(name, range) { return n }
            }
            return nil
        }
        if let n = try number("max_queue_size", 1...1_000_000, ["OTEL_BSP_MAX_QUEUE_SIZE"]) { c.maxQueueSize = n }
        if let n = try number("max_export_batch_size", 1...100_000, ["OTEL_BSP_MAX_EXPORT_BATCH_SIZE"]) {
            c.maxExportBatchSize = n
        }
        c.maxExportBatchSize = min(c.maxExportBatchSize, c.maxQueueSize)
        if let n = try number("schedule_delay_ms", 10...600_000, ["OTEL_BSP_SCHEDULE_DELAY"]) {
            c.scheduleDelayMillis = n
        }
        let timeoutVariables = ["OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"]
        if let n = try number("timeout_ms", 100...600_000, timeoutVariables) { c.exportTimeoutMillis = n }
        try tracingCA(t: &t, variable: variable, into: &c)
        try t?.finish()
        return c
    }

    /// `ca_file`, else `OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE` / `OTEL_EXPORTER_OTLP_CERTIFICATE`: the CA
    /// certificates (PEM) an `https://` endpoint's certificate may chain to besides the system's, read now (a file
    /// that cannot be read, or holds no certificate, is an error naming the key). The variable is ignored for an
    /// `http://` endpoint, as OTel SDKs do; `ca_file` there is an error (it would do nothing).
    private func tracingCA(
        t: inout TableReader?, variable: (String) -> String?, into c: inout TracingConfig
    ) throws(ConfigError) {
        let https = c.endpoint.lowercased().hasPrefix("https://")
        let source: (path: String, key: String, line: Int?)
        if let f = try t?.string("ca_file") {
            guard https else {
                throw ConfigError(
                    key: "tracing.ca_file", line: t?.line(of: "ca_file"),
                    "is for an https:// endpoint; the endpoint is \(c.redactedEndpoint)")
            }
            source = (f, "tracing.ca_file", t?.line(of: "ca_file"))
        } else if https, let f = variable("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE") {
            source = (f, "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", nil)
        } else if https, let f = variable("OTEL_EXPORTER_OTLP_CERTIFICATE") {
            source = (f, "OTEL_EXPORTER_OTLP_CERTIFICATE", nil)
        } else {
            return
        }
        let what = source.line == nil ? "(environment variable) " : ""
        guard let text = readTextFile(source.path) else {
            throw ConfigError(
                key: source.key, line: source.line, "\(what)cannot read \(source.path): \(lastErrorString())")
        }
        guard text.contains("-----BEGIN CERTIFICATE-----") else {
            throw ConfigError(
                key: source.key, line: source.line,
                "\(what)\(source.path) holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
        }
        c.caFile = source.path
        c.caBundle = Array(text.utf8)
    }

    /// `base` + `/v1/traces`, with one slash between them.
    static func appendingTracesPath(_ base: String) -> String {
        var b = base
        while b.hasSuffix("/") { b.removeLast() }
        return b + "/v1/traces"
    }

    /// `key=value,key2=value2` (W3C Baggage-like, values percent-decoded), as `OTEL_EXPORTER_OTLP_HEADERS` and
    /// `OTEL_RESOURCE_ATTRIBUTES` are written; nil when malformed.
    static func pairs(_ text: String) -> [TracingConfig.Header]? {
        var out: [TracingConfig.Header] = []
        for item in text.split(separator: ",") {
            guard let eq = item.firstIndex(of: "=") else { return nil }
            let name = item[..<eq].trimmingHTTPWhitespace()
            let value = item[item.index(after: eq)...].trimmingHTTPWhitespace()
            guard !name.isEmpty else { return nil }
            out.append(.init(name: String(name), value: String(value).removingPercentEncodingLeniently()))
        }
        return out
    }

    /// The export's extra fields: names must be tokens and values carry no line breaks (they go into a request
    /// head). The value is never quoted in an error: it is usually an API key.
    static func tracingHeaders(_ text: String, key: String, line: Int?) throws(ConfigError) -> [TracingConfig.Header] {
        guard let pairs = pairs(text) else {
            throw ConfigError(key: key, line: line, "is not a list of name=value pairs separated by commas")
        }
        for p in pairs {
            let nameOK = p.name.utf8.allSatisfy { c in
                (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A)
                    || "!#$%&'*+-.^_`|~".utf8.contains(c)
            }
            guard nameOK, p.value.utf8.allSatisfy({ $0 >= 0x20 && $0 != 0x7F || $0 == 0x09 }) else {
                throw ConfigError(
                    key: key, line: line,
                    "field '\(nameOK ? p.name : "(invalid name)")' cannot go into a request head (a name must be a token; a value has no control characters)"
                )
            }
        }
        return pairs
    }
}

extension String {
    /// `%XX` sequences decoded; a malformed one is kept as written.
    func removingPercentEncodingLeniently() -> String {
        let b = Array(utf8)
        guard b.contains(0x25) else { return self }
        var out: [UInt8] = []
        var i = 0
        func hex(_ c: UInt8) -> UInt8? {
            switch c {
            case 0x30...0x39: return c - 0x30
            case 0x41...0x46: return c - 0x41 + 10
            case 0x61...0x66: return c - 0x61 + 10
            default: return nil
            }
        }
        while i < b.count {
            if b[i] == 0x25, i + 2 < b.count, let h = hex(b[i + 1]), let l = hex(b[i + 2]) {
                out.append(h << 4 | l)
                i += 3
            } else {
                out.append(b[i])
                i += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
