/// Finds the `[[app]]` a `/proxy` request comes from by its origin (the `Origin` header, or the origin of its
/// `Referer`): exact, case-insensitive, as `allowed_origins` is compared.
public struct WebAppDirectory: Sendable {
    public let apps: [WebApp]
    private let byOrigin: [String: Int]

    public init(_ apps: [WebApp]) {
        self.apps = apps
        var m: [String: Int] = [:]
        for (i, a) in apps.enumerated() {
            for o in a.origins where m[o] == nil { m[o] = i }
        }
        byOrigin = m
    }

    public var isEmpty: Bool { apps.isEmpty }

    /// The index of the app serving `origin`, nil when none does.
    public func app(forOrigin origin: String) -> Int? { byOrigin[origin.lowercased()] }
}
