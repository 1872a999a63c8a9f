import Logging

/// `api-key` credentials: which slot's key goes on a request, and what a rejection of it means (``APIKeySlotBook``
/// decides; this carries it out: the one warning, the metric, the clear error). No token service is involved.
extension TokenService {
    /// The key a request sent now carries, or nil when every slot has expired.
    func apiKeyToken(_ c: Credential, _ k: APIKeySettings) -> IssuedToken? {
        if k.slots.count == 1 {
            // One key has no other slot to switch to, so its rejections are not read (``Credential/retriesRejections``)
            // and nothing is recorded for it: no lock on every request.
            let slot = k.slots[0]
            if let e = slot.expires, clock.nowMillis() >= e { return nil }
            return IssuedToken(value: slot.key, expires: slot.expires, issued: 0, ssl: false, referer: k.referer)
        }
        let now = clock.nowMillis()
        let number: Int
        switch keySlots.withLock({ $0.choose(c.name, k, now: now) }) {
        case .use(let n), .retryRejected(let n): number = n
        case .allExpired: return nil
        }
        guard let slot = k.slots.first(where: { $0.number == number }) else { return nil }
        // `issued`: when it was handed out, so an acceptance can tell whether it proves a rejected key good again.
        return IssuedToken(value: slot.key, expires: slot.expires, issued: now, ssl: false, referer: k.referer)
    }

    /// The client's 502 when no key of `c` may be sent: every slot has expired.
    static func keysExpired(_ c: Credential, _ k: APIKeySettings) -> TokenError {
        let when = k.slots.compactMap { s in s.expires.map { "slot \(s.number) at \(rfc3339(millis: $0))" } }
        return TokenError(
            credential: c.name,
            message: "its API key\(k.slots.count > 1 ? "s" : "") expired (\(when.joined(separator: ", ")))",
            details: [
                "An expired key is not sent. Create a new key for the API key credentials in the portal, put it in a slot of proxy.conf and reload (SIGHUP, POST /reload) or restart authproxy."
            ], local: true)
    }

    /// The upstream rejected the key `token` of `c` (498/499 in any form) on `attempt` of a request.
    func apiKeyRejected(
        _ c: Credential, _ k: APIKeySettings, token: IssuedToken, attempt: Int, replayImpossible: String?
    ) -> TokenRetryPolicy.Action {
        guard let slot = k.slots.first(where: { $0.key == token.value })?.number else {
            // A key a reload removed meanwhile: nothing to record.
            return .relay(reason: "the key is no longer configured", serverRejectsNewTokens: false)
        }
        let now = clock.nowMillis()
        let outcome = keySlots.withLock { $0.rejected(c.name, k, slot: slot, now: now) }
        ProxyMetrics.active?.apiKeyRejected(credential: c.name, slot: slot)
        switch outcome {
        case .switched(let from, let to, let newly):
            if newly {
                logger.warning(
                    "API key rejected by the server: switching to the other slot",
                    metadata: [
                        "credential": "\(c.name)", "rejected_slot": "\(from)", "slot": "\(to)",
                        "hint":
                            "the key was revoked, invalidated or has expired; it stays unused until a reload puts another key in slot \(from)",
                    ])
            }
            if attempt == 1, replayImpossible == nil { return .refreshAndRetry }
            return .relay(
                reason: replayImpossible ?? "the request was already sent again once", serverRejectsNewTokens: false)
        case .exhausted(let slot, let newly):
            if newly {
                logger.warning(
                    "API key rejected by the server, and no other slot is usable: requests get 502 until a key is replaced",
                    metadata: [
                        "credential": "\(c.name)", "rejected_slot": "\(slot)",
                        "hint":
                            "check the keys in the portal (revoked, invalidated, expired, or restricted to referrers: set referer), put a valid key in a slot and reload",
                    ])
            }
            return .answer(Self.keysRejected(c, k, now: now))
        }
    }

