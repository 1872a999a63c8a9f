// swift-tools-version:6.0
import Foundation
import PackageDescription

let package = Package(
    name: "authproxy",
    platforms: [.macOS(.v13)],
    products: [
        .executable(name: "authproxy", targets: ["authproxy"]),
        .library(name: "AuthProxyCore", targets: ["AuthProxyCore"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.5.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.0.0"),
        // The tracing API only (spans, context propagation); the OTLP exporter is the proxy's own (Tracing/).
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
    ],
    targets: [
        .systemLibrary(
            name: "CCurl",
            pkgConfig: "libcurl",
            providers: [.apt(["libcurl4-openssl-dev"])]
        ),
        .systemLibrary(
            name: "COpenSSL",
            pkgConfig: "openssl",
            providers: [.apt(["libssl-dev"])]
        ),
        .systemLibrary(
            name: "CZlib",
            pkgConfig: "zlib",
            providers: [.apt(["zlib1g-dev"])]
        ),
        // The PAC engine (a JavaScript interpreter inside, no pkg-config file): `[proxy] upstream_pac`.
        .systemLibrary(
            name: "CPacParser",
            providers: [.apt(["libpacparser-dev"])]
        ),
        // Redis for a fleet (`[cluster]`): hiredis formats commands and parses replies; the connection is the
        // proxy's own (RedisConnection.swift).
        .systemLibrary(
            name: "CHiredis",
            // No pkgConfig: hiredis.pc adds -D_FILE_OFFSET_BITS=64, which SwiftPM refuses (with a warning on
            // every build); the header is included as <hiredis/hiredis.h> and the library linked by name.
            providers: [.apt(["libhiredis-dev"])]
        ),
        .target(
            name: "CAuthProxyShims",
            dependencies: ["CCurl", "COpenSSL"]
        ),
        .target(
            name: "AuthProxyCore",
            dependencies: [
                "CAuthProxyShims",
                "CCurl",
                "CHiredis",
                "COpenSSL",
                "CPacParser",
                "CZlib",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: [.enableUpcomingFeature("ExistentialAny")]
        ),
        .executableTarget(
            name: "authproxy",
            dependencies: [
                "AuthProxyCore",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "AuthProxyCoreTests",
            dependencies: ["AuthProxyCore", "CZlib"]
        ),
    ],
    swiftLanguageModes: [.v6]
)

// The libFuzzer targets (Tests/Fuzz), declared only when scripts/fuzz.sh sets AUTHPROXY_FUZZ: they are built with
// `-sanitize=fuzzer,address`, and a normal `swift build` must neither build them nor link libFuzzer. The fuzz
// functions are Swift (`AuthProxyFuzz`); the executable is a C `main` that hands them to libFuzzer's driver, because
// SwiftPM renames a Swift executable's entry point, which libFuzzer's own `main` cannot satisfy.
if ProcessInfo.processInfo.environment["AUTHPROXY_FUZZ"] != nil {
    package.targets += [
        .target(
            name: "AuthProxyFuzz",
            dependencies: ["AuthProxyCore", "CZlib"],
            path: "Tests/Fuzz/Targets"
        ),
        .executableTarget(
            name: "authproxy-fuzz",
            dependencies: ["AuthProxyFuzz"],
            path: "Tests/Fuzz/Driver"
        ),
    ]
    package.products.append(.executable(name: "authproxy-fuzz", targets: ["authproxy-fuzz"]))
}
