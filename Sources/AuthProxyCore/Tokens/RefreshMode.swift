/// `refresh`: when a credential that fetches tokens asks its token service for the next one.
///
/// - ``ahead`` (the default): a token inside its refresh margin (``IssuedToken/refreshMargin``) is still handed out
///   while a refresh runs in the background, so no request waits; `prefetch = true` keeps tokens fresh even with no
///   request at all, and a key backing off after a failure is probed when its backoff ends.
/// - ``onDemand`` (`"on_demand"`, for sidecars scaled to zero or whose CPU is throttled between requests, like
///   cloud-sql-proxy's `--lazy-refresh`): nothing is fetched unless a request needs the token now. A token inside its
///   margin counts as used up: the next request that needs it waits for one new token (single flight, as after
///   expiry), so no refresh runs after the response went out. No probe follows a backoff (the next request after it
///   asks), and `prefetch` is refused. The cost: one token request in the time of the first request after the token
///   expired or entered its margin.
///
/// Not touched by either: `rest/info` discovery (read only inside a token request), the fleet's notice connection
/// to Redis (no token traffic), the once-a-second look at the local state file, and the exchange of a sign-in's
/// refresh token, which keeps the sign-in alive.
public enum RefreshMode: String, Sendable, CaseIterable {
    case ahead
    case onDemand = "on_demand"
}
