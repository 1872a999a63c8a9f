/// The host name a ClientHello's `server_name` extension carries (RFC 6066 §3), read from the extension's own
/// bytes: the proxy needs it before OpenSSL parses the extensions, to bind session resumption to the
/// certificate the name will get (``TLSServer``).
///
/// Pure: bytes in, name out.
enum ServerNameExtension {
    /// The first `host_name` entry of a `ServerNameList`, or nil when there is none or the list is malformed.
    static func hostName(_ bytes: UnsafeRawBufferPointer) -> String? {
        guard bytes.count >= 2 else { return nil }
        let listLength = Int(bytes[0]) << 8 | Int(bytes[1])
        guard listLength == bytes.count - 2 else { return nil }
        var i = 2
        while i + 3 <= bytes.count {
            let type = bytes[i]
            let length = Int(bytes[i + 1]) << 8 | Int(bytes[i + 2])
            let start = i + 3
            guard start + length <= bytes.count else { return nil }
            if type == 0 {  // host_name
                guard length > 0 else { return nil }
                return String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<start + length]), as: UTF8.self)
            }
            i = start + length
        }
        return nil
    }
}
