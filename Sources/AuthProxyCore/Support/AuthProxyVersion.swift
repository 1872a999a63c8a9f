/// The version printed by `authproxy --version` and logged at start.
public enum AuthProxyVersion {
    public static let string = "0.1.0"
}
