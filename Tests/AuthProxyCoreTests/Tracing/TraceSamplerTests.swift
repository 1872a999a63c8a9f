import Testing

@testable import AuthProxyCore

/// The OTel samplers: fixed answers, the ratio by trace id, and the parent's flag winning in the parent-based ones.
@Suite struct TraceSamplerTests {
    static let low = TraceID(high: 0xFFFF_FFFF_FFFF_FFFF, low: 0x0000_0000_0000_0001)
    static let high = TraceID(high: 0, low: 0x7FFF_FFFF_FFFF_FFFF)

    @Test func fixedSamplersIgnoreTheParent() {
        #expect(TraceSampler.alwaysOn.samples(traceID: Self.low, parentSampled: false))
        #expect(!TraceSampler.alwaysOff.samples(traceID: Self.low, parentSampled: true))
    }

    @Test func ratioDecidesByTheTraceIDsLowBits() {
        let half = TraceSampler.traceIDRatio(0.5)
        #expect(half.samples(traceID: Self.low, parentSampled: nil))
        #expect(!half.samples(traceID: Self.high, parentSampled: nil))
        #expect(TraceSampler.traceIDRatio(1).samples(traceID: Self.high, parentSampled: nil))
        #expect(!TraceSampler.traceIDRatio(0).samples(traceID: Self.low, parentSampled: nil))
        // The same trace id gets the same answer everywhere.
        let id = TraceID.random()
        #expect(half.samples(traceID: id, parentSampled: nil) == half.samples(traceID: id, parentSampled: nil))
    }

    @Test func ratioKeepsRoughlyThatShare() {
        let tenth = TraceSampler.traceIDRatio(0.1)
        let kept = (0..<20_000).filter { _ in tenth.samples(traceID: .random(), parentSampled: nil) }.count
        #expect(kept > 1_500 && kept < 2_500)
    }

    @Test func parentBasedFollowsTheParentAndTheRootSamplerForRoots() {
        let p = TraceSampler.parentBased(root: .alwaysOff)
        #expect(p.samples(traceID: Self.low, parentSampled: true))
        #expect(!p.samples(traceID: Self.low, parentSampled: false))
        #expect(!p.samples(traceID: Self.low, parentSampled: nil))
        let on = TraceSampler.parentBased(root: .alwaysOn)
        #expect(!on.samples(traceID: Self.low, parentSampled: false))
        #expect(on.samples(traceID: Self.low, parentSampled: nil))
        let ratio = TraceSampler.parentBased(root: .traceIDRatio(0.5))
        #expect(ratio.samples(traceID: Self.high, parentSampled: true))
        #expect(!ratio.samples(traceID: Self.high, parentSampled: nil))
    }

    @Test func namesAndArguments() throws {
        #expect(try TraceSampler.named("always_on", argument: nil)?.get() == .alwaysOn)
        #expect(try TraceSampler.named("traceidratio", argument: "0.25")?.get() == .traceIDRatio(0.25))
        #expect(try TraceSampler.named("traceidratio", argument: nil)?.get() == .traceIDRatio(1))
        #expect(
            try TraceSampler.named("parentbased_traceidratio", argument: " 0.5 ")?.get()
                == .parentBased(root: .traceIDRatio(0.5)))
        #expect(
            try TraceSampler.named("parentbased_always_off", argument: nil)?.get() == .parentBased(root: .alwaysOff))
        #expect(TraceSampler.named("sometimes", argument: nil) == nil)
        guard case .failure(let p)? = TraceSampler.named("traceidratio", argument: "2") else {
            Issue.record("a ratio above 1 was accepted")
            return
        }
        #expect(p.message.contains("between 0 and 1"))
    }
}
