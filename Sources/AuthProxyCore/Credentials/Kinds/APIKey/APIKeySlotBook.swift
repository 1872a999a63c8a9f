/// Which key of each `api-key` credential goes on requests, and which keys the server rejected.
///
/// - The first slot that has not expired and was not rejected is used.
/// - A slot the server rejects (498 in any form) stays off until a reload puts another key in it (its state is kept
///   under a digest of the key, so a changed key starts clean and an unchanged one stays rejected): the proxy never
///   switches back and forth between a revoked key and a good one.
/// - When every slot that has not expired was rejected, the one rejected longest ago is still tried (one request at
///   a time gets the clear error); if the server accepts it again it is back in use. Otherwise one client whose
///   request the server refuses whatever the key (a `Referer` a restricted key does not allow) would switch the
///   credential off for everybody until a restart.
/// - An expired slot is never used.
///
/// Per process: each replica of a fleet finds a revoked key by itself, at the cost of one replayed request.
struct APIKeySlotBook: Sendable {
    /// By credential name, by SHA-256 of a rejected key: when the server rejected it (milliseconds since the epoch).
    private(set) var rejections: [String: [String: Int64]] = [:]

    enum Choice: Equatable {
        /// The slot to use (its number).
        case use(slot: Int)
        /// Every slot that has not expired was rejected: this one, rejected longest ago, is tried again.
        case retryRejected(slot: Int)
        /// Every slot has expired.
        case allExpired
    }

    /// The slot a request sent at `now` uses.
    func choose(_ credential: String, _ s: APIKeySettings, now: Int64) -> Choice {
        guard let first = s.slots.first(where: { !$0.isExpired(now: now) }) else { return .allExpired }
        // The common case, with nothing rejected: no digest computed per request.
        guard let rejected = rejections[credential], !rejected.isEmpty else { return .use(slot: first.number) }
        var oldest: (slot: Int, at: Int64)? = nil
        for slot in s.slots where !slot.isExpired(now: now) {
            guard let at = rejected[Self.digest(slot.key)] else { return .use(slot: slot.number) }
            if oldest.map({ at < $0.at }) ?? true { oldest = (slot.number, at) }
        }
        return .retryRejected(slot: oldest?.slot ?? first.number)
    }

    enum Rejection: Equatable {
        /// Another slot is usable: the request is sent again with it. `newly`: this rejection switched (log it once).
        case switched(from: Int, to: Int, newly: Bool)
        /// No other slot is usable. `newly`: the slot was not known rejected before.
        case exhausted(slot: Int, newly: Bool)
    }

    /// The server rejected the key of `slot` at `now`.
    mutating func rejected(_ credential: String, _ s: APIKeySettings, slot: Int, now: Int64) -> Rejection {
        var newly = false
        if let key = s.slots.first(where: { $0.number == slot })?.key {
            let d = Self.digest(key)
            if rejections[credential, default: [:]][d] == nil {
                newly = true
            }
            // A rejection of a slot tried again (every slot rejected) refreshes its time, so the other one is tried next.
            rejections[credential, default: [:]][d] = now
        }
        if case .use(let next) = choose(credential, s, now: now), next != slot {
            return .switched(from: slot, to: next, newly: newly)
        }
        return .exhausted(slot: slot, newly: newly)
    }

    /// The server accepted the key of `slot`, handed out at `sentAt`. A slot rejected before `sentAt` (one tried again
    /// because every slot was rejected) is usable again: returns true then. A request that was sent before the
    /// rejection proves nothing (the key may have been revoked meanwhile).
    mutating func accepted(_ credential: String, _ s: APIKeySettings, slot: Int, sentAt: Int64) -> Bool {
        // Called for every answer a key got: nothing computed unless a key of the credential was rejected.
        guard let rejected = rejections[credential], !rejected.isEmpty,
            let key = s.slots.first(where: { $0.number == slot })?.key,
            let at = rejected[Self.digest(key)], sentAt > at
        else { return false }
        rejections[credential]?[Self.digest(key)] = nil
        return true
    }

    /// When the server rejected the key of `slot`, if it did (and no reload put another key in the slot since).
    func rejectedAt(_ credential: String, _ s: APIKeySettings, slot: Int) -> Int64? {
        guard let rejected = rejections[credential], !rejected.isEmpty,
            let key = s.slots.first(where: { $0.number == slot })?.key
        else { return nil }
        return rejected[Self.digest(key)]
    }

    /// A reload: only the rejections of keys still configured under the same credential are kept.
    mutating func retain(_ configured: [String: APIKeySettings]) {
        for (name, rejected) in rejections {
            guard let s = configured[name] else {
                rejections[name] = nil
                continue
            }
            let keep = Set(s.slots.map { Self.digest($0.key) })
            rejections[name] = rejected.filter { keep.contains($0.key) }
        }
    }

    static func digest(_ key: String) -> String { Crypto.sha256Hex(key) }
}
