/// The admin listener's `GET /` page: a ``StatusReport`` as one self-contained HTML document (inline CSS, no
/// script, no external resource), readable on a host without network access. Every value is HTML-escaped.
enum StatusPage {
    static func render(_ r: StatusReport) -> String {
        var h = """
            <!DOCTYPE html>
            <html lang="en"><head><meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <title>authproxy status</title>
            <style>
            body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em;color:#1b1f24;background:#fff}
            h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em}
            table{border-collapse:collapse;margin:.3em 0 1em}th,td{border:1px solid #d0d7de;padding:.3em .6em;text-align:left;vertical-align:top}
            th{background:#f6f8fa}.ok{color:#116329;font-weight:600}.warn{color:#9a6700;font-weight:600}.bad{color:#cf222e;font-weight:600}
            .muted{color:#57606a}code{font:12px ui-monospace,monospace}
            </style></head><body>

            """
        h += "<h1>authproxy \(esc(r.version))</h1>\n"
        h +=
            "<p class=\"muted\">started \(esc(r.startedAt)), up \(duration(r.uptimeSeconds)); page generated \(esc(r.generatedAt))</p>\n"
        h +=
            "<p class=\"muted\" id=\"workers\">\(r.workers) event loop\(r.workers == 1 ? "" : "s"); \(esc(r.cpus))</p>\n"
        if r.ready {
            h += "<p id=\"readiness\" class=\"ok\">Ready</p>\n"
        } else {
            h += "<p id=\"readiness\" class=\"bad\">Not ready</p><ul>\n"
            for reason in r.notReadyBecause { h += "<li>\(esc(reason))</li>\n" }
            h += "</ul>\n"
        }

        h += "<h2>Listeners</h2>\n<table id=\"listeners\"><tr><th>address</th><th>state</th></tr>\n"
        for l in r.listeners {
            h +=
                "<tr><td><code>\(esc(l.address))</code></td><td class=\"\(l.open ? "ok" : "bad")\">\(l.open ? "open" : "closed")</td></tr>\n"
        }
        h +=
            "</table>\n<p>Client connections: <b id=\"connections\">\(r.clientConnections)</b>; CONNECT tunnels: <b id=\"tunnels\">\(r.tunnels)</b></p>\n"

        h += "<h2>Credentials</h2>\n"
        if r.credentials.isEmpty { h += "<p class=\"muted\">none configured</p>\n" }
        h +=
            "<table id=\"credentials\"><tr><th>name</th><th>type</th><th>matches</th><th>token</th>"
            + "<th>requests (5 min)</th><th>rejections (5 min)</th><th>rate-limited (5 min / total)</th></tr>\n"
        for c in r.credentials {
            h +=
                "<tr class=\"credential\" data-name=\"\(esc(c.name))\"><td><b>\(esc(c.name))</b>\(c.prefetch ? " <span class=\"muted\">(prefetch)</span>" : "")</td>"
            h +=
                "<td>\(esc(c.type))</td><td>\(c.match.map { "<code>\(esc($0))</code>" }.joined(separator: "<br>"))</td><td>"
            h += tokenCell(c)
            h += expiryCell(c)
            h += "</td><td>\(c.requestsLast5Min)</td><td>\(c.rejectionsLast5Min)</td>"
            h += "<td>\(c.rateLimitedLast5Min) / \(c.rateLimitedTotal)</td></tr>\n"
        }
        h += "</table>\n"

        if !r.limits.isEmpty { h += limitsTable(r.limits) }

        let withAuth = r.credentials.filter { !$0.networkAuth.isEmpty }
        h += "<h2>Network authentication</h2>\n"
        if withAuth.isEmpty {
            h += "<p class=\"muted\">no upstream challenge answered yet</p>\n"
        } else {
            h +=
                "<table id=\"network-auth\"><tr><th>credential</th><th>scheme</th><th>succeeded</th><th>failed</th><th>last</th></tr>\n"
            for c in withAuth {
                for a in c.networkAuth {
                    h +=
                        "<tr><td>\(esc(c.name))</td><td>\(esc(a.scheme))</td><td>\(a.successes)</td><td>\(a.failures)</td>"
                    h +=
                        "<td class=\"\(a.lastSucceeded ? "ok" : "bad")\">\(esc(a.last ?? "-")) \(a.lastSucceeded ? "succeeded" : "failed")</td></tr>\n"
                }
            }
            h += "</table>\n"
        }

        h += "<h2>HTTPS interception</h2>\n"
        if let i = r.interception {
            h += "<table id=\"interception\"><tr><th>CA subject</th><td><code>\(esc(i.caSubject))</code></td></tr>"
            h += "<tr><th>CA expires</th><td>\(esc(i.caExpires ?? "-"))</td></tr>"
            h += "<tr><th>certificates minted</th><td>\(i.certificatesMinted)</td></tr></table>\n"
        } else {
            h += "<p class=\"muted\">off (no [tls] CA configured)</p>\n"
        }

