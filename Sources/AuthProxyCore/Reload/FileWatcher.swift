import Dispatch
import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// Notices changes of a set of files (``WatchedFiles``) and reports when their contents changed:
/// - `[proxy] watch_config` (``ConfigWatcher``): the configuration file and the `file:` secrets it names; a change
///   asks for a reload;
/// - always: the certificate and CA files of the running credentials (``CertificateFiles``); a change has them
///   looked at again (``CertificateRenewal``).
///
/// Watches **directories**, not files: editors replace a file by renaming a new one over it, and Kubernetes
/// updates a mounted ConfigMap or Secret by an atomic symlink swap (`key -> ..data/key`, `..data ->
/// ..2026_11_23_…/`; a new timestamped directory is written, `..data_tmp` is linked to it and renamed over
/// `..data`), so a watch on the file itself would be left on the old inode. The directory of each path is
/// watched, and the directory of the file it resolves to. Events are read from one inotify descriptor by a
/// Dispatch read source (no timer runs while nothing changes, so an idle proxy is not woken up); a burst is
/// debounced (``ChangeDebouncer``), then the inputs are re-read and a reload asked for only when a digest
/// differs (``ConfigInputs``). The watches are re-established after every look, since the set of files and
/// the targets of the links change.
///
/// Confined to `queue`: the read source, the timer and every member are used only there.
final class FileWatcher<Inputs: WatchedFiles>: @unchecked Sendable {
    private let queue: DispatchQueue
    private let fd: Int32
    private var source: (any DispatchSourceRead)?
    private var timer: (any DispatchSourceTimer)?
    private var debouncer = ChangeDebouncer()
    /// The inputs as last seen on disk (or as the last reload read them).
    private var known: Inputs
    /// Watched directory by watch descriptor, and the names in it that matter.
    private var directories: [Int32: (path: String, names: Set<String>)] = [:]
    private let logger: Logger
    /// Names the watcher in its log lines (`watch_config`, `certificates`).
    private let label: String
    private let changed: @Sendable () -> Void
    private var stopped = false

    static var mask: UInt32 {
        UInt32(IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_CLOSE_WRITE | IN_DELETE | IN_ATTRIB)
            | UInt32(IN_DELETE_SELF | IN_MOVE_SELF)
    }

    /// Starts watching `inputs`; `changed` runs on the watcher's queue when their contents changed. Nil when
    /// inotify is unavailable (logged).
    init?(inputs: Inputs, label: String = "watch_config", logger: Logger, changed: @escaping @Sendable () -> Void) {
        let fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard fd >= 0 else {
            logger.error(
                "\(label): cannot watch the files (inotify_init1)",
                metadata: ["cause": "\(String(cString: strerror(errno)))", "hint": "send SIGHUP to reload instead"])
            return nil
        }
        queue = ProxyQueue.make("authproxy.watch-\(label)")
        self.fd = fd
        known = inputs
        self.logger = logger
        self.label = label
        self.changed = changed
        let s = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        s.setEventHandler { [weak self] in self?.readEvents() }
        s.setCancelHandler { Glibc.close(fd) }
        source = s
        queue.sync { rewatch() }
        s.resume()
    }

    /// A reload read `inputs` (the set of files may differ): compare against them from now on.
    func update(_ inputs: Inputs) {
        queue.async { [self] in
            guard !stopped else { return }
            known = inputs
            rewatch()
        }
    }

    /// Stops watching (`watch_config` turned off, no certificate files any more, or shutdown). The descriptor
    /// closes when the source is gone.
    func stop() {
        queue.async { [self] in
            guard !stopped else { return }
            stopped = true
            timer?.cancel()
            timer = nil
            source?.cancel()
            source = nil
        }
    }

    // MARK: - on `queue`

