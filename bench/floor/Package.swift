// swift-tools-version:5.9
// The Dispatch floor: a minimal keep-alive HTTP relay on Dispatch read/write sources only.
// Built by bench/run.sh with `swift build -c release --package-path bench/floor`.
import PackageDescription

let package = Package(
    name: "floor",
    targets: [
        .executableTarget(name: "floor", path: "Sources/floor")
    ]
)