        if !r.parents.isEmpty {
            h +=
                "<h2>Parent proxies</h2>\n<table id=\"parents\"><tr><th>parent</th><th>requests</th><th>failures</th><th>state</th></tr>\n"
            for p in r.parents {
                let failures = p.failures.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(
                    separator: ", ")
                h +=
                    "<tr><td><code>\(esc(p.url))</code></td><td>\(p.requests)</td><td>\(esc(failures.isEmpty ? "-" : failures))</td>"
                h += "<td class=\"\(p.inBackoff ? "bad" : "ok")\">\(p.inBackoff ? "in backoff" : "in use")</td></tr>\n"
            }
            h += "</table>\n"
        }

        if let c = r.cluster {
            h +=
                "<h2>Fleet ([cluster])</h2>\n<table id=\"cluster\"><tr><th>Redis</th><td><code>\(esc(c.redis))</code></td></tr>\n"
            h +=
                "<tr><th>state</th><td class=\"\(c.connected ? "ok" : "bad")\">\(c.connected ? "connected: tokens shared" : "not connected: this replica works alone")"
            h += "\(c.since.map { " since \(esc($0))" } ?? "")</td></tr>\n"
            if let p = c.problem, !c.connected { h += "<tr><th>cause</th><td>\(esc(p))</td></tr>\n" }
            if let l = c.limits {
                let fallback = l == "fallback"
                h +=
                    "<tr><th>limits</th><td id=\"fleet-limits\" class=\"\(fallback ? "bad" : "ok")\">"
                    + (fallback
                        ? "fallback: this replica enforces its share (each limit ÷ \(c.replicas ?? 1) replicas)"
                        : "shared: counted by the fleet in Redis")
                h += "\(c.limitsSince.map { " since \(esc($0))" } ?? "")"
                h += "\(c.limitsProblem.map { " — \(esc($0))" } ?? "")</td></tr>\n"
            }
            h +=
                "<tr><th>required</th><td>\(c.required ? "yes (not ready while not connected)" : "no")</td></tr></table>\n"
        }

