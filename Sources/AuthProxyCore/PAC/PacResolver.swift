import Dispatch
import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// `[proxy] upstream_pac`: keeps the PAC file loaded (read at start, every `upstream_pac_refresh_seconds` and on
/// reload) and answers "which parents for this destination" from its answers, cached per scheme, host and port.
///
/// One per process (``SharedServerState``): the PAC engine is process-wide, and a reload keeps the loaded file
/// and its answers. Three places of work, each with its rule:
/// - the route cache and the load status are under `lock`, read by the event loops for every routed request
///   (a dictionary lookup);
/// - evaluation runs on the ``PacEngine``'s own queue only (``evaluate(_:then:)``, ``evaluateNow(_:)``);
/// - loading (configuration, the fetch, the refresh timer) runs on `loadQueue`; the fetched script is then
///   handed to the engine queue.
///
/// A file that cannot be read or fetched, or that fails to parse or to answer, leaves the last good one in force
/// and says so in a warning, as does one that runs out of memory or time in the PAC worker (``PacEngine``).
/// Until one has loaded, requests that need a route are refused with a 502 that names
/// the PAC file (``ParentRouting``), and `/readyz` is not ready.
final class PacResolver: @unchecked Sendable {
    /// What `/readyz`, the status page and the metrics show.
    struct Status: Sendable, Equatable {
        var source: String? = nil
        /// A PAC file is in force.
        var loaded = false
        /// Where the one in force came from, and when (ms since the epoch).
        var loadedFrom: String? = nil
        var loadedAt: Int64? = nil
        /// The last load's failure (nil after a success).
        var lastError: String? = nil
        var failures: UInt64 = 0
        /// Why routing is stuck right now (an evaluation running long, the engine restarting), or nil.
        var stall: String? = nil
    }

    enum Lookup: Equatable {
        case answer(PacRouteCache.Answer)
        /// Not evaluated lately: ``evaluate(_:then:)`` first.
        case miss
        /// No PAC file was ever loaded.
        case notLoaded(Status)
    }

    private let lock = Lock()
    private var cache: PacRouteCache
    private var status = Status()
    private let now: @Sendable () -> UInt64

    private let loadQueue = ProxyQueue.make("authproxy.pac-load")
    // Owned by loadQueue.
    private var source: PacSource?
    private var refreshSeconds = 300
    private var timeoutSeconds = 30
    private var logger = Logger(label: "authproxy")
    private var multi: CurlMulti?
    private var timer: (any DispatchSourceTimer)?
    private var loading = false
    /// A read was asked for (a reload) while one was under way: read again when it ends.
    private var again = false
    /// Called once the load under way ends (``configure(_:refreshSeconds:timeoutSeconds:logger:loaded:)``).
    private var afterLoad: [@Sendable () -> Void] = []
    /// The text last handed to the engine successfully: the same text again changes nothing.
    private var inForce: String?

    init(
        cache: PacRouteCache = PacRouteCache(),
        now: @escaping @Sendable () -> UInt64 = { DispatchTime.now().uptimeNanoseconds / 1_000_000 }
    ) {
        self.cache = cache
        self.now = now
    }

    // MARK: routing

    func lookup(_ key: PacRouteCache.Key) -> Lookup {
        let t = now()
        return lock.withLock {
            if let a = cache.answer(key, now: t) { return .answer(a) }
            return status.loaded ? .miss : .notLoaded(status)
        }
    }

    /// Evaluates `key` on the engine's queue (unless an answer arrived meanwhile) and caches the answer, then calls
    /// `then` there: the caller hops back to its own queue and looks up again.
    func evaluate(_ key: PacRouteCache.Key, then: @escaping @Sendable () -> Void) {
        PacEngine.shared.queue.async { [self] in
            evaluateOnEngineQueue(key)
            then()
        }
    }

    /// Evaluates `key` and waits: for queues that may block (the token service's), never an event loop.
    func evaluateNow(_ key: PacRouteCache.Key) {
        PacEngine.shared.queue.sync { evaluateOnEngineQueue(key) }
    }

    private func evaluateOnEngineQueue(_ key: PacRouteCache.Key) {
        let engine = PacEngine.shared
        // The engine queue is serial: requests for one destination queued behind its evaluation find the answer.
        guard case .miss = lookup(key), engine.hasScript else { return }
        let answer: PacRouteCache.Answer
        switch engine.findProxy(url: Self.url(for: key), host: key.host) {
        case .success(let text): answer = .directive(PacDirective.parse(text))
        case .failure(let f): answer = .failed(f.message)
        }
        let t = now()
        lock.withLock { cache.insert(answer, for: key, now: t) }
    }

    /// The URL `FindProxyForURL` gets: `scheme://host[:port]/`, the port left out when it is the scheme's default,
    /// an IPv6 address in brackets. The path and query never: browsers strip them for https (Chrome for every
    /// scheme), so rules can only match hosts and ports, and one answer serves every path of a destination.
    static func url(for key: PacRouteCache.Key) -> String {
        let host = key.host.contains(":") ? "[\(key.host)]" : key.host
        let defaultPort = key.scheme == "https" || key.scheme == "wss" ? 443 : 80
        return key.port == defaultPort ? "\(key.scheme)://\(host)/" : "\(key.scheme)://\(host):\(key.port)/"
    }