    /// The client's 502 when the server rejected every usable key of `c`.
    static func keysRejected(_ c: Credential, _ k: APIKeySettings, now: Int64) -> ErrorResponse {
        let live = k.slots.filter { !$0.isExpired(now: now) }
        let which =
            live.count > 1
            ? "both of its API keys (slots 1 and 2)"
            : k.slots.count > 1 && live.count == 1
                ? "its API key in slot \(live[0].number) (the key in the other slot has expired)" : "its API key"
        return ErrorResponse(
            status: 502, message: "Credential '\(c.name)': the server rejected \(which)",
            details: [
                "The keys are revoked, invalidated or expired, or restricted to referrers the request did not name (set the credential's referer).",
                "Put a valid key in a slot of proxy.conf and reload (SIGHUP, POST /reload) or restart authproxy.",
            ])
    }

    /// A request carrying the key `token` of `c` got an answer that was no rejection.
    func apiKeyAccepted(_ c: Credential, _ k: APIKeySettings, token: IssuedToken) {
        guard let slot = k.slots.first(where: { $0.key == token.value })?.number else { return }
        guard keySlots.withLock({ $0.accepted(c.name, k, slot: slot, sentAt: token.issued) }) else { return }
        logger.notice(
            "API key accepted again by the server: the slot is back in use",
            metadata: ["credential": "\(c.name)", "slot": "\(slot)"])
    }

    /// Each slot of `c` and its state now, for the status page and `/metrics`.
    func apiKeySlotStates(_ c: Credential) -> [APIKeySlotState] {
        guard let k = (c.kind as? APIKeySettings) else { return [] }
        let now = clock.nowMillis()
        let (choice, rejected) = keySlots.withLock { book in
            (book.choose(c.name, k, now: now), k.slots.map { book.rejectedAt(c.name, k, slot: $0.number) })
        }
        return zip(k.slots, rejected).map { slot, at in
            let state: APIKeySlotState.State
            if slot.isExpired(now: now) {
                state = .expired
            } else if at != nil {
                state = .rejected
            } else if choice == .use(slot: slot.number) {
                state = .inUse
            } else {
                state = .standby
            }
            return APIKeySlotState(slot: slot.number, state: state, rejectedAt: at)
        }
    }

    /// Start and reload: a key within `[proxy] expiry_warning_days` of expiring, or expired, is one warning line.
    func warnKeyExpiry(_ credentials: [Credential], warningDays: Int) {
        let now = clock.nowMillis()
        for c in credentials {
            guard let k = (c.kind as? APIKeySettings) else { continue }
            for note in k.expiryNotes(credential: c.name, now: now, warningDays: warningDays) {
                logger.warning("\(note)", metadata: ["credential": "\(c.name)"])
            }
        }
    }
}

/// One slot of an `api-key` credential as the status page and `/metrics` show it (never the key).
public struct APIKeySlotState: Sendable, Equatable {
    public enum State: String, Sendable {
        /// Its key goes on requests.
        case inUse = "in_use"
        /// Usable, not used while an earlier slot is.
        case standby
        /// The server rejected its key; unused until a reload puts another key in the slot.
        case rejected
        /// Past its `expires`: never sent.
        case expired
    }

    public var slot: Int
    public var state: State
    public var rejectedAt: Int64?
}

extension TokenService {
    /// A reload: a key's rejection lasts until a reload puts another key in its slot.
    func retainKeySlots(_ credentials: [Credential]) {
        let keys = Dictionary(
            credentials.compactMap { c in (c.kind as? APIKeySettings).map { (c.name, $0) } },
            uniquingKeysWith: { a, _ in a })
        keySlots.withLock { $0.retain(keys) }
    }
}

extension TokenService {
    /// The slot book of every `api-key` credential, kept in the service's ``KindState``.
    var keySlots: KeySlots { KeySlots(state: kindState) }

    struct KeySlots {
        let state: KindState
        func withLock<R>(_ body: (inout APIKeySlotBook) -> R) -> R { state.withLock(APIKeySlotBook(), body) }
    }
}
