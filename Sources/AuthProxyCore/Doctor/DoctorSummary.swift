/// The human-readable report of `authproxy doctor` (printed on stderr): what each probe saw and what it
/// means, in the order a request meets them (TLS, `rest/info`, the URL itself), then what to configure.
///
/// Never shows a query string (the probed URL may carry a token), a token68 (NTLM/Negotiate handshake data)
/// or anything read from `--config` beyond credential names and types.
enum DoctorSummary {
    static func render(_ f: DoctorFindings, _ advice: CredentialAdvisor.Advice) -> String {
        var lines = ["authproxy doctor: \(f.displayURL)"]
        func add(_ label: String, _ first: String, _ more: [String] = []) {
            let pad = String(repeating: " ", count: 11)
            lines.append(label.padding(toLength: 11) + first)
            lines += more.map { pad + $0 }
        }

        if let t = f.tls {
            var more = [
                "certificate: \(t.subject), issued by \(t.issuer)" + (t.notAfter.map { ", valid until \($0)" } ?? "")
            ]
            more.append(
                t.systemTrust.ok
                    ? "verifies against the system CAs"
                    : "does NOT verify against the system CAs: \(t.systemTrust.reason ?? "unknown reason")")
            if let c = t.configuredTrust {
                more.append(
                    c.verification.ok
                        ? "verifies with server-trust '\(c.credential)' (\(c.setting)) from --config"
                        : "does NOT verify with server-trust '\(c.credential)' (\(c.setting)): \(c.verification.reason ?? "unknown reason")"
                )
            }
            if let r = t.clientCertificate {
                var s =
                    "asks for a client certificate "
                    + (r.duringHandshake ? "in the handshake" : "after the handshake (post-handshake/renegotiation)")
                if !r.acceptedIssuers.isEmpty {
                    s += "; accepted issuers: \(r.acceptedIssuers.joined(separator: "; "))"
                }
                more.append(s)
                more.append(
                    r.refusal.map { "without one the server refuses: \($0)" }
                        ?? "without one the server still answers (optional)")
            } else {
                more.append("asks for no client certificate")
            }
            add("TLS", t.version, more)
        }

        if let parents = f.parents {
            add(
                "route", "through parent proxy " + parents.joined(separator: " or "),
                f.target.scheme == "https"
                    ? ["TLS details not probed: the handshake goes through the parent's tunnel"] : [])
        }
        if let p = f.restInfo { add("rest/info", p.url, describe(p)) }
        if let p = f.portalInfo { add("portal", p.url, describe(p)) }

        if let r = f.response {
            var more: [String] = []
            if r.readWithoutVerification {
                more.append(
                    "(read without certificate verification, to see what else it needs; nothing secret was sent)")
            }
            if let l = r.location { more.append("redirects to \(l)") }
            if r.challenges.isEmpty {
                if r.status == 401 { more.append("401 without a WWW-Authenticate challenge") }
            } else {
                more.append("WWW-Authenticate: " + r.challenges.map(\.description).joined(separator: ", "))
            }
            if let e = r.arcgisError { more.append("ArcGIS error \(e.label): \(e.explanation)") }
            add("request", "GET → HTTP \(r.status)" + (r.contentType.map { " (\($0))" } ?? ""), more)
        } else if let why = f.requestFailure {
            add("request", "no answer: \(why)")
        }

        if !f.configured.isEmpty {
            add("--config", "applies: " + f.configured.map { "\($0.name) (\($0.type))" }.joined(separator: ", "))
        }
        var verdict: [String] = advice.notes
        let active = advice.suggestions.filter { !$0.isAlternative }
        if active.isEmpty {
            verdict.insert(
                advice.suggestions.isEmpty && advice.notes.isEmpty
                    ? "no credential needed: the service answered without asking for any"
                    : "no new credential needed", at: 0)
        } else {
            verdict.insert(
                "configure: " + active.map { "\($0.type) (\($0.name))" }.joined(separator: ", ")
                    + " — the [[credential]] block(s) are on stdout", at: 0)
            let env = active.flatMap(\.environmentVariables)
            if !env.isEmpty { verdict.append("then set \(env.joined(separator: ", ")) in the proxy's environment") }
        }
        add("verdict", verdict[0], Array(verdict.dropFirst()))
        return lines.joined(separator: "\n") + "\n"
    }

    private static func describe(_ p: DoctorFindings.InfoProbe) -> [String] {
        if let failure = p.failure { return ["not read: \(failure)"] }
        let status = p.status.map { "HTTP \($0)" } ?? "no status"
        switch p.reading {
        case .info(let i)?:
            var s: [String] = []
            let kind = p.url.lowercased().contains("/sharing/") ? "Portal" : "ArcGIS Server"
            s.append(
                kind + (i.version.map { " \($0)" } ?? " (version not given)") + ", "
                    + (i.usesTokens ? "token-based security" : "no token-based security"))
            if let t = i.tokenServicesURL { s.append("token service: \(t)") }
            if let v = i.shortLivedTokenValidity { s.append("short-lived token validity: \(v) min") }
            // A portal names itself there; only a server's owningSystemUrl (its federation) is news.
            if let o = i.owningSystemURL, kind != "Portal" { s.append("owningSystemUrl: \(o) (federated)") }
            return s
        case .error(let e)?:
            return [
                "\(status): ArcGIS error \(e.code.map(String.init) ?? "") \(e.message)"
                    + (e.rejectsToken ? " (even rest/info wants a token)" : "")
            ]
        case .notArcGIS?, nil:
            return ["\(status): not ArcGIS server information (no ArcGIS Server or Portal at this root)"]
        }
    }
}

extension String {
    fileprivate func padding(toLength n: Int) -> String {
        count >= n ? self + " " : self + String(repeating: " ", count: n - count)
    }
}
