@testable import AuthProxyCore

/// `credential.kind == .apiKey(…)`: a kind held as `any CredentialKind` compared with one of a known type (through
/// the kind's own ``CredentialKind/isSame(as:)``).
func == <K: CredentialKind & Equatable>(lhs: (any CredentialKind)?, rhs: K) -> Bool {
    guard let lhs else { return false }
    return rhs.isSame(as: lhs)
}
