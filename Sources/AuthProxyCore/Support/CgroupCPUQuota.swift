/// A CPU bandwidth limit from a control group: `quota` µs of CPU time per `period` µs, i.e. `quota / period`
/// CPUs' worth (a container started with `--cpus 1.5`, or a Kubernetes `limits.cpu: 1500m`, gets
/// `150000 100000`).
///
/// Pure: ``find(cgroup:mountinfo:read:)`` takes the text of `/proc/self/cgroup` and `/proc/self/mountinfo` and a
/// file reader, so it is unit-tested with fixtures; ``CPUBudget`` does the reading.
struct CgroupCPUQuota: Sendable, Equatable, CustomStringConvertible {
    var quota: Int
    var period: Int

    /// The limit in CPUs (fractional).
    var cpus: Double { Double(quota) / Double(period) }

    /// Whole CPUs the limit lets the process keep busy: rounded up, at least 1 (`--cpus 0.5` still runs on one).
    var wholeCPUs: Int { max(1, (quota + period - 1) / period) }

    var description: String {
        let hundredths = (quota * 100 + period / 2) / period
        let text = hundredths % 100 == 0 ? "\(hundredths / 100)" : String(format2: hundredths)
        return "\(text) CPU\(hundredths == 100 ? "" : "s")"
    }

    /// The tightest CPU limit on this process's control group and its ancestors, cgroup v2 (`cpu.max`) or v1
    /// (`cpu.cfs_quota_us` / `cpu.cfs_period_us`); nil when none is set or nothing can be read. `read` returns a
    /// file's contents or nil.
    static func find(cgroup: String, mountinfo: String, read: (String) -> String?) -> CgroupCPUQuota? {
        let mounts = mountinfo.split(separator: "\n").compactMap(Mount.init)
        var best: CgroupCPUQuota?
        for line in cgroup.split(separator: "\n") {
            let parts = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard parts.count == 3 else { continue }
            let controllers = parts[1].split(separator: ",")
            let path = String(parts[2])
            let found: CgroupCPUQuota?
            if parts[0] == "0" && parts[1].isEmpty {
                guard let m = mounts.first(where: { $0.fstype == "cgroup2" }) else { continue }
                found = tightest(in: m, path: path) { dir in read(dir + "/cpu.max").flatMap(parseV2) }
            } else if controllers.contains("cpu") {
                guard let m = mounts.first(where: { $0.fstype == "cgroup" && $0.superOptions.contains("cpu") }) else {
                    continue
                }
                found = tightest(in: m, path: path) { dir in
                    parseV1(quota: read(dir + "/cpu.cfs_quota_us"), period: read(dir + "/cpu.cfs_period_us"))
                }
            } else {
                continue
            }
            if let f = found, best.map({ f.cpus < $0.cpus }) ?? true { best = f }
        }
        return best
    }

    /// `cpu.max`: "max 100000" (no limit) or "QUOTA PERIOD".
    static func parseV2(_ text: String) -> CgroupCPUQuota? {
        let f = text.split(whereSeparator: { $0 == " " || $0 == "\n" })
        guard f.count == 2, let q = Int(f[0]), let p = Int(f[1]), q > 0, p > 0 else { return nil }
        return CgroupCPUQuota(quota: q, period: p)
    }

    /// `cpu.cfs_quota_us` ("-1": no limit) and `cpu.cfs_period_us`.
    static func parseV1(quota: String?, period: String?) -> CgroupCPUQuota? {
        guard let qs = quota, let ps = period,
            let q = Int(qs.trimmingWhitespace()), let p = Int(ps.trimmingWhitespace()), q > 0, p > 0
        else { return nil }
        return CgroupCPUQuota(quota: q, period: p)
    }

    /// The tightest limit from the group's directory up to the mount point: a parent's limit binds its children.
    private static func tightest(in mount: Mount, path: String, limit: (String) -> CgroupCPUQuota?) -> CgroupCPUQuota? {
        // The path in /proc/self/cgroup is relative to the hierarchy's root; the mount shows `mount.root` of it.
        var relative = Substring(path)
        if mount.root != "/" {
            guard relative == mount.root || relative.hasPrefix(mount.root + "/") else {
                // Outside what is mounted here (a cgroup namespace boundary): only the mount point is visible.
                return limit(mount.point)
            }
            relative = relative.dropFirst(mount.root.count)
        }
        let components = relative.split(separator: "/").filter { $0 != "." && $0 != ".." }
        var best: CgroupCPUQuota?
        for depth in stride(from: components.count, through: 0, by: -1) {
            let dir = ([mount.point] + components[0..<depth].map(String.init)).joined(separator: "/")
            if let l = limit(dir), best.map({ l.cpus < $0.cpus }) ?? true { best = l }
        }
        return best
    }

    /// One line of `/proc/self/mountinfo`: `ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER`.
    private struct Mount {
        var root: String
        var point: String
        var fstype: String
        var superOptions: [Substring]

        init?(_ line: Substring) {
            let f = line.split(separator: " ")
            guard f.count >= 7, let dash = f.firstIndex(of: "-"), dash >= 6, dash + 1 < f.count else { return nil }
            root = Self.unescape(f[3])
            point = Self.unescape(f[4])
            fstype = String(f[dash + 1])
            superOptions = dash + 3 < f.count ? f[dash + 3].split(separator: ",") : []
        }

        /// mountinfo writes space, tab, newline and backslash in paths as `\040`, `\011`, `\012`, `\134`.
        private static func unescape(_ s: Substring) -> String {
            guard s.contains("\\") else { return String(s) }
            var out: [UInt8] = []
            let b = Array(s.utf8)
            var i = 0
            while i < b.count {
                if b[i] == UInt8(ascii: "\\"), i + 3 < b.count,
                    let v = UInt8(String(decoding: b[(i + 1)...(i + 3)], as: UTF8.self), radix: 8)
                {
                    out.append(v)
                    i += 4
                } else {
                    out.append(b[i])
                    i += 1
                }
            }
            return String(decoding: out, as: UTF8.self)
        }
    }
}

private extension String {
    /// `hundredths` as "1.50".
    init(format2 hundredths: Int) {
        let frac = hundredths % 100
        self = "\(hundredths / 100).\(frac < 10 ? "0" : "")\(frac)"
    }
}
