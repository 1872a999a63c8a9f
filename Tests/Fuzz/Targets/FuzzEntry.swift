#if canImport(Glibc)
    import Glibc
#endif

/// The libFuzzer entry point. One binary holds every target; `AUTHPROXY_FUZZ_TARGET` names the one a process runs
/// (`scripts/fuzz.sh` sets it), so all targets share one build and one link.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    // libFuzzer may pass a null pointer with a count of 0.
    let input =
        start.map { UnsafeRawBufferPointer(start: $0, count: count) } ?? UnsafeRawBufferPointer(start: nil, count: 0)
    selectedTarget.run(input)
    return 0
}

/// The target this process runs, read once from the environment.
let selectedTarget: FuzzTarget = {
    let name = getenv("AUTHPROXY_FUZZ_TARGET").map { String(cString: $0) } ?? ""
    guard let target = FuzzTarget.all.first(where: { $0.name == name }) else {
        let names = FuzzTarget.all.map(\.name).joined(separator: ", ")
        let message = "authproxy-fuzz: set AUTHPROXY_FUZZ_TARGET to one of: \(names) (got '\(name)')\n"
        _ = message.withCString { write(2, $0, strlen($0)) }
        exit(2)
    }
    return target
}()
