import CAuthProxyShims
import CCurl

#if canImport(Glibc)
    import Glibc
#endif

/// What libcurl's `CURLOPT_OPENSOCKETFUNCTION` decides for one upstream connection attempt, and what it saw:
/// every resolved address is checked against `deny_destinations` as the socket is opened (so neither a host
/// name nor DNS rebinding gets around it), and a socket that cannot be opened for lack of descriptors is told
/// apart from an unreachable upstream. For ``CurlTransfer``, whose libcurl transfers connect themselves (they
/// keep libcurl's connection cache); every other connection is dialed by the ``Dialer`` (``DestinationFilter``).
struct DestinationCheck {
    let deny: [AddressBlock]
    /// A resolved address that was refused.
    private(set) var deniedAddress: IPAddress? = nil
    /// Whether some resolved address was allowed (then a failure is the network's, not the policy's).
    private(set) var openedAny = false
    /// EMFILE/ENFILE when a socket could not be opened for lack of descriptors.
    private(set) var socketError: Int32? = nil

    init(deny: [AddressBlock]) {
        self.deny = deny
    }

    /// Opens the socket for `address` unless it is denied; a socket opened here is registered with `multi`
    /// (which closes it only after its Dispatch sources are gone).
    mutating func open(_ address: UnsafePointer<curl_sockaddr>, multi: CurlMulti) -> curl_socket_t {
        if !deny.isEmpty, let ip = IPAddress(ap_curl_sockaddr_addr(address)), DestinationFilter.refuses(ip, deny: deny)
        {
            deniedAddress = ip
            return CURL_SOCKET_BAD
        }
        openedAny = true
        let fd = socket(
            address.pointee.family, address.pointee.socktype | Int32(SOCK_CLOEXEC.rawValue), address.pointee.protocol)
        guard fd >= 0 else {
            if DescriptorExhaustion.isExhaustion(errno) { socketError = errno }
            return CURL_SOCKET_BAD
        }
        multi.socketOpened(fd)
        return fd
    }

    /// The error a failed libcurl connection or transfer reports, with what this check saw.
    func error(code: CURLcode, detail: String, destination: String, timeoutSeconds: Int) -> UpstreamError {
        var error = UpstreamError(
            cause: UpstreamFailure(curl: code), detail: detail, destination: destination,
            timeoutSeconds: timeoutSeconds,
            deniedAddress: openedAny ? nil : deniedAddress)
        switch code {
        case CURLE_COULDNT_CONNECT, CURLE_OPERATION_TIMEDOUT:
            error.outOfDescriptors = socketError
        case CURLE_COULDNT_RESOLVE_HOST where DescriptorExhaustion.processIsOut():
            // The lookup (its thread's socket pair, /etc/hosts, a DNS socket) needs descriptors too.
            error.outOfDescriptors = EMFILE
        default:
            break
        }
        return error
    }
}
