import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// Writes one line per log event to stderr, as `key=value` text or as one JSON object (for containers).
/// Each line goes out in a single `write(2)`, so lines from different event loops never interleave.
public struct ProxyLogHandler: LogHandler {
    /// The level: the shared ``LiveLogLevel``'s (which a configuration reload changes), unless set on this
    /// handler.
    public var logLevel: Logger.Level {
        get { fixedLevel ?? live?.level ?? .info }
        set { fixedLevel = newValue }
    }
    private var fixedLevel: Logger.Level?
    private let live: LiveLogLevel?
    public var metadata: Logger.Metadata = [:]
    public let format: LogFormat
    private let label: String

    public init(label: String, level: Logger.Level, format: LogFormat) {
        self.label = label
        self.fixedLevel = level
        self.live = nil
        self.format = format
    }

    /// A handler whose level follows `level`.
    public init(label: String, level: LiveLogLevel, format: LogFormat) {
        self.label = label
        self.fixedLevel = nil
        self.live = level
        self.format = format
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var all = metadata
        if let m = event.metadata { all.merge(m) { $1 } }
        let line: String
        let ts = timestamp()
        switch format {
        case .text:
            var s = "\(ts) \(event.level.rawValue) \(event.message)"
            for (k, v) in all.sorted(by: { $0.key < $1.key }) { s += " \(k)=\(textValue(v))" }
            line = s + "\n"
        case .json:
            var s =
                "{\"ts\":\"\(ts)\",\"level\":\"\(event.level.rawValue)\",\"message\":\"\(jsonEscaped("\(event.message)"))\""
            for (k, v) in all.sorted(by: { $0.key < $1.key }) { s += ",\"\(jsonEscaped(k))\":\(jsonValue(v))" }
            line = s + "}\n"
        }
        var bytes = Array(line.utf8)
        bytes.withUnsafeMutableBytes { raw in
            var off = 0
            while off < raw.count {
                let n = write(2, raw.baseAddress! + off, raw.count - off)
                if n < 0 { if errno == EINTR { continue }; return }
                off += n
            }
        }
    }

    private func textValue(_ v: Logger.MetadataValue) -> String {
        let s = "\(v)"
        return s.contains(where: { $0 == " " || $0 == "\"" }) || s.isEmpty ? "\"\(jsonEscaped(s))\"" : s
    }

    private func jsonValue(_ v: Logger.MetadataValue) -> String {
        switch v {
        case .string(let s): return "\"\(jsonEscaped(s))\""
        case .stringConvertible(let c):
            let s = c.description
            if c is Int || c is Double || c is Int64 || c is UInt64 { return s }
            return "\"\(jsonEscaped(s))\""
        case .array(let a): return "[" + a.map(jsonValue).joined(separator: ",") + "]"
        case .dictionary(let d):
            return "{"
                + d.sorted { $0.key < $1.key }.map { "\"\(jsonEscaped($0.key))\":\(jsonValue($0.value))" }
                .joined(separator: ",") + "}"
        }
    }
}

/// UTC time with milliseconds, RFC 3339.
func timestamp() -> String {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    return rfc3339(millis: Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec / 1_000_000), fraction: true)
}
