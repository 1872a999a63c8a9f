import Dispatch

/// Blocking HTTP requests for the command-line tools (`login`, `signout`), which run no event loop: a
/// private libcurl multi handle on its own queue, waited on with a semaphore.
///
/// Ownership: all libcurl work runs on `queue`; callers only block on the semaphore and read the result the
/// queue wrote before signalling it.
public final class SyncFetch: @unchecked Sendable {
    private let queue = ProxyQueue.make("authproxy.cli-fetch")
    private let multi: CurlMulti
    private let timeoutSeconds: Int
    private let store: CredentialStore
    /// The parent proxies requests go through (nil: direct).
    private let routing: ParentRouting?

    /// `credentials`: their server-trust (and other network) settings apply to the portal requests;
    /// `upstreamProxy`: the parent proxies they go through, as the running proxy's own requests do.
    public convenience init(
        timeoutSeconds: Int = 30, credentials: [Credential] = [],
        upstreamProxy: UpstreamProxyConfig = UpstreamProxyConfig()
    ) {
        self.init(
            timeoutSeconds: timeoutSeconds, credentials: credentials,
            routing: ParentRouting.standalone(upstreamProxy, credentials: credentials))
    }

    init(timeoutSeconds: Int, credentials: [Credential] = [], routing: ParentRouting?) {
        self.timeoutSeconds = timeoutSeconds
        store = CredentialStore(credentials)
        multi = CurlMulti(queue: queue)
        self.routing = routing
    }

    deinit {
        let m = multi
        queue.sync { m.tearDown() }
    }

    public struct Response: Sendable {
        public var status: Int
        public var body: [UInt8]
        public var text: String { String(decoding: body, as: UTF8.self) }
    }

    /// GETs `url` with exactly these network settings (server trust, a client certificate) and keeps at most
    /// `bodyLimit` bytes of the body: `authproxy doctor`'s probes, which must see challenges, not answer them.
    func get(_ url: String, network: NetworkAuth, bodyLimit: Int) -> Result<HTTPFetch.Response, HTTPFetch.FetchError> {
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var outcome: Result<HTTPFetch.Response, HTTPFetch.FetchError>? = nil
        let multi = multi
        let timeout = timeoutSeconds
        let route = routing.flatMap { (try? $0.routeWaiting(url: url).get()) ?? nil }
        queue.async {
            let f = HTTPFetch(
                multi: multi, method: "GET", url: url, form: nil, timeoutSeconds: timeout, network: network,
                route: route, bodyLimit: bodyLimit
            ) { r in
                outcome = r
                done.signal()
            }
            f.start()
        }
        done.wait()
        return outcome!
    }

    /// The network settings the running proxy would use for `target` (server trust, a client certificate).
    func network(for target: URLTarget) -> NetworkAuth { store.network(for: target) }

    /// POSTs an urlencoded form (with `headers` besides the usual ones); throws a message on transport failure.
    public func post(_ url: String, form: [(String, String)], headers: [(String, String)] = []) throws(StateError)
        -> Response
    {
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var outcome: Result<HTTPFetch.Response, HTTPFetch.FetchError>? = nil
        let multi = multi
        let timeout = timeoutSeconds
        let network = HTTPURL.parse(url).map { store.network(for: $0.target) } ?? NetworkAuth()
        let route = routing.flatMap { (try? $0.routeWaiting(url: url).get()) ?? nil }
        queue.async {
            let f = HTTPFetch(
                multi: multi, method: "POST", url: url, form: form, timeoutSeconds: timeout, network: network,
                route: route, headers: headers
            ) { r in
                outcome = r
                done.signal()
            }
            f.start()
        }
        done.wait()
        switch outcome! {
        case .success(let r): return Response(status: r.status, body: r.body)
        case .failure(let e): throw StateError("\(TokenFetcher.redacted(url)): \(e.message)")
        }
    }
}
