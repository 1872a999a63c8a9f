/// The layer tokens recently put into print jobs, per print service: a print service echoes its inputs in later
/// answers too (a job's status and messages, `inputs/Web_Map_as_JSON`), so every answer from a listed print service is
/// scrubbed of the tokens it was handed, not only the answer to the request that carried them.
///
/// Bounded: at most ``maxPerService`` tokens per service (the oldest go first), each kept until it expires (a token
/// without an expiry for ``defaultKeepMillis``).
struct PrintTokenLedger {
    static let maxPerService = 256
    static let defaultKeepMillis: Int64 = 24 * 3600 * 1000

    private var entries: [String: [(token: String, until: Int64)]] = [:]

    /// Notes that `tokens` (each with its expiry in epoch ms, nil: unknown) went to print service `service`.
    mutating func record(service: String, tokens: [(String, expires: Int64?)], now: Int64) {
        var list = (entries[service] ?? []).filter { $0.until > now }
        for (t, expires) in tokens {
            let until = max(expires ?? 0, now + 60_000, expires == nil ? now + Self.defaultKeepMillis : 0)
            if let i = list.firstIndex(where: { $0.token == t }) {
                list[i].until = max(list[i].until, until)
            } else {
                list.append((t, until))
            }
        }
        if list.count > Self.maxPerService { list.removeFirst(list.count - Self.maxPerService) }
        entries[service] = list
    }

    /// The tokens still to be masked in answers from `service`.
    func tokens(service: String, now: Int64) -> [String] {
        (entries[service] ?? []).filter { $0.until > now }.map(\.token)
    }
}
