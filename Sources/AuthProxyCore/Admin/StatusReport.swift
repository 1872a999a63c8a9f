/// Everything the status page and `GET /status.json` show, as one value (the JSON is this type encoded; the page
/// renders it). Never a secret, token or password, nor a prefix of one: tokens appear only as times and states.
public struct StatusReport: Codable, Sendable, Equatable {
    public struct Listener: Codable, Sendable, Equatable {
        public var address: String
        public var open: Bool
    }

    public struct TokenView: Codable, Sendable, Equatable {
        /// The server root (or portal) the token is for.
        public var root: String
        /// `valid`, `refreshing`, `failing`, `rejected` or `expired` (see ``TokenStatus/State``).
        public var state: String
        public var validUntil: String?
        public var expiresInSeconds: Int64?
        public var lastRefresh: String?
        public var lastError: String?
        public var nextRetry: String?
    }

    public struct Credential: Codable, Sendable, Equatable {
        public var name: String
        public var type: String
        public var match: [String]
        public var prefetch: Bool
        public var tokens: [TokenView]
        public var requestsLast5Min: Int
        public var rejectionsLast5Min: Int
        public var rateLimitedLast5Min: Int
        public var rateLimitedTotal: Int
        public var lastTokenRequest: String?
        public var lastTokenRequestSucceeded: Bool?
        public var networkAuth: [NetworkAuth]
        /// What of this credential lapses by itself, and when (``CredentialExpiry``).
        public var expiries: [Expiry] = []
        /// An `api-key` credential's slots and their state (never the keys).
        public var keySlots: [KeySlot] = []
        /// Where its tokens come from: `none` (it applies no token), `fixed` (configured), `fetched` (from a token
        /// service) (``CredentialKind/tokenSource``).
        public var tokenSource: String = "none"
        /// What its kind says of its settings, as `check` prints them (``CredentialKind/statusDetails``; never a
        /// secret).
        public var details: [Detail] = []
    }

    public struct Detail: Codable, Sendable, Equatable {
        public var name: String
        public var value: String
    }

    public struct KeySlot: Codable, Sendable, Equatable {
        public var slot: Int
        /// `in_use`, `standby`, `rejected` or `expired` (``APIKeySlotState/State``).
        public var state: String
        /// When the server rejected its key.
        public var rejectedAt: String?
    }

    public struct Expiry: Codable, Sendable, Equatable {
        /// `access_token`, `refresh_token`, `key` or `certificate`.
        public var what: String
        /// Which one, when there are several (an API key's slot, a token's server root).
        public var which: String?
        public var expires: String
        public var expiresInSeconds: Int64
        /// Within `[proxy] expiry_warning_days` of expiring, or expired, and not renewed by the proxy before.
        public var dueSoon: Bool
        /// When the proxy renews it by itself (a sign-in's refresh-token exchange); nil: nothing does.
        public var renews: String? = nil
        /// Why the last renewal failed.
        public var lastError: String? = nil
    }

    public struct NetworkAuth: Codable, Sendable, Equatable {
        public var scheme: String
        public var successes: Int
        public var failures: Int
        public var last: String?
        public var lastSucceeded: Bool
    }

    public struct Interception: Codable, Sendable, Equatable {
        public var caSubject: String
        public var caExpires: String?
        public var certificatesMinted: Int
    }

    /// A parent proxy (`[proxy] upstream_proxy`, or one a PAC file named).
    public struct Parent: Codable, Sendable, Equatable {
        public var url: String
        public var requests: UInt64
        /// Failures by cause (`connect`, `timeout`, `auth`, `refused`).
        public var failures: [String: UInt64]
        public var inBackoff: Bool
    }

    public struct Reload: Codable, Sendable, Equatable {
        public var at: String
        public var applied: Bool
        public var message: String
    }

    public var version: String
    public var startedAt: String
    public var uptimeSeconds: Int64
    /// Event loops this process runs (`[proxy] workers`).
    public var workers: Int
    /// The CPUs it may use and why, e.g. "1 usable CPU (2 online, cgroup limit 0.50 CPUs)" (``CPUBudget``).
    public var cpus: String
    public var generatedAt: String
    public var ready: Bool
    public var notReadyBecause: [String]
    public var listeners: [Listener]
    public var clientConnections: Int
    public var tunnels: Int
    public var credentials: [Credential]
    public var interception: Interception?
    public var lastReload: Reload?
    /// Empty when no parent proxy is configured.
    public var parents: [Parent] = []

    /// `[cluster]`: the fleet's Redis as this replica sees it.
    public struct Cluster: Codable, Sendable, Equatable {
        /// The Redis URL without user or password.
        public var redis: String
        public var connected: Bool
        public var required: Bool
        public var since: String?
        public var problem: String?
        /// The fleet-wide limits (`rate_limit` with `scope = "credential"`, `daily_quota`): `shared` (counted in
        /// Redis) or `fallback` (this replica enforces its share, limit ÷ ``replicas``, because Redis cannot be
        /// used).
        public var limits: String? = nil
        public var limitsSince: String? = nil
        public var limitsProblem: String? = nil
        /// `[cluster] replicas`.
        public var replicas: Int? = nil
    }

    /// nil without `[cluster]`.
    public var cluster: Cluster? = nil

    /// The limits that protect upstreams (``StatusReport+Limits``): empty when none is configured.
    public var limits: [Limit] = []
}
