// swift-tools-version:5.9
// The Dispatch floor: a minimal keep-alive HTTP relay on Dispatch read/write sources only.
// Built by bench/run.sh with `swift build -c release --package-path bench/floor`. FloorKit (socket set-up and
// head framing) is shared with the TLS floor, bench/floor-tls.
import PackageDescription

let package = Package(
    name: "floor",
    products: [
        .executable(name: "floor", targets: ["floor"]),
        .library(name: "FloorKit", targets: ["FloorKit"]),
    ],
    targets: [
        .target(name: "FloorKit", path: "Sources/FloorKit"),
        .executableTarget(name: "floor", dependencies: ["FloorKit"], path: "Sources/floor"),
    ]
)
