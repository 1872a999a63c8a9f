/// The OpenTelemetry samplers `OTEL_TRACES_SAMPLER` names (`always_on`, `always_off`, `traceidratio`, and the
/// `parentbased_*` forms, the SDK default being `parentbased_always_on`). Pure: decides from the trace id and the
/// parent, so every replica and every hop that uses the same ratio agrees on the same traces.
enum TraceSampler: Equatable, Sendable {
    case alwaysOn
    case alwaysOff
    /// Keeps a trace when its id's low 8 bytes fall below `ratio` of the range (the OTel SDKs' rule).
    case traceIDRatio(Double)
    /// A remote or local parent's `sampled` flag decides; a root is decided by `root`.
    indirect case parentBased(root: TraceSampler)

    /// Whether a span in trace `traceID` is recorded and exported; `parentSampled` is the parent's flag, nil for a
    /// root span.
    func samples(traceID: TraceID, parentSampled: Bool?) -> Bool {
        switch self {
        case .alwaysOn: return true
        case .alwaysOff: return false
        case .traceIDRatio(let ratio):
            if ratio >= 1 { return true }
            if ratio <= 0 { return false }
            // The low 63 bits compared with ratio * 2^63, as the Java and Go SDKs do.
            let bound = UInt64(ratio * Double(UInt64(1) << 63))
            return traceID.low & 0x7FFF_FFFF_FFFF_FFFF < bound
        case .parentBased(let root):
            if let parentSampled { return parentSampled }
            return root.samples(traceID: traceID, parentSampled: nil)
        }
    }

    /// The sampler named by `OTEL_TRACES_SAMPLER` (or `[tracing] sampler`) with its argument (the ratio, for the
    /// ratio samplers; 1.0 when absent, as the specification says). nil: not a known name. Returns the problem
    /// with the argument instead when it is not a number in 0…1.
    static func named(_ name: String, argument: String?) -> Result<TraceSampler, Problem>? {
        func ratio() -> Result<Double, Problem> {
            guard let argument else { return .success(1) }
            guard let r = Double(argument.trimmingWhitespace()), r >= 0, r <= 1 else {
                return .failure(Problem(message: "sampler argument '\(argument)' is not a ratio between 0 and 1"))
            }
            return .success(r)
        }
        switch name {
        case "always_on": return .success(.alwaysOn)
        case "always_off": return .success(.alwaysOff)
        case "traceidratio": return ratio().map { .traceIDRatio($0) }
        case "parentbased_always_on": return .success(.parentBased(root: .alwaysOn))
        case "parentbased_always_off": return .success(.parentBased(root: .alwaysOff))
        case "parentbased_traceidratio": return ratio().map { .parentBased(root: .traceIDRatio($0)) }
        default: return nil
        }
    }

    static let names = [
        "always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off",
        "parentbased_traceidratio",
    ]

    struct Problem: Error, Equatable {
        var message: String
    }

    /// How the sampler is written in the configuration (for the startup log line).
    var description: String {
        switch self {
        case .alwaysOn: return "always_on"
        case .alwaysOff: return "always_off"
        case .traceIDRatio(let r): return "traceidratio(\(r))"
        case .parentBased(let root): return "parentbased_\(root.description)"
        }
    }
}
