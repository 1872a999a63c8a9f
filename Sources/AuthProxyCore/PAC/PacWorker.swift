import CAuthProxyShims

#if canImport(Glibc)
    import Glibc
#endif

/// The PAC worker: the process that runs the PAC file (`authproxy pac-worker`, started by ``PacEngine``). A PAC
/// file comes from whoever serves it, on an `http://` WPAD URL whoever spoofs WPAD: it may allocate until the host
/// runs out of memory or loop forever. Here it can do neither to the proxy: the address space is capped
/// (`RLIMIT_AS`, ``memoryMiB`` above what the process maps when it starts), CPU time is capped per call
/// (`RLIMIT_CPU`, a backstop behind the proxy's own deadline), and the proxy kills the process when a call
/// outlives its deadline.
///
/// It holds no descriptor of the proxy's (``ap_spawn_helper`` closes them), reads requests on standard input (a
/// socket to the proxy) and writes its replies there (``PacWorkerProtocol``), and dies with the proxy
/// (`PR_SET_PDEATHSIG`).
public enum PacWorker {
    /// Runs until the proxy closes the socket; the exit status.
    public static func run(memoryMiB: Int, seconds: Int, parent: Int32) -> Int32 {
        guard ap_die_with_parent(parent) == 0 else { return 1 }
        ap_close_from(3)
        let budget = rlim_t(max(16, memoryMiB)) << 20
        let cap = mappedBytes() + budget
        var limit = rlimit(rlim_cur: cap, rlim_max: cap)
        guard setrlimit(__rlimit_resource_t(RLIMIT_AS.rawValue), &limit) == 0 else { return 1 }
        var interpreter = PacInterpreter()
        var reader = PacWorkerProtocol.FrameReader()
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let body: [UInt8]
            switch reader.next() {
            case .success(let b)?:
                body = b
            case .failure?:
                return 1
            case nil:
                let n = chunk.withUnsafeMutableBytes { read(0, $0.baseAddress, $0.count) }
                if n < 0, errno == EINTR { continue }
                guard n > 0 else { return 0 }
                reader.append(chunk[0..<n])
                continue
            }
            guard case .success(let request) = PacWorkerProtocol.decodeRequest(body) else { return 1 }
            limitCPU(seconds: seconds)
            let reply: PacWorkerProtocol.Reply
            switch request {
            case .load(let text):
                switch interpreter.load(text) {
                case .success: reply = .loaded
                case .failure(let f): reply = f.outOfMemory ? .outOfMemory(f.message) : .scriptError(f.message)
                }
            case .findProxy(let url, let host):
                switch interpreter.findProxy(url: url, host: host) {
                case .success(let answer): reply = .answer(answer)
                case .failure(let f): reply = f.outOfMemory ? .outOfMemory(f.message) : .scriptError(f.message)
                }
            }
            guard writeAll(PacWorkerProtocol.encode(reply)) else { return 0 }
        }
    }

    /// The address space mapped now (`VmSize`): the program and its libraries, which the budget comes on top of.
    private static func mappedBytes() -> rlim_t {
        guard let text = readTextFile("/proc/self/status") else { return 256 << 20 }
        for line in text.split(separator: "\n") where line.hasPrefix("VmSize:") {
            let digits = line.dropFirst("VmSize:".count).filter(\.isNumber)
            if let kib = rlim_t(digits) { return kib << 10 }
        }
        return 256 << 20
    }

    /// The next call may use `seconds` of CPU and a little more, then SIGXCPU ends the process: should the proxy
    /// fail to kill it at the deadline, it still stops. Raising the soft limit again for each call is allowed up to
    /// the hard limit, which is left as it is.
    private static func limitCPU(seconds: Int) {
        var usage = rusage()
        guard getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage) == 0 else { return }
        let used = rlim_t(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec)
        var l = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_CPU.rawValue), &l) == 0 else { return }
        let wanted = used + rlim_t(max(1, seconds)) + 2
        l.rlim_cur = l.rlim_max == rlim_t.max ? wanted : min(wanted, l.rlim_max)
        _ = setrlimit(__rlimit_resource_t(RLIMIT_CPU.rawValue), &l)
    }

    private static func writeAll(_ bytes: [UInt8]) -> Bool {
        var off = 0
        while off < bytes.count {
            let n = bytes.withUnsafeBytes { write(0, $0.baseAddress! + off, $0.count - off) }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { return false }
            off += n
        }
        return true
    }
}
