/// What a PAC file's `FindProxyForURL` answered for one destination, read into ordered choices: the string
/// `"PROXY a:8080; HTTPS b:443; SOCKS5 c:1080; DIRECT"` is a failover list, tried left to right. Pure.
///
/// Keywords are those browsers accept: `PROXY` and `HTTP` (a plain HTTP parent), `HTTPS` (TLS to the parent),
/// `SOCKS`, `SOCKS5` (a SOCKS5 parent that resolves the name: authproxy never resolves a name a PAC sent to a
/// parent), `DIRECT`. An entry authproxy cannot use (`SOCKS4`, a missing or bad address, an unknown keyword) is
/// skipped with a reason, as browsers skip it; an answer with nothing usable is `DIRECT`, as in browsers.
public struct PacDirective: Equatable, Sendable {
    public enum Choice: Equatable, Sendable {
        case direct
        case proxy(ParentProxy)
    }

    public var choices: [Choice]
    /// The entries left out, each with why (for a warning).
    public var skipped: [String]

    public init(choices: [Choice], skipped: [String] = []) {
        self.choices = choices
        self.skipped = skipped
    }

    public static func parse(_ answer: String) -> PacDirective {
        var choices: [Choice] = []
        var skipped: [String] = []
        for raw in answer.split(separator: ";") {
            let entry = raw.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\r" || $0 == "\n" })
            guard let keyword = entry.first else { continue }
            let shown = entry.joined(separator: " ")
            let kind = keyword.uppercased()
            if kind == "DIRECT" {
                if entry.count == 1 {
                    choices.append(.direct)
                } else {
                    skipped.append("\(shown): DIRECT takes no address")
                }
                continue
            }
            let scheme: ParentProxy.Scheme
            let defaultPort: Int
            switch kind {
            case "PROXY", "HTTP":
                scheme = .http
                defaultPort = 80
            case "HTTPS":
                scheme = .https
                defaultPort = 443
            case "SOCKS", "SOCKS5":
                scheme = .socks5h
                defaultPort = 1080
            case "SOCKS4":
                skipped.append("\(shown): SOCKS4 parents are not supported (SOCKS5 is)")
                continue
            default:
                skipped.append("\(shown): unknown keyword \(keyword)")
                continue
            }
            guard entry.count == 2 else {
                skipped.append("\(shown): \(kind) needs one host:port")
                continue
            }
            guard let parsed = try? RequestHeadParser.parseAuthority(entry[1]), !parsed.0.contains("*") else {
                skipped.append("\(shown): \(entry[1]) is not a host:port")
                continue
            }
            let p = ParentProxy(scheme: scheme, host: parsed.0.lowercased(), port: parsed.1 ?? defaultPort)
            if !choices.contains(.proxy(p)) { choices.append(.proxy(p)) }
        }
        return PacDirective(choices: choices, skipped: skipped)
    }

    /// The parents to try, in order, and whether the destination is reached directly when every one of them
    /// failed: the parents before the first `DIRECT`, then that `DIRECT`. Entries after a `DIRECT` are never
    /// reached (a direct connection has no failover). No parents: direct.
    public var route: (parents: [ParentProxy], fallbackDirect: Bool) {
        var parents: [ParentProxy] = []
        for c in choices {
            switch c {
            case .direct: return (parents, true)
            case .proxy(let p): parents.append(p)
            }
        }
        return (parents, parents.isEmpty)
    }
}
