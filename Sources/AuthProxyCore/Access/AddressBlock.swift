/// A CIDR block such as `10.42.0.0/16` or `fd00::/8` (a bare address is a /32 or /128), for
/// `allow_clients` and `deny_destinations`.
public struct AddressBlock: Sendable, Equatable, CustomStringConvertible {
    public let network: IPAddress
    /// Prefix length over the 128-bit form (an IPv4 /16 is stored as /112).
    public let prefix: Int
    public let description: String

    /// Parses `address[/prefix]`; the address must be numeric and the prefix within its family's width.
    public static func parse(_ text: String) -> AddressBlock? {
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let first = parts.first, let address = IPAddress.parse(String(first)) else { return nil }
        let width = address.isIPv4 && !first.contains(":") ? 32 : 128
        var length = width
        if parts.count == 2 {
            guard !parts[1].isEmpty, parts[1].utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }), let n = Int(parts[1]),
                n <= width
            else { return nil }
            length = n
        }
        let prefix = width == 32 ? 96 + length : length
        return AddressBlock(network: Self.masked(address, prefix), prefix: prefix, description: text)
    }

    private init(network: IPAddress, prefix: Int, description: String) {
        self.network = network
        self.prefix = prefix
        self.description = description
    }

    public func contains(_ a: IPAddress) -> Bool { Self.masked(a, prefix) == network }

    private static func masked(_ a: IPAddress, _ prefix: Int) -> IPAddress {
        func mask(_ bits: Int) -> UInt64 { bits <= 0 ? 0 : bits >= 64 ? .max : ~(UInt64.max >> UInt64(bits)) }
        var m = a
        m.bytes = (a.bytes.0 & mask(prefix), a.bytes.1 & mask(prefix - 64))
        return m
    }

    /// Loopback clients: the default of `allow_clients`.
    public static let loopback: [AddressBlock] = [parse("127.0.0.0/8")!, parse("::1/128")!]
    /// Every address: `allow_clients` when `[[client]]` entries exist and `allow_clients` is not set.
    public static let everywhere: [AddressBlock] = [parse("0.0.0.0/0")!, parse("::/0")!]

    /// Link-local and cloud metadata addresses: the default of `deny_destinations` (169.254.169.254 for most
    /// clouds, AWS's IPv6 `fd00:ec2::254`, Alibaba's `100.100.100.200`).
    public static let defaultDenied: [AddressBlock] = [
        parse("169.254.0.0/16")!, parse("fe80::/10")!, parse("fd00:ec2::254/128")!, parse("100.100.100.200/32")!,
    ]
}

extension Array where Element == AddressBlock {
    public func contains(_ a: IPAddress) -> Bool { contains { $0.contains(a) } }
}
