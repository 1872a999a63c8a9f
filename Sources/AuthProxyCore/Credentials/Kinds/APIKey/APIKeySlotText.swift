/// `authproxy_api_key_slot{credential,slot,state}` in the Prometheus text format, rendered at scrape time from the
/// token service's ``APIKeySlotState`` values: 1 for the state each slot of an `api-key` credential is in (`in_use`,
/// `standby`, `rejected`, `expired`), so an alert can fire on a rejected slot or on a credential with no slot in use.
enum APIKeySlotText {
    static func render(_ slots: [(credential: String, state: APIKeySlotState)]) -> String {
        guard !slots.isEmpty else { return "" }
        var out =
            "# HELP authproxy_api_key_slot The state of each key slot of an api-key credential (1 for the state it is in).\n"
        out += "# TYPE authproxy_api_key_slot gauge\n"
        for (credential, s) in slots {
            out +=
                "authproxy_api_key_slot{credential=\"\(MetricLabels.escaped(credential))\",slot=\"\(s.slot)\",state=\"\(s.state.rawValue)\"} 1\n"
        }
        return out
    }
}
