import Dispatch
import Logging

/// The signing keys (JWKS) of every issuer an `[[app]]` requires sign-in from, process-wide so a reload keeps them.
///
/// Reading is a locked dictionary look-up on the request path; fetching runs on this object's own queue and libcurl
/// multi handle (created on first use), never on an event loop: a request that needs keys not fetched yet parks
/// (``fetch(_:logger:then:)`` calls it back) without blocking a thread. The JWKS location comes from the
/// issuer's discovery document, whose `issuer` must be the configured one (OIDC Discovery §4.3).
///
/// Bounds: one fetch per issuer at a time (later requests wait for it); a fetch for an unknown `kid` (key
/// rotation) at most every ``minRefetchNanos``, so tokens with made-up kids cannot make the proxy hammer the
/// provider; keys older than ``maxAgeNanos`` are refreshed in the background while still used.
final class SignInKeys: @unchecked Sendable {
    static let minRefetchNanos: UInt64 = 5_000_000_000
    static let maxAgeNanos: UInt64 = 3_600_000_000_000
    static let fetchTimeoutSeconds = 10

    private struct Issuer {
        var keys: [JWSVerifier]? = nil
        var fetchedAt: UInt64 = 0
        var lastAttempt: UInt64? = nil
        var inFlight = false
        var waiters: [@Sendable () -> Void] = []
        var lastError: String? = nil
    }

    // Guarded by `lock`; `multi` is used on `queue` only.
    private let lock = Lock()
    private var issuers: [String: Issuer] = [:]
    private let queue = DispatchQueue(label: "authproxy.sign-in-keys")
    private var multiStorage: CurlMulti? = nil

    init() {}

    /// The keys cached for `issuer` (nil: none fetched yet) and why the last fetch failed, if it did. Stale keys
    /// are returned and a refresh is started behind them.
    func cached(_ policy: SignInPolicy, logger: Logger, now: UInt64) -> (keys: [JWSVerifier]?, error: String?) {
        let (state, stale) = lock.withLock { () -> (Issuer?, Bool) in
            let s = issuers[policy.issuer]
            let stale = s.map { $0.keys != nil && !$0.inFlight && now &- $0.fetchedAt > Self.maxAgeNanos } ?? false
            return (s, stale)
        }
        // While the provider is down, the refresh is tried at most every ``minRefetchNanos`` (``fetch``).
        if stale { fetch(policy, logger: logger) {} }
        return (state?.keys, state?.lastError)
    }

    /// Fetches the issuer's JWKS (discovery, then `jwks_uri`) and calls `then` on this object's queue when the
    /// cache holds the outcome. A fetch attempted less than ``minRefetchNanos`` ago is not
    /// repeated: `then` is called at once with the cache as it is.
    func fetch(_ policy: SignInPolicy, logger: Logger, then: @escaping @Sendable () -> Void) {
        let now = DispatchTime.now().uptimeNanoseconds
        enum Step { case waits, answeredNow, starts }
        let step = lock.withLock { () -> Step in
            var s = issuers[policy.issuer] ?? Issuer()
            defer { issuers[policy.issuer] = s }
            if s.inFlight {
                s.waiters.append(then)
                return .waits
            }
            if let last = s.lastAttempt, now &- last < Self.minRefetchNanos { return .answeredNow }
            s.inFlight = true
            s.lastAttempt = now
            s.waiters.append(then)
            return .starts
        }
        switch step {
        case .waits: return
        case .answeredNow:
            // A refetch too soon after the last: the cache as it is decides.
            queue.async(execute: then)
            return
        case .starts: break
        }
        queue.async { self.discover(policy, logger: logger) }
    }

    private var multi: CurlMulti {
        dispatchPrecondition(condition: .onQueue(queue))
        if let m = multiStorage { return m }
        let m = CurlMulti(queue: queue)
        multiStorage = m
        return m
    }

    private func get(_ url: String, _ done: @escaping (Result<HTTPFetch.Response, HTTPFetch.FetchError>) -> Void) {
        HTTPFetch(
            multi: multi, method: "GET", url: url, form: nil, timeoutSeconds: Self.fetchTimeoutSeconds,
            completion: done
        ).start()
    }

    private func discover(_ policy: SignInPolicy, logger: Logger) {
        get(policy.discoveryURL) { result in
            switch result {
            case .failure(let e):
                self.finish(policy, keys: nil, error: "discovery \(policy.discoveryURL): \(e.message)", logger: logger)
            case .success(let r):
                switch OIDCDiscovery.jwksURI(status: r.status, body: r.body, issuer: policy.issuer) {
                case .failure(let why):
                    self.finish(
                        policy, keys: nil, error: "discovery \(policy.discoveryURL): \(why.reason)", logger: logger)
                case .success(let uri):
                    self.fetchKeys(policy, uri: uri, logger: logger)
                }
            }
        }
    }

    private func fetchKeys(_ policy: SignInPolicy, uri: String, logger: Logger) {
        get(uri) { result in
            switch result {
            case .failure(let e):
                self.finish(policy, keys: nil, error: "JWKS \(uri): \(e.message)", logger: logger)
            case .success(let r):
                guard r.status == 200, let set = JWK.set(from: r.body) else {
                    self.finish(policy, keys: nil, error: "JWKS \(uri): HTTP \(r.status), not a JWKS", logger: logger)
                    return
                }
                let verifiers = set.compactMap(JWSVerifier.init)
                logger.info(
                    "sign-in keys fetched",
                    metadata: [
                        "issuer": "\(policy.issuer)", "keys": "\(verifiers.count)",
                        "kids": "\(verifiers.compactMap(\.jwk.kid).joined(separator: ","))",
                    ])
                self.finish(policy, keys: verifiers, error: nil, logger: logger)
            }
        }
    }

    /// Records the outcome (a failure keeps the keys fetched before: they still verify tokens until they rotate)
    /// and wakes every request that waited for it.
    private func finish(_ policy: SignInPolicy, keys: [JWSVerifier]?, error: String?, logger: Logger) {
        if let error {
            logger.warning("sign-in keys not fetched", metadata: ["issuer": "\(policy.issuer)", "error": "\(error)"])
        }
        let waiters = lock.withLock { () -> [@Sendable () -> Void] in
            var s = issuers[policy.issuer] ?? Issuer()
            if let keys {
                s.keys = keys
                s.fetchedAt = DispatchTime.now().uptimeNanoseconds
            }
            s.lastError = error
            s.inFlight = false
            let w = s.waiters
            s.waiters = []
            issuers[policy.issuer] = s
            return w
        }
        for w in waiters { w() }
    }
}
