/// How a connection reaches its destination, part of what keeps pooled connections apart: a connection through
/// one parent is never handed to a request routed direct or through another parent.
enum Route: Hashable {
    case direct
    /// Through this parent proxy (a CONNECT tunnel to the destination, for the own client's connections).
    case parent(ParentProxy)
    /// To this `http` parent itself, which gets plain `http://` requests in absolute form (and a Basic-only login
    /// with each, ``ParentRouting/proxyAuthorization(for:)``).
    case forwardedBy(ParentProxy)
}
