/// An `api-key` credential: the keys of an ArcGIS *API key credentials* item (ArcGIS Online, Location Platform,
/// Enterprise ≥ 11.4), which has two slots so a new key can be deployed before the old one is invalidated, each key
/// with its own expiry (at most a year), and may be restricted to referrers (`httpReferrers`).
public struct APIKeySettings: Sendable, Equatable {
    /// One configured key: `key` (+ `expires`), or one entry of `keys`.
    public struct Slot: Sendable, Equatable {
        /// 1 or 2: the slot's place in `keys` (a single `key` is slot 1). Shown in logs, metrics and on the status
        /// page instead of the key.
        public var number: Int
        public var key: String
        /// Milliseconds since the epoch; nil: no expiry configured (a legacy key).
        public var expires: Int64?

        public init(number: Int, key: String, expires: Int64? = nil) {
            self.number = number
            self.key = key
            self.expires = expires
        }

        public func isExpired(now: Int64) -> Bool { expires.map { now >= $0 } ?? false }
    }

    /// In the configured order: the first one usable is used.
    public var slots: [Slot]
    /// Sent as `Referer` with every request a key goes on, replacing the client's (keys restricted to referrers).
    public var referer: String?

    public init(slots: [Slot], referer: String? = nil) {
        self.slots = slots
        self.referer = referer
    }

    /// The most slots an API key credentials item has.
    public static let maxSlots = 2

    /// What `authproxy check` and the start-up / reload log say about the keys' expiry at `now`: an expired key (not
    /// used), or one expiring within `warningDays`. Never the key itself.
    public func expiryNotes(credential: String, now: Int64, warningDays: Int) -> [String] {
        var notes: [String] = []
        for s in slots {
            guard let e = s.expires else { continue }
            let when = rfc3339(millis: e)
            if s.isExpired(now: now) {
                notes.append(
                    "credential '\(credential)': the API key in slot \(s.number) expired at \(when) and is not used; put a new key in the slot and reload"
                )
            } else if CredentialExpiry(credential: credential, what: .key, expires: e).isDueSoon(
                now: now, warningDays: warningDays)
            {
                let days = (e - now) / 86_400_000
                notes.append(
                    "credential '\(credential)': the API key in slot \(s.number) expires at \(when) (in \(days) day\(days == 1 ? "" : "s")); rotate it: put a new key in the free slot, reload, then invalidate the old one in the portal"
                )
            }
        }
        return notes
    }

    /// The slots for `authproxy check`: their expiry dates and the referer, never a key.
    public var summary: String {
        let list = slots.map { s in
            "slot \(s.number) \(s.expires.map { "expires \(rfc3339(millis: $0))" } ?? "(no expiry set)")"
        }
        return list.joined(separator: ", ") + (referer.map { "; referer \($0)" } ?? "")
    }

    /// The slots' expiries for the status page and `/metrics` (``CredentialExpiry``, `which` = the slot number).
    public func expiries(credential: String) -> [CredentialExpiry] {
        slots.compactMap { s in
            s.expires.map { CredentialExpiry(credential: credential, what: .key, which: "\(s.number)", expires: $0) }
        }
    }
}
