import CPacParser
import Dispatch

#if canImport(Glibc)
    import Glibc
#endif

/// The PAC engine: pacparser (Debian `libpacparser1`, a JavaScript interpreter inside) evaluating the loaded PAC
/// file's `FindProxyForURL`.
///
/// pacparser keeps one JavaScript context for the whole process and is not thread-safe, so there is one engine,
/// and every call into it runs on ``queue``, a thread of its own: never on an event loop, since a PAC may call
/// `dnsResolve`/`isInNet`/`myIpAddress`, which resolve names and block.
final class PacEngine: @unchecked Sendable {
    static let shared = PacEngine()

    /// The only queue that touches pacparser (and this object's state).
    let queue = ProxyQueue.ownThread("authproxy.pac")
    /// The script in force (nil: none loaded since the start): put back when a new one fails.
    private var script: String?
    private var initialized = false

    struct Failure: Error, Equatable {
        var message: String
    }

    private init() {}

    /// Makes `text` the PAC file in force: it must parse and its `FindProxyForURL` answer a probe (an IP-literal
    /// URL, so the probe resolves no name). On failure the previous script stays in force.
    func load(_ text: String) -> Result<Void, Failure> {
        dispatchPrecondition(condition: .onQueue(queue))
        let outcome = start(text)
        if case .failure = outcome {
            if let old = script { _ = start(old) } else { stop() }
        } else {
            script = text
        }
        return outcome
    }

    /// `FindProxyForURL(url, host)` of the script in force: its answer as it is.
    func findProxy(url: String, host: String) -> Result<String, Failure> {
        dispatchPrecondition(condition: .onQueue(queue))
        guard script != nil else { return .failure(Failure(message: "no PAC file is loaded")) }
        PacEngineErrors.text = ""
        // The answer belongs to the JavaScript engine (pacparser 1.3 hands out the string's own bytes): copied
        // before the next call, never freed here.
        guard let answer = pacparser_find_proxy(url, host) else {
            return .failure(
                Failure(message: PacEngineErrors.message(or: "FindProxyForURL failed (it threw, or is not defined)")))
        }
        return .success(String(cString: answer))
    }

    var hasScript: Bool {
        dispatchPrecondition(condition: .onQueue(queue))
        return script != nil
    }

    private func start(_ text: String) -> Result<Void, Failure> {
        stop()
        PacEngineErrors.text = ""
        pacparser_set_error_printer(pacEngineErrorPrinter)
        guard pacparser_init() == 1 else {
            return .failure(Failure(message: PacEngineErrors.message(or: "the PAC engine could not start")))
        }
        initialized = true
        guard pacparser_parse_pac_string(text) == 1 else {
            return .failure(Failure(message: PacEngineErrors.message(or: "the PAC file does not parse as JavaScript")))
        }
        guard let probe = pacparser_find_proxy("http://127.0.0.1/", "127.0.0.1"), probe.pointee != 0 else {
            return .failure(
                Failure(
                    message: PacEngineErrors.message(
                        or: "FindProxyForURL(\"http://127.0.0.1/\", \"127.0.0.1\") gave no answer (is it defined?)")))
        }
        return .success(())
    }

    private func stop() {
        if initialized { pacparser_cleanup() }
        initialized = false
    }
}

/// What pacparser printed while the engine was last called (it reports script errors through a printer
/// function instead of return values). Touched only on ``PacEngine/queue``.
enum PacEngineErrors {
    nonisolated(unsafe) static var text = ""

    static func message(or fallback: String) -> String {
        let t = text.trimmingHTTPWhitespace()
        return t.isEmpty ? fallback : String(t)
    }
}

/// pacparser's error printer: collects the message instead of writing it to stderr.
private func pacEngineErrorPrinter(_ format: UnsafePointer<CChar>?, _ args: CVaListPointer?) -> Int32 {
    guard let format, let args else { return 0 }
    var buffer = [CChar](repeating: 0, count: 1024)
    let n = vsnprintf(&buffer, buffer.count, format, args)
    // pacparser's messages span lines (a JavaScript error, then where): one line for a log field.
    let line = String(nulTerminated: buffer).split(whereSeparator: \.isWhitespace).joined(separator: " ")
    // A runaway script could print without end: keep the first few lines only.
    if !line.isEmpty, PacEngineErrors.text.utf8.count < 2048 {
        PacEngineErrors.text += (PacEngineErrors.text.isEmpty ? "" : "; ") + line
    }
    return n
}
