/// The outcome of one ``ProxyServer/reload(trigger:)``: what was applied, or why the new configuration was
/// rejected (the running one stays in force). Holds no secret: credential names, setting keys and the
/// configuration error (which names a key and a line, never a value read from a secret).
public struct ReloadResult: Sendable, CustomStringConvertible {
    /// What asked for the reload.
    public enum Trigger: String, Sendable {
        case signal = "SIGHUP"
        case admin = "POST /reload"
        case fileChange = "file change"
    }

    public enum Outcome: Sendable {
        /// The new configuration is in force for new requests (``ConfigDiff`` says what changed).
        case applied(ConfigDiff)
        /// The new configuration is invalid; the running one stays. The text names the key and line.
        case rejected(String)
    }

    public var trigger: Trigger
    public var outcome: Outcome
    /// The configuration generation serving new requests afterwards (1 at start, +1 per applied reload).
    public var generation: Int

    public var applied: Bool {
        if case .applied = outcome { return true }
        return false
    }

    public var description: String {
        switch outcome {
        case .rejected(let why):
            return "configuration rejected, the running one stays in force: \(why)"
        case .applied(let d):
            var parts: [String] = []
            if !d.added.isEmpty { parts.append("added \(d.added.joined(separator: ","))") }
            if !d.changed.isEmpty { parts.append("changed \(d.changed.joined(separator: ","))") }
            if !d.removed.isEmpty { parts.append("removed \(d.removed.joined(separator: ","))") }
            if !d.kept.isEmpty { parts.append("kept \(d.kept.joined(separator: ","))") }
            if !d.retuned.isEmpty { parts.append("retuned \(d.retuned.joined(separator: ","))") }
            if !d.live.isEmpty { parts.append("settings \(d.live.joined(separator: ","))") }
            if !d.restartNeeded.isEmpty {
                parts.append("needs restart: \(d.restartNeeded.map(\.key).joined(separator: ","))")
            }
            return "configuration generation \(generation) applied"
                + (parts.isEmpty ? " (no changes)" : ": " + parts.joined(separator: "; "))
        }
    }
}
