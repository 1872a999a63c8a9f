import CAuthProxyShims
import Dispatch
import Testing

@testable import AuthProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// Counts and thread ids seen by work on a ``DispatchThread``'s queue; touched only on that queue.
private final class Seen: @unchecked Sendable {
    var runs = 0
    var bytes = 0
    var threads = Set<Int32>()

    func record() {
        runs += 1
        threads.insert(ap_gettid())
    }
}

@Suite struct DispatchThreadTests {
    private func start(_ label: String) throws -> DispatchThread {
        switch DispatchThread.start(label: label) {
        case .success(let t): return t
        case .failure(let f): throw f
        }
    }

    @Test func blocksPushedFromManyThreadsAllRunOnTheOneThread() throws {
        let t = try start("authproxy.test.blocks")
        let seen = Seen()
        let producers = 4, each = 5_000
        let group = DispatchGroup()
        for p in 0..<producers {
            DispatchQueue(label: "producer.\(p)").async(group: group) {
                for _ in 0..<each {
                    t.queue.async {
                        dispatchPrecondition(condition: .onQueue(t.queue))
                        seen.record()
                    }
                }
            }
        }
        group.wait()
        let (runs, threads) = t.queue.sync { (seen.runs, seen.threads) }
        #expect(runs == producers * each)
        #expect(threads == [t.tid])
        #expect(t.tid != ap_gettid())
    }

    @Test func sourcesDeliverTheirEventsOnTheThread() throws {
        let t = try start("authproxy.test.sources")
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        let seen = Seen()
        let total = 64 * 1024
        let done = DispatchSemaphore(value: 0)
        let reader = DispatchSource.makeReadSource(fileDescriptor: fds[0], queue: t.queue)
        reader.setEventHandler {
            var buf = [UInt8](repeating: 0, count: 4096)
            let n = read(fds[0], &buf, buf.count)
            if n > 0 { seen.bytes += n }
            seen.record()
            if seen.bytes == total { done.signal() }
        }
        reader.resume()
        let ticks = DispatchSemaphore(value: 0)
        let timer = DispatchSource.makeTimerSource(queue: t.queue)
        timer.schedule(deadline: .now() + .milliseconds(10), repeating: .milliseconds(10))
        nonisolated(unsafe) var timerThread: Int32 = 0
        timer.setEventHandler {
            timerThread = ap_gettid()
            ticks.signal()
        }
        timer.resume()
        let chunk = [UInt8](repeating: 7, count: 1024)
        for _ in 0..<(total / chunk.count) {
            #expect(write(fds[1], chunk, chunk.count) == chunk.count)
        }
        #expect(done.wait(timeout: .now() + 10) == .success)
        #expect(ticks.wait(timeout: .now() + 10) == .success)
        reader.cancel()
        timer.cancel()
        let threads = t.queue.sync { seen.threads }
        #expect(threads == [t.tid])
        #expect(t.queue.sync { timerThread } == t.tid)
    }

    @Test func theThreadIsNamedAfterTheQueue() throws {
        let t = try start("authproxy.test.name")
        var buf = [CChar](repeating: 0, count: 64)
        let fd = open("/proc/self/task/\(t.tid)/comm", O_RDONLY)
        #expect(fd >= 0)
        let n = read(fd, &buf, 63)
        close(fd)
        #expect(n > 0)
        #expect(
            String(decoding: buf.prefix(max(0, n)).map { UInt8(bitPattern: $0) }, as: UTF8.self) == "ap.test.name\n")
    }
}
