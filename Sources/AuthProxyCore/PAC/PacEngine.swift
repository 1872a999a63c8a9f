import CAuthProxyShims
import Dispatch

#if canImport(Glibc)
    import Glibc
#endif

/// The PAC engine as the proxy sees it: the PAC file runs in a worker process of its own (``PacWorker``,
/// `authproxy pac-worker`: this binary again), which caps its memory; each call has a deadline, after which the
/// worker is killed and started again with the last good file. A file that runs out of memory or time when it is
/// loaded is refused like a broken one, and the one before stays in force.
///
/// Calls are synchronous and run on ``queue``, a thread of its own (the engine is one per process and answers
/// one call at a time): never on an event loop. A PAC may call `dnsResolve`/`isInNet`/`myIpAddress`, which
/// block, and a call may take up to the deadline. The thread also matters to `PR_SET_PDEATHSIG`, which fires
/// when the thread that started the worker ends: this one lives as long as the process.
final class PacEngine: @unchecked Sendable {
    static let shared = PacEngine()

    /// The only queue that talks to the worker (and touches this object's state, but ``activity``).
    let queue = ProxyQueue.ownThread("authproxy.pac")

    /// The worker's memory budget above what it maps at start. Real PAC files are a few KiB to a few hundred KiB
    /// and their JavaScript heap stays within a few MiB; 256 MiB leaves a wide margin for a large one, and is
    /// small next to the host memory a proxy runs on (a container of 512 MiB survives it).
    static let memoryMiB = 256
    /// The default deadline of one call: an evaluation answers in microseconds, but `dnsResolve` may wait for a
    /// slow DNS server (the resolver's own timeout is 5 s per try).
    static let defaultDeadlineSeconds = 10

    /// The program started as the worker: this process's own binary, whatever name it was started by, so the
    /// worker always speaks the same protocol. Tests that do not run inside `authproxy` set the built binary.
    var workerPath = "/proc/self/exe"

    struct Failure: Error, Equatable {
        var message: String
    }

    private var script: String?
    private var worker: (pid: pid_t, fd: Int32)?
    private var deadlineSeconds = defaultDeadlineSeconds
    private let activityLock = Lock()
    private var activityState = PacEngineActivity.idle
    private let now: @Sendable () -> UInt64 = { DispatchTime.now().uptimeNanoseconds / 1_000_000 }

    private init() {}

    /// What the engine is doing (any queue).
    var activity: PacEngineActivity { activityLock.withLock { activityState } }

    private func set(_ a: PacEngineActivity) {
        activityLock.withLock { activityState = a }
    }

    /// `upstream_pac_timeout_seconds`: the deadline of each call from now on.
    func setDeadline(seconds: Int) {
        dispatchPrecondition(condition: .onQueue(queue))
        deadlineSeconds = max(1, seconds)
    }

    /// Makes `text` the PAC file in force: it must parse and its `FindProxyForURL` answer a probe, within the
    /// memory limit and the deadline. On failure the previous script stays in force (in a new worker, so nothing
    /// the failed one allocated stays).
    func load(_ text: String) -> Result<Void, Failure> {
        dispatchPrecondition(condition: .onQueue(queue))
        if case .failure(let f) = ensureWorker() { return .failure(f) }
        set(.evaluating(what: "a new PAC file", since: now()))
        let outcome = call(.load(text))
        set(.idle)
        switch outcome {
        case .success(.loaded):
            script = text
            return .success(())
        case .success(let other):
            let f = Self.failure(other) ?? Failure(message: "the PAC worker gave an unexpected reply")
            restart(after: f.message)
            return .failure(f)
        case .failure(let f):
            restart(after: f.message)
            return .failure(f)
        }
    }

    /// `FindProxyForURL(url, host)` of the script in force: its answer as it is.
    func findProxy(url: String, host: String) -> Result<String, Failure> {
        dispatchPrecondition(condition: .onQueue(queue))
        guard script != nil else { return .failure(Failure(message: "no PAC file is loaded")) }
        if case .failure(let f) = ensureWorker() { return .failure(f) }
        set(.evaluating(what: url, since: now()))
        let outcome = call(.findProxy(url: url, host: host))
        set(.idle)
        switch outcome {
        case .success(.answer(let a)):
            return .success(a)
        case .success(let other):
            let f = Self.failure(other) ?? Failure(message: "the PAC worker gave an unexpected reply")
            // A script that ran out of memory may have left the engine's heap full: start afresh.
            if case .outOfMemory = other { restart(after: f.message) }
            return .failure(f)
        case .failure(let f):
            restart(after: f.message)
            return .failure(f)
        }
    }

    var hasScript: Bool {
        dispatchPrecondition(condition: .onQueue(queue))
        return script != nil
    }

    /// The failure a reply stands for, nil for a success.
    static func failure(_ reply: PacWorkerProtocol.Reply) -> Failure? {
        switch reply {
        case .loaded, .answer: return nil
        case .scriptError(let m): return Failure(message: m)
        case .outOfMemory(let m):
            return Failure(message: "the PAC file exceeded the PAC memory limit of \(memoryMiB) MiB (\(m))")
        }
    }

