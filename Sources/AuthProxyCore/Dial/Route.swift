/// How a connection reaches its destination, part of what keeps pooled connections apart. Every connection is
/// direct today; a parent proxy (or a PAC file's choice) becomes another case here, so that a connection through
/// one parent is never handed to a request routed elsewhere.
enum Route: Hashable {
    case direct
}
