/// When the token service probes a key that is backing off after a failed token request: the decision the
/// service turns into a timer on its queue, as a pure function of the cache's answer and the clock.
enum ProbeSchedule {
    /// The wait, in milliseconds, before the probe `lookup` asks for; nil when it asks for none (the key is not
    /// backing off, or its probe is scheduled already). The probe runs when the backoff ends
    /// (``TokenBackoff/retryAt``), at once when that moment passed between the cache's answer and `now`.
    static func delay<Waiter>(for lookup: TokenCache<Waiter>.Lookup, now: Int64) -> Int64? {
        guard case .backingOff(_, let probeAt?) = lookup else { return nil }
        return max(0, probeAt - now)
    }
}
