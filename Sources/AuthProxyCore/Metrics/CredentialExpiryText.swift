/// `authproxy_credential_expiry_timestamp_seconds{credential,what[,which]}` in the Prometheus text format, rendered
/// at scrape time from ``CredentialExpiry`` values (nothing to keep up to date per request). An alert compares it with
/// `time()` (deploy/prometheus/authproxy-alerts.yml).
enum CredentialExpiryText {
    static func render(_ expiries: [CredentialExpiry]) -> String {
        guard !expiries.isEmpty else { return "" }
        var out =
            "# HELP authproxy_credential_expiry_timestamp_seconds When a credential's access token, refresh token, API key or client certificate expires (Unix time).\n"
        out += "# TYPE authproxy_credential_expiry_timestamp_seconds gauge\n"
        for e in CredentialExpiry.ordered(expiries) {
            var labels = "credential=\"\(MetricLabels.escaped(e.credential))\""
            if let i = e.which { labels += ",which=\"\(MetricLabels.escaped(i))\"" }
            labels += ",what=\"\(e.what.rawValue)\""
            out += "authproxy_credential_expiry_timestamp_seconds{\(labels)} \(e.expires / 1000)\n"
        }
        let renewed = CredentialExpiry.ordered(expiries).filter { $0.renews != nil }
        guard !renewed.isEmpty else { return out }
        out +=
            "# HELP authproxy_credential_renewal_timestamp_seconds When the proxy renews a credential's refresh token by itself (Unix time); absent when nothing renews it.\n"
        out += "# TYPE authproxy_credential_renewal_timestamp_seconds gauge\n"
        for e in renewed {
            var labels = "credential=\"\(MetricLabels.escaped(e.credential))\""
            if let i = e.which { labels += ",which=\"\(MetricLabels.escaped(i))\"" }
            labels += ",what=\"\(e.what.rawValue)\""
            out += "authproxy_credential_renewal_timestamp_seconds{\(labels)} \((e.renews ?? 0) / 1000)\n"
        }
        return out
    }
}
