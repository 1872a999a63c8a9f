/// Writes the proxy auto-configuration (PAC) script the proxy serves at `/proxy.pac` and `/wpad.dat`: requests to
/// the scheme, host and port of a credential's `match` go through the proxy, everything else goes directly. Pure:
/// the same rules, address and fallback give the same text, byte for byte (the `ETag` is its hash).
///
/// The script looks at the scheme, host and port only. Browsers call `FindProxyForURL` with `https://` URLs cut to
/// `https://host/` (Chrome always since version 75), so a path cannot be told apart there, and a credential for
/// `https://h/arcgis` sends all of `h` through the proxy (which relays what no credential matches unchanged). It
/// never calls `dnsResolve`, `isInNet` or `myIpAddress`: those make the client resolve names synchronously, and
/// a slow DNS server then stalls every request the browser makes.
///
/// The tables live inside `FindProxyForURL`, so the script defines no other global: a page that ran it (see
/// ``PacRequestPolicy``) would find no list of the hosts in its global scope.
enum PacScriptBuilder {
    /// One host (or `*.domain`) on one scheme and port that goes through the proxy.
    struct Rule: Hashable, Sendable {
        /// `http` or `https` (`ws`/`wss` prefixes are already their handshake's scheme, ``MatchPrefix/parse(_:)``).
        var scheme: String
        /// Lower case, without brackets for IPv6 and without the `*.` of a wildcard.
        var host: String
        var wildcard: Bool
        var port: Int
    }

    /// The rules for `credentials`' `match` entries (every type: each one changes what the proxy does for the
    /// host), in the order written, each once.
    static func rules(_ credentials: [Credential]) -> [Rule] {
        var seen = Set<Rule>()
        var out: [Rule] = []
        for c in credentials {
            for m in c.match {
                let r = Rule(scheme: m.scheme, host: m.host, wildcard: m.wildcard, port: m.effectivePort)
                if seen.insert(r).inserted { out.append(r) }
            }
        }
        return out
    }

    /// What matched hosts get: `PROXY address`, and `; DIRECT` after it under `pac_fallback = "direct"`.
    static func directive(address: String, fallback: PacFallback) -> String {
        switch fallback {
        case .none: return "PROXY \(address)"
        case .direct: return "PROXY \(address); DIRECT"
        }
    }

    /// The script. `address` is the `host:port` clients reach the proxy at; every string from the configuration
    /// goes in as an escaped JavaScript literal (``jsString(_:)``), so no host name can end the string.
    static func script(rules: [Rule], address: String, fallback: PacFallback) -> String {
        let exact = rules.filter { !$0.wildcard }.map { "\(jsString("\($0.scheme)://\($0.host):\($0.port)")): 1" }
        let suffixes = rules.filter(\.wildcard).map {
            "[\(jsString($0.scheme)), \($0.port), \(jsString("." + $0.host))]"
        }
        // No trailing commas: old engines (JScript in WinHTTP) read `[a,]` as two elements.
        return """
            // Proxy auto-configuration served by authproxy: the hosts its credentials match go through it,
            // everything else goes directly. Generated from the configuration; it changes when that is reloaded.
            function FindProxyForURL(url, host) {
                var authproxyDirective = \(jsString(directive(address: address, fallback: fallback)));
                var authproxyHosts = {\(exact.isEmpty ? "" : "\n        " + exact.joined(separator: ",\n        ") + "\n    ")};
                var authproxyDomains = [\(suffixes.isEmpty ? "" : "\n        " + suffixes.joined(separator: ",\n        ") + "\n    ")];
                var h = String(host).toLowerCase();
                if (h.charAt(h.length - 1) == ".") h = h.substring(0, h.length - 1);
                if (h.charAt(0) == "[" && h.charAt(h.length - 1) == "]") h = h.substring(1, h.length - 1);
                var u = String(url);
                var colon = u.indexOf(":");
                if (colon < 0) return "DIRECT";
                var scheme = u.substring(0, colon).toLowerCase();
                if (scheme == "ws") scheme = "http";
                if (scheme == "wss") scheme = "https";
                if (scheme != "http" && scheme != "https") return "DIRECT";
                var port = scheme == "https" ? 443 : 80;
                var rest = u.substring(colon + 1);
                if (rest.substring(0, 2) == "//") {
                    rest = rest.substring(2);
                    var end = rest.search(/[\\/?#]/);
                    var authority = end < 0 ? rest : rest.substring(0, end);
                    authority = authority.substring(authority.lastIndexOf("@") + 1);
                    var p = authority.lastIndexOf(":");
                    if (p > authority.lastIndexOf("]")) {
                        var digits = authority.substring(p + 1);
                        if (/^[0-9]+$/.test(digits)) port = parseInt(digits, 10);
                    }
                }
                if (Object.prototype.hasOwnProperty.call(authproxyHosts, scheme + "://" + h + ":" + port)) return authproxyDirective;
                for (var i = 0; i < authproxyDomains.length; i++) {
                    var d = authproxyDomains[i];
                    if (d[0] == scheme && d[1] == port && dnsDomainIs(h, d[2])) return authproxyDirective;
                }
                return "DIRECT";
            }

            """
    }

    /// `s` as a double-quoted JavaScript string literal: letters, digits and `.-_:/;[]` and space as they are,
    /// everything else (quotes, backslashes, line breaks, `<`, non-ASCII) as `\uXXXX` escapes of its UTF-16 units.
    static func jsString(_ s: String) -> String {
        var out = "\""
        for unit in s.utf16 {
            let plain =
                (unit >= 0x61 && unit <= 0x7a) || (unit >= 0x41 && unit <= 0x5a) || (unit >= 0x30 && unit <= 0x39)
                || [0x2e, 0x2d, 0x5f, 0x3a, 0x2f, 0x3b, 0x5b, 0x5d, 0x20].contains(unit)
            if plain {
                out.unicodeScalars.append(Unicode.Scalar(UInt8(unit)))
            } else {
                let hex = String(unit, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            }
        }
        return out + "\""
    }
}
