// swift-tools-version:5.9
// The TLS floor: a minimal intercepting (CONNECT + TLS) keep-alive HTTPS relay on Dispatch read/write sources
// and OpenSSL on the sockets. Built by bench/https.sh with `swift build -c release --package-path bench/floor-tls`;
// socket set-up and head framing come from FloorKit in bench/floor.
import PackageDescription

let package = Package(
    name: "floor-tls",
    dependencies: [.package(path: "../floor")],
    targets: [
        .systemLibrary(name: "COpenSSL", path: "Sources/COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        .executableTarget(
            name: "floor-tls", dependencies: ["COpenSSL", .product(name: "FloorKit", package: "floor")],
            path: "Sources/floor-tls"),
    ]
)