    /// Why a worker ended, from its wait status.
    static func death(status: Int32, deadlineSeconds: Int) -> String {
        let signalled = status & 0x7f != 0 && status & 0x7f != 0x7f
        guard signalled else { return "the PAC worker exited (status \((status >> 8) & 0xff))" }
        let sig = status & 0x7f
        if sig == SIGXCPU { return "the PAC file did not answer within \(deadlineSeconds) s (its CPU limit ended it)" }
        return "the PAC worker died (signal \(sig))"
    }

    // MARK: the worker

    /// A worker with the script in force loaded: the running one, or a new one.
    private func ensureWorker() -> Result<Void, Failure> {
        if worker != nil { return .success(()) }
        var fds: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0 else {
            return .failure(Failure(message: "cannot start the PAC worker: socketpair: \(lastErrorString())"))
        }
        let args = [
            "authproxy", "pac-worker", "--memory-mib", "\(Self.memoryMiB)", "--seconds", "\(deadlineSeconds)",
            "--parent", "\(getpid())",
        ]
        var cArgs: [UnsafeMutablePointer<CChar>?] = args.map { strdup($0) } + [nil]
        let pid = ap_spawn_helper(workerPath, &cArgs, fds[1])
        for a in cArgs { free(a) }
        close(fds[1])
        guard pid > 0 else {
            close(fds[0])
            return .failure(
                Failure(message: "cannot start the PAC worker (\(workerPath)): \(String(cString: strerror(-pid)))"))
        }
        _ = fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK)
        worker = (pid_t(pid), fds[0])
        guard let script else { return .success(()) }
        switch call(.load(script)) {
        case .success(.loaded):
            return .success(())
        case .success(let other):
            stopWorker()
            let why = Self.failure(other)?.message ?? "an unexpected reply"
            return .failure(Failure(message: "the PAC worker could not load the PAC file in force again: \(why)"))
        case .failure(let f):
            stopWorker()
            return .failure(Failure(message: "the PAC worker could not load the PAC file in force again: \(f.message)"))
        }
    }

    /// Ends the worker after `why` and starts a new one with the last good script, so the next request does not
    /// pay for the start. `/readyz` says the engine is restarting meanwhile.
    private func restart(after why: String) {
        stopWorker()
        set(.restarting(why: why))
        _ = ensureWorker()
        set(.idle)
    }

    private func stopWorker() {
        guard let w = worker else { return }
        worker = nil
        close(w.fd)
        kill(w.pid, SIGKILL)
        var status: Int32 = 0
        while waitpid(w.pid, &status, 0) < 0, errno == EINTR {}
    }

    /// Sends `request` and waits for the reply until the deadline; a worker that passes it is killed (by the
    /// caller, ``restart(after:)``). A worker that dies is reaped here, and why it died is the failure.
    private func call(_ request: PacWorkerProtocol.Request) -> Result<PacWorkerProtocol.Reply, Failure> {
        guard let w = worker else { return .failure(Failure(message: "the PAC worker is not running")) }
        let deadline = now() + UInt64(deadlineSeconds) * 1000
        let timeout = Failure(message: "the PAC file did not answer within \(deadlineSeconds) s")
        let out = PacWorkerProtocol.encode(request)
        var sent = 0
        var reader = PacWorkerProtocol.FrameReader()
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            if sent == out.count, let frame = reader.next() {
                switch frame {
                case .success(let body):
                    return PacWorkerProtocol.decodeReply(body).mapError {
                        Failure(message: "the PAC worker: \($0.message)")
                    }
                case .failure(let e):
                    return .failure(Failure(message: "the PAC worker: \(e.message)"))
                }
            }
            let t = now()
            guard t < deadline else { return .failure(timeout) }
            var p = pollfd(fd: w.fd, events: Int16(sent < out.count ? POLLOUT : POLLIN), revents: 0)
            let r = poll(&p, 1, Int32(min(deadline - t, 60_000)))
            if r < 0, errno == EINTR { continue }
            guard r > 0 else { continue }
            if sent < out.count {
                let n = out.withUnsafeBytes { send(w.fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
                if n < 0, errno == EAGAIN || errno == EINTR { continue }
                guard n > 0 else { return .failure(died(w.pid)) }
                sent += n
            } else {
                let n = chunk.withUnsafeMutableBytes { recv(w.fd, $0.baseAddress, $0.count, 0) }
                if n < 0, errno == EAGAIN || errno == EINTR { continue }
                guard n > 0 else { return .failure(died(w.pid)) }
                reader.append(chunk[0..<n])
            }
        }
    }

    /// The worker closed its end: reaped, and why it ended.
    private func died(_ pid: pid_t) -> Failure {
        var status: Int32 = 0
        var r: pid_t
        repeat { r = waitpid(pid, &status, 0) } while r < 0 && errno == EINTR
        if let w = worker, w.pid == pid {
            close(w.fd)
            worker = nil
        }
        return Failure(
            message: r == pid ? Self.death(status: status, deadlineSeconds: deadlineSeconds) : "the PAC worker died")
    }
}