    private func readEvents() {
        var relevant = false
        withUnsafeTemporaryAllocation(byteCount: 8192, alignment: MemoryLayout<inotify_event>.alignment) { buf in
            while true {
                let n = read(fd, buf.baseAddress, buf.count)
                if n < 0, errno == EINTR { continue }
                guard n > 0 else { return }  // EAGAIN: drained
                var off = 0
                while off + MemoryLayout<inotify_event>.size <= n {
                    let p = buf.baseAddress! + off
                    let wd = p.loadUnaligned(fromByteOffset: 0, as: Int32.self)
                    let mask = p.loadUnaligned(fromByteOffset: 4, as: UInt32.self)
                    let len = Int(p.loadUnaligned(fromByteOffset: 12, as: UInt32.self))
                    let nameStart = p + MemoryLayout<inotify_event>.size
                    let name = len > 0 ? String(cString: nameStart.assumingMemoryBound(to: CChar.self)) : ""
                    off += MemoryLayout<inotify_event>.size + len
                    if isRelevant(wd: wd, mask: mask, name: name) { relevant = true }
                }
            }
        }
        guard relevant else { return }
        act(debouncer.eventSeen(now: DispatchTime.now().uptimeNanoseconds))
    }

    /// Whether an event can concern an input: one of its names, a Kubernetes `..data` swap (every name
    /// the atomic writer uses starts with `..`), the directory itself going away, or lost events.
    private func isRelevant(wd: Int32, mask: UInt32, name: String) -> Bool {
        if mask & UInt32(IN_Q_OVERFLOW) != 0 { return true }
        // A watch removed by ``rewatch()`` is no longer listed: its IN_IGNORED is no news.
        guard let d = directories[wd] else { return false }
        if mask & (UInt32(IN_DELETE_SELF) | UInt32(IN_MOVE_SELF) | UInt32(IN_IGNORED)) != 0 { return true }
        return d.names.contains(name) || name.hasPrefix("..")
    }

    private func act(_ action: ChangeDebouncer.Action) {
        switch action {
        case .none:
            return
        case .armTimer(let at):
            if timer == nil {
                let t = DispatchSource.makeTimerSource(queue: queue)
                t.setEventHandler { [weak self] in
                    guard let self else { return }
                    self.act(self.debouncer.timerFired(now: DispatchTime.now().uptimeNanoseconds))
                }
                t.schedule(deadline: DispatchTime(uptimeNanoseconds: at))
                t.resume()
                timer = t
            } else {
                timer?.schedule(deadline: DispatchTime(uptimeNanoseconds: at))
            }
        case .check:
            // The timer is one-shot: none stays behind while nothing changes.
            timer?.cancel()
            timer = nil
            check()
        }
    }

    private func check() {
        guard !stopped else { return }
        let now = known.rereadFromDisk()
        rewatch()
        guard now != known else { return }
        known = now
        changed()
    }

    /// Watches the directory of every input and of the file each resolves to; drops watches no longer needed.
    private func rewatch() {
        var wanted: [String: Set<String>] = [:]
        for path in known.paths {
            let (dir, name) = Self.split(path)
            wanted[dir, default: []].insert(name)
            if let real = Self.resolved(path), real != path {
                let (rdir, rname) = Self.split(real)
                wanted[rdir, default: []].insert(rname)
            }
        }
        var next: [Int32: (path: String, names: Set<String>)] = [:]
        for (dir, names) in wanted {
            // Adding an existing watch returns its descriptor again (and replaces its mask).
            let wd = inotify_add_watch(fd, dir, Self.mask)
            if wd < 0 {
                logger.warning(
                    "\(label): cannot watch a directory",
                    metadata: [
                        "directory": "\(dir)", "cause": "\(String(cString: strerror(errno)))",
                    ])
                continue
            }
            next[wd] = (dir, names)
        }
        for wd in directories.keys where next[wd] == nil { inotify_rm_watch(fd, wd) }
        directories = next
    }

    static func split(_ path: String) -> (directory: String, name: String) {
        guard let slash = path.lastIndex(of: "/") else { return (".", path) }
        let dir = String(path[..<slash])
        return (dir.isEmpty ? "/" : dir, String(path[path.index(after: slash)...]))
    }

    private static func resolved(_ path: String) -> String? {
        guard let p = realpath(path, nil) else { return nil }
        defer { free(p) }
        return String(cString: p)
    }
}

/// `[proxy] watch_config`: the configuration file and the `file:` secrets it names.
typealias ConfigWatcher = FileWatcher<ConfigInputs>
