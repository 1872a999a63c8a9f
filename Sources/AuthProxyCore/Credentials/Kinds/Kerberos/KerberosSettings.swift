/// `type = "kerberos"`: a principal whose ticket the proxy obtains itself (keytab or password), for Negotiate.
public struct KerberosSettings: Sendable, Equatable {
    public var principal: String
    public var keytab: String?
    public var password: String?
}