    var snapshot: Status {
        var s = lock.withLock { status }
        s.stall = PacEngine.shared.activity.stall(now: now())
        return s
    }

    // MARK: loading

    /// Reads `source` now (a reload reads it again even when unchanged), then every `refreshSeconds`; nil stops
    /// reading. `loaded` is called once this first read has ended, whatever its outcome (on a queue of the
    /// resolver's).
    func configure(
        _ source: PacSource?, refreshSeconds: Int, timeoutSeconds: Int,
        evaluationSeconds: Int = PacEngine.defaultDeadlineSeconds, logger: Logger,
        loaded: (@Sendable () -> Void)? = nil
    ) {
        // Before any load this configuration starts: both reach the engine's queue in this order.
        PacEngine.shared.queue.async { PacEngine.shared.setDeadline(seconds: evaluationSeconds) }
        loadQueue.async { [self] in
            self.source = source
            self.refreshSeconds = refreshSeconds
            self.timeoutSeconds = timeoutSeconds
            self.logger = logger
            lock.withLock { status.source = source?.description }
            if let loaded { afterLoad.append(loaded) }
            guard source != nil else {
                timer?.cancel()
                timer = nil
                runAfterLoad()
                return
            }
            load()
        }
    }

    private func load() {
        dispatchPrecondition(condition: .onQueue(loadQueue))
        guard let source else { return }
        guard !loading else {
            again = true
            return
        }
        loading = true
        switch source {
        case .file(let path):
            if let text = readTextFile(path) {
                fetched(.success(text), from: source)
            } else {
                fetched(.failure(.init(message: "cannot read \(path): \(lastErrorString())")), from: source)
            }
        case .url(let url):
            let m = multi ?? CurlMulti(queue: loadQueue)
            multi = m
            // Directly, never through a parent: the PAC file is what says which parent to use.
            let f = HTTPFetch(multi: m, method: "GET", url: url, form: nil, timeoutSeconds: timeoutSeconds) {
                [self] result in
                switch result {
                case .failure(let e):
                    fetched(.failure(.init(message: e.message)), from: source)
                case .success(let r) where r.status != 200:
                    fetched(.failure(.init(message: "\(url) answered HTTP \(r.status)")), from: source)
                case .success(let r):
                    fetched(.success(String(decoding: r.body, as: UTF8.self)), from: source)
                }
            }
            f.start()
        }
    }

    private func fetched(_ result: Result<String, PacEngine.Failure>, from source: PacSource) {
        dispatchPrecondition(condition: .onQueue(loadQueue))
        switch result {
        case .failure(let f):
            failed(f.message, source: source)
        case .success(let text) where text == inForce:
            succeeded(source, changed: false)
        case .success(let text):
            PacEngine.shared.queue.async { [self] in
                let outcome = PacEngine.shared.load(text)
                if case .success = outcome {
                    // Answers of the old file go with it; evaluations queued behind this load use the new one.
                    let at = nowMillis()
                    lock.withLock {
                        cache.clear()
                        status.loaded = true
                        status.loadedFrom = source.description
                        status.loadedAt = at
                    }
                }
                loadQueue.async { [self] in
                    switch outcome {
                    case .success:
                        inForce = text
                        succeeded(source, changed: true)
                    case .failure(let f):
                        failed("the PAC file does not evaluate: \(f.message)", source: source)
                    }
                }
            }
        }
    }

    private func succeeded(_ source: PacSource, changed: Bool) {
        lock.withLock { status.lastError = nil }
        if changed {
            logger.notice("PAC file loaded", metadata: ["pac": "\(source)", "refresh_seconds": "\(refreshSeconds)"])
        }
        ProxyMetrics.active?.pacLoad(loaded: true, failed: false)
        finishLoad(retryIn: refreshSeconds)
    }

    private func failed(_ message: String, source: PacSource) {
        let loaded = lock.withLock {
            status.lastError = message
            status.failures += 1
            return status.loaded
        }
        if loaded {
            logger.warning(
                "PAC file could not be loaded: the last good one stays in force",
                metadata: ["pac": "\(source)", "error": "\(message)"])
        } else {
            logger.error(
                "PAC file could not be loaded and none was loaded before: requests that need a route are refused (502) until it loads",
                metadata: ["pac": "\(source)", "error": "\(message)", "retry_seconds": "\(retryAfterFailure)"])
        }
        ProxyMetrics.active?.pacLoad(loaded: loaded, failed: true)
        finishLoad(retryIn: loaded ? refreshSeconds : retryAfterFailure)
    }

    /// Without any PAC file the proxy routes nothing: it tries again sooner than the refresh period.
    private var retryAfterFailure: Int { min(refreshSeconds, 10) }

    private func finishLoad(retryIn seconds: Int) {
        loading = false
        if again {
            again = false
            load()
            return
        }
        let t =
            timer
            ?? {
                let t = DispatchSource.makeTimerSource(queue: loadQueue)
                t.setEventHandler { [unowned self] in load() }
                t.resume()
                timer = t
                return t
            }()
        t.schedule(deadline: .now() + .seconds(seconds))
        runAfterLoad()
    }

    private func runAfterLoad() {
        let waiting = afterLoad
        afterLoad.removeAll()
        for w in waiting { w() }
    }
}