        if let reload = r.lastReload {
            h += "<h2>Configuration</h2>\n<p id=\"reload\">Last reload \(esc(reload.at)): "
            h +=
                "<span class=\"\(reload.applied ? "ok" : "bad")\">\(reload.applied ? "applied" : "rejected")</span> — \(esc(reload.message))</p>\n"
        }
        h +=
            "<p class=\"muted\">Machine-readable: <a href=\"status.json\">status.json</a>, <a href=\"metrics\">metrics</a>, "
            + "<a href=\"readyz\">readyz</a>.</p>\n</body></html>\n"
        return h
    }

    /// The limits that protect upstreams, as `/status.json`'s `limits` lists them: a concurrency cap's open and
    /// queued requests and refusals, a credential's rate limit and daily quota (with, under `[cluster]`, whether
    /// the fleet counts it or this replica enforces its share).
    static func limitsTable(_ limits: [StatusReport.Limit]) -> String {
        var h = "<h2>Limits</h2>\n<table id=\"limits\"><tr><th>scope</th><th>name</th><th>concurrency</th>"
        h += "<th>refused (queue full / timeout)</th><th>rate limit</th><th>daily quota</th></tr>\n"
        for l in limits {
            h += "<tr class=\"limit\" data-scope=\"\(esc(l.scope))\" data-name=\"\(esc(l.name))\">"
            h += "<td>\(esc(l.scope))</td><td><b>\(esc(l.name))</b></td><td>"
            if let m = l.maxConcurrent {
                h += "\(l.open ?? 0) open of \(m), \(l.queued ?? 0) queued (at most \(l.maxQueued ?? 0))"
            } else {
                h += "-"
            }
            h += "</td><td>"
            if l.maxConcurrent != nil {
                h += "\(l.refusedQueueFull ?? 0) / \(l.refusedQueueTimeout ?? 0)"
            } else {
                h += "-"
            }
            h += "</td><td>"
            let fleet = l.fleet.map { $0 == "share" ? " <span class=\"bad\">this replica's share</span>" : " (fleet)" }
            if let rate = l.rateLimit {
                h += "\(esc(rate)) per \(esc(l.rateLimitScope ?? "client"))"
                if l.rateLimitScope == "credential" {
                    h += fleet ?? ""
                    if let used = l.rateLimitUsed { h += ", \(used) used this window" }
                    if let share = l.rateLimitShare { h += ", share \(share)" }
                }
            } else {
                h += "-"
            }
            h += "</td><td>"
            if let q = l.dailyQuota {
                h += "\(l.dailyQuotaUsed ?? 0) of \(q) used today" + (fleet ?? "")
                if let share = l.dailyQuotaShare { h += ", share \(share)" }
            } else {
                h += "-"
            }
            h += "</td></tr>\n"
        }
        return h + "</table>\n"
    }

    /// Which tokens the credential holds; before it has any, what its kind's token source means for it (read from
    /// the report, so a new kind needs nothing here).
    private static func tokenCell(_ c: StatusReport.Credential) -> String {
        if c.tokens.isEmpty {
            if !c.keySlots.isEmpty { return keySlotCell(c.keySlots) + detailsList(c.details) }
            switch c.tokenSource {
            case "fixed": return "<span class=\"ok\">configured</span>" + detailsList(c.details)
            case "fetched": return "<span class=\"muted\">no token requested yet</span>" + detailsList(c.details)
            default: return c.details.isEmpty ? "<span class=\"muted\">—</span>" : detailsList(c.details)
            }
        }
        var s = ""
        for t in c.tokens {
            let cls: String
            switch t.state {
            case "valid": cls = "ok"
            case "refreshing": cls = "warn"
            default: cls = "bad"
            }
            s += "<div class=\"token\" data-state=\"\(esc(t.state))\"><span class=\"\(cls)\">\(esc(t.state))</span>"
            s += " <span class=\"muted\">for</span> <code>\(esc(t.root))</code>"
            if let v = t.validUntil { s += "<br>valid until \(esc(v))" }
            if let l = t.lastRefresh { s += "<br>last refresh \(esc(l))" }
            if let e = t.lastError, t.state != "valid" { s += "<br>last error: \(esc(e))" }
            if let n = t.nextRetry { s += "<br>next retry \(esc(n))" }
            s += "</div>"
        }
        return s
    }

    /// The kind's own settings summary (``StatusReport/Credential/details``).
    private static func detailsList(_ details: [StatusReport.Detail]) -> String {
        var s = ""
        for d in details {
            s += "<div class=\"detail muted\">\(esc(d.name)): \(esc(d.value))</div>"
        }
        return s
    }

    /// An API key's slots: which one is in use, and which ones the server rejected or have expired.
    private static func keySlotCell(_ slots: [StatusReport.KeySlot]) -> String {
        var s = ""
        for k in slots {
            let cls: String
            switch k.state {
            case "in_use": cls = "ok"
            case "standby": cls = "muted"
            default: cls = "bad"
            }
            s +=
                "<div class=\"keyslot\" data-state=\"\(esc(k.state))\"><span class=\"\(cls)\">key slot \(k.slot): \(esc(k.state.replacing("_", with: " ")))</span>"
            if let at = k.rejectedAt { s += " <span class=\"muted\">(rejected \(esc(at)))</span>" }
            s += "</div>"
        }
        return s
    }

    /// The refresh token, keys and certificate of a credential and when they lapse (access tokens are in
    /// ``tokenCell(_:)``): highlighted within `[proxy] expiry_warning_days`.
    private static func expiryCell(_ c: StatusReport.Credential) -> String {
        var s = ""
        for e in c.expiries where e.what != CredentialExpiry.What.accessToken.rawValue {
            let what = e.what.replacing("_", with: " ") + (e.which.map { " \($0)" } ?? "")
            let cls = e.expiresInSeconds <= 0 ? "bad" : e.dueSoon ? "warn" : "muted"
            let when = e.expiresInSeconds <= 0 ? "expired" : "expires in \(duration(e.expiresInSeconds))"
            s +=
                "<div class=\"expiry\" data-what=\"\(esc(e.what))\"><span class=\"\(cls)\">\(esc(what)) \(when)</span>"
                + " <span class=\"muted\">(\(esc(e.expires)))</span>"
                + (e.renews.map { " <span class=\"muted\">renewed by the proxy at \(esc($0))</span>" } ?? "")
                + (e.lastError.map { "<div class=\"bad\">\(esc($0))</div>" } ?? "") + "</div>"
        }
        return s
    }

    static func duration(_ seconds: Int64) -> String {
        let d = seconds / 86_400, h = seconds % 86_400 / 3600, m = seconds % 3600 / 60, s = seconds % 60
        if d > 0 { return "\(d)d \(h)h \(m)m" }
        if h > 0 { return "\(h)h \(m)m" }
        if m > 0 { return "\(m)m \(s)s" }
        return "\(s)s"
    }

    /// HTML escaping for text and attribute values.
    static func esc(_ s: String) -> String {
        var out = ""
        out.reserveCapacity(s.utf8.count)
        for ch in s.unicodeScalars {
            switch ch {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.unicodeScalars.append(ch)
            }
        }
        return out
    }
}
