import CAuthProxyShims

#if canImport(Glibc)
    import Glibc
#endif

/// How many CPUs the proxy can actually use, which sizes the default number of event loops (`[proxy] workers`).
///
/// The host's online CPU count is only the upper bound: a container or a systemd unit usually gets fewer, by an
/// affinity mask (`taskset`, `--cpuset-cpus`, cpuset cgroups) or a CPU quota (`--cpus`, Kubernetes
/// `limits.cpu`, systemd `CPUQuota=`). Event loops beyond what can run at once only take turns on the same CPUs,
/// each with its own connection pool, libcurl multi handle and buffers. HAProxy sizes its threads by the
/// affinity mask, Go and the JVM also by the quota; this does both.
public struct CPUBudget: Sendable, Equatable, CustomStringConvertible {
    /// `sysconf(_SC_NPROCESSORS_ONLN)`.
    public var online: Int
    /// CPUs in the affinity mask, nil if it could not be read.
    public var affinity: Int?
    /// The tightest cgroup CPU limit, nil if none.
    var quota: CgroupCPUQuota?

    init(online: Int, affinity: Int?, quota: CgroupCPUQuota?) {
        self.online = online
        self.affinity = affinity
        self.quota = quota
    }

    /// CPUs the proxy can keep busy at once: the affinity mask (or the online count), capped by the quota
    /// rounded up; at least 1.
    public var usable: Int {
        var n = affinity ?? online
        if let q = quota { n = min(n, q.wholeCPUs) }
        return max(1, n)
    }

    /// The default for `[proxy] workers`: two event loops per usable CPU, at least 4, at most 32.
    ///
    /// At least 4 because, with one CPU saturated, 4 loops needed 6–40 % less CPU per request than 2 (8 rounds of
    /// `bench/ab.sh --workers-a/--workers-b`, docs/BENCHMARKS.md): libdispatch hands a busy loop's events over
    /// in larger batches when more loops share the core. 8 loops measured no better than 4.
    public var defaultWorkers: Int { max(4, min(2 * usable, 32)) }

    /// E.g. "1 usable CPU (2 online, affinity 2, cgroup limit 1 CPU)".
    public var description: String {
        var parts = ["\(online) online"]
        if let a = affinity, a != online { parts.append("affinity \(a)") }
        if let q = quota { parts.append("cgroup limit \(q)") }
        return "\(usable) usable CPU\(usable == 1 ? "" : "s") (\(parts.joined(separator: ", ")))"
    }

    /// This process's budget, read once (the affinity mask, /proc/self/cgroup, /proc/self/mountinfo and the
    /// cgroup files they lead to).
    public static let current: CPUBudget = detect()

    private static func detect() -> CPUBudget {
        let online = max(1, sysconf(Int32(_SC_NPROCESSORS_ONLN)))
        let affinity = ap_affinity_cpu_count()
        var quota: CgroupCPUQuota?
        if let cgroup = readTextFile("/proc/self/cgroup"), let mountinfo = readTextFile("/proc/self/mountinfo") {
            quota = CgroupCPUQuota.find(cgroup: cgroup, mountinfo: mountinfo, read: readTextFile)
        }
        return CPUBudget(online: online, affinity: affinity > 0 ? Int(affinity) : nil, quota: quota)
    }
}
