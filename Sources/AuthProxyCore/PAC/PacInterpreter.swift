import CPacParser

#if canImport(Glibc)
    import Glibc
#endif

/// pacparser (Debian `libpacparser1`, a JavaScript interpreter inside) evaluating a PAC file's `FindProxyForURL`
/// in this process. Only the PAC worker process runs it (``PacWorker``): a script may allocate without end or
/// loop forever, and only a process of its own can be bounded in memory and killed at a deadline.
///
/// pacparser keeps one JavaScript context for the whole process and is not thread-safe: the worker calls it from
/// its one thread.
struct PacInterpreter {
    /// Why a script failed; `outOfMemory` when the engine reported that it could not allocate (the worker's
    /// address-space limit, ``PacWorker``).
    struct Failure: Error, Equatable {
        var message: String
        var outOfMemory = false
    }

    private var initialized = false

    init() {}

    /// Makes `text` the script in force: it must parse and its `FindProxyForURL` answer a probe (an IP-literal
    /// URL, so the probe resolves no name).
    mutating func load(_ text: String) -> Result<Void, Failure> {
        stop()
        PacEngineErrors.text = ""
        pacparser_set_error_printer(pacEngineErrorPrinter)
        guard pacparser_init() == 1 else {
            return .failure(Self.failure(or: "the PAC engine could not start"))
        }
        initialized = true
        guard pacparser_parse_pac_string(text) == 1 else {
            return .failure(Self.failure(or: "the PAC file does not parse as JavaScript"))
        }
        guard let probe = pacparser_find_proxy("http://127.0.0.1/", "127.0.0.1"), probe.pointee != 0 else {
            return .failure(
                Self.failure(
                    or: "FindProxyForURL(\"http://127.0.0.1/\", \"127.0.0.1\") gave no answer (is it defined?)"))
        }
        return .success(())
    }

    /// `FindProxyForURL(url, host)` of the script in force: its answer as it is.
    func findProxy(url: String, host: String) -> Result<String, Failure> {
        guard initialized else { return .failure(Failure(message: "no PAC file is loaded")) }
        PacEngineErrors.text = ""
        // The answer belongs to the JavaScript engine (pacparser 1.3 hands out the string's own bytes): copied
        // before the next call, never freed here.
        guard let answer = pacparser_find_proxy(url, host) else {
            return .failure(Self.failure(or: "FindProxyForURL failed (it threw, or is not defined)"))
        }
        return .success(String(cString: answer))
    }

    private mutating func stop() {
        if initialized { pacparser_cleanup() }
        initialized = false
    }

    /// What pacparser printed, or `fallback`; SpiderMonkey reports a failed allocation as "out of memory".
    private static func failure(or fallback: String) -> Failure {
        let message = PacEngineErrors.message(or: fallback)
        return Failure(message: message, outOfMemory: message.contains("out of memory"))
    }
}

/// What pacparser printed while the engine was last called (it reports script errors through a printer
/// function instead of return values). Touched only by the PAC worker's one thread.
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
