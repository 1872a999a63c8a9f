import Testing

@testable import AuthProxyCore

/// cgroup files as a map from path to contents.
private func reader(_ files: [String: String]) -> (String) -> String? { { files[$0] } }

private let v2Mountinfo = """
    22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
    25 1 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
    29 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
    """

private let v1Mountinfo = """
    30 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,cpu,cpuacct
    31 25 0:27 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:12 - cgroup cgroup rw,memory
    """

@Suite struct CPUBudgetTests {
    @Test func aCgroupV2LimitOnTheProcessGroupIsFound() {
        let q = CgroupCPUQuota.find(
            cgroup: "0::/kubepods/pod1/ctr\n", mountinfo: v2Mountinfo,
            read: reader([
                "/sys/fs/cgroup/kubepods/pod1/ctr/cpu.max": "150000 100000\n",
                "/sys/fs/cgroup/kubepods/pod1/cpu.max": "max 100000\n",
                "/sys/fs/cgroup/cpu.max": "max 100000\n",
            ]))
        #expect(q == CgroupCPUQuota(quota: 150_000, period: 100_000))
        #expect(q?.wholeCPUs == 2)
        #expect(q?.description == "1.50 CPUs")
    }

    @Test func aParentsTighterLimitBindsTheChild() {
        let q = CgroupCPUQuota.find(
            cgroup: "0::/system.slice/authproxy.service\n", mountinfo: v2Mountinfo,
            read: reader([
                "/sys/fs/cgroup/system.slice/authproxy.service/cpu.max": "400000 100000",
                "/sys/fs/cgroup/system.slice/cpu.max": "50000 100000",
            ]))
        #expect(q?.cpus == 0.5)
        #expect(q?.wholeCPUs == 1)
    }

    @Test func noLimitAnywhereIsNil() {
        let q = CgroupCPUQuota.find(
            cgroup: "0::/user.slice\n", mountinfo: v2Mountinfo,
            read: reader(["/sys/fs/cgroup/user.slice/cpu.max": "max 100000\n"]))
        #expect(q == nil)
        // Nothing readable at all (no cgroup files, or a hierarchy without the cpu controller).
        #expect(CgroupCPUQuota.find(cgroup: "0::/\n", mountinfo: v2Mountinfo, read: { _ in nil }) == nil)
        #expect(CgroupCPUQuota.find(cgroup: "", mountinfo: "", read: { _ in nil }) == nil)
    }

    @Test func insideACgroupNamespaceTheGroupIsTheMountPoint() {
        // Docker with a private cgroup namespace: /proc/self/cgroup says "0::/", the limit is at the mount point.
        let q = CgroupCPUQuota.find(
            cgroup: "0::/\n", mountinfo: v2Mountinfo,
            read: reader(["/sys/fs/cgroup/cpu.max": "100000 100000\n"]))
        #expect(q?.wholeCPUs == 1)
        #expect(q?.description == "1 CPU")
    }

    @Test func cgroupV1QuotaAndPeriodAreRead() {
        let q = CgroupCPUQuota.find(
            cgroup: "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n", mountinfo: v1Mountinfo,
            read: reader([
                "/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "200000\n",
                "/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
                "/sys/fs/cgroup/cpu,cpuacct/docker/cpu.cfs_quota_us": "-1\n",
                "/sys/fs/cgroup/cpu,cpuacct/docker/cpu.cfs_period_us": "100000\n",
            ]))
        #expect(q == CgroupCPUQuota(quota: 200_000, period: 100_000))
    }

    @Test func aV1MountWhoseRootIsTheContainersGroupIsReadAtItsMountPoint() {
        // Older Docker without cgroup namespaces: the container's own group is mounted at /sys/fs/cgroup/cpu.
        let mountinfo = "40 35 0:30 /docker/abc /sys/fs/cgroup/cpu ro,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
        let q = CgroupCPUQuota.find(
            cgroup: "4:cpu,cpuacct:/docker/abc\n", mountinfo: mountinfo,
            read: reader([
                "/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "50000",
                "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000",
            ]))
        #expect(q?.cpus == 0.5)
    }

    @Test func escapedMountPointsAreDecoded() {
        let mountinfo = "25 1 0:23 / /sys/fs/my\\040cgroup rw - cgroup2 cgroup2 rw\n"
        let q = CgroupCPUQuota.find(
            cgroup: "0::/\n", mountinfo: mountinfo, read: reader(["/sys/fs/my cgroup/cpu.max": "300000 100000"]))
        #expect(q?.wholeCPUs == 3)
    }

    @Test func malformedFilesAreIgnored() {
        #expect(CgroupCPUQuota.parseV2("max") == nil)
        #expect(CgroupCPUQuota.parseV2("0 100000") == nil)
        #expect(CgroupCPUQuota.parseV2("abc 100000") == nil)
        #expect(CgroupCPUQuota.parseV1(quota: "-1", period: "100000") == nil)
        #expect(CgroupCPUQuota.parseV1(quota: "100000", period: nil) == nil)
    }

    @Test func theDefaultWorkersFollowTheUsableCPUs() {
        // The host's count when nothing narrows it.
        #expect(CPUBudget(online: 8, affinity: 8, quota: nil).defaultWorkers == 16)
        // taskset -c 0 on a 2-CPU host.
        let pinned = CPUBudget(online: 2, affinity: 1, quota: nil)
        #expect(pinned.usable == 1)
        #expect(pinned.defaultWorkers == 4)
        #expect(pinned.description == "1 usable CPU (2 online, affinity 1)")
        // A 64-CPU node, limits.cpu 1500m: 2 usable CPUs, 4 loops instead of 32; limits.cpu 3: 6 loops.
        let pod = CPUBudget(online: 64, affinity: 64, quota: CgroupCPUQuota(quota: 150_000, period: 100_000))
        #expect(pod.usable == 2)
        #expect(pod.defaultWorkers == 4)
        #expect(pod.description == "2 usable CPUs (64 online, cgroup limit 1.50 CPUs)")
        #expect(
            CPUBudget(online: 64, affinity: 64, quota: CgroupCPUQuota(quota: 300_000, period: 100_000)).defaultWorkers
                == 6)
        // Never fewer than 4 loops, never more than 32.
        #expect(
            CPUBudget(online: 1, affinity: nil, quota: CgroupCPUQuota(quota: 10_000, period: 100_000)).defaultWorkers
                == 4)
        #expect(CPUBudget(online: 128, affinity: 128, quota: nil).defaultWorkers == 32)
    }

    @Test func thisProcessHasABudget() {
        let b = CPUBudget.current
        #expect(b.usable >= 1)
        #expect(b.usable <= b.online)
    }
}
