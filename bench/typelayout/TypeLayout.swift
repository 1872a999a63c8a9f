// Preloaded into a Swift binary (bench/typelayout.sh): at exit, prints the stored fields of the types named in
// TYPELAYOUT_TYPES (comma-separated, Module.Type or Module.Outer.Inner) with their offsets and sizes, read from the
// binary's own type metadata, so the layout is that of the optimised build, not a guess from the source.
@_spi(Reflection) import Swift
#if canImport(Glibc)
import Glibc
#endif

func sizeOf<T>(_ t: T.Type) -> (Int, Int) { (MemoryLayout<T>.size, MemoryLayout<T>.stride) }

func mangle(_ parts: [Substring], kinds: [Character]) -> String {
    var s = ""
    for (p, k) in zip(parts, kinds) {
        s += "\(p.utf8.count)\(p)"
        if k != " " { s.append(k) }
    }
    return s
}

@_cdecl("typelayout_dump")
public func typelayoutDump() {
    let names = (getenv("TYPELAYOUT_TYPES").map { String(cString: $0) } ?? "").split(separator: ",")
    for name in names {
        let parts = name.split(separator: ".")
        guard parts.count >= 2 else { continue }
        // Module, then each nested type: try class, struct and enum for every level.
        var combos: [[Character]] = [[" "]]
        for _ in parts.dropFirst() { combos = combos.flatMap { c in ["C", "V", "O"].map { c + [$0] } } }
        var found: (Any.Type, Bool)? = nil
        for c in combos {
            if let t = _typeByName(mangle(parts, kinds: c)) { found = (t, c.last == "C"); break }
        }
        guard let (t, isClass) = found else { print("\(name): not found"); continue }
        let (size, stride) = _openExistential(t, do: sizeOf)
        print(isClass ? "\(name) (class; instance fields below)" : "\(name): size \(size), stride \(stride)")
        var end = 0
        _ = _forEachField(of: t, options: isClass ? [.classType] : []) { field, offset, ft, _ in
            let (fs, _) = _openExistential(ft, do: sizeOf)
            end = max(end, offset + fs)
            print("  @\(offset)\t\(fs)\t\(String(cString: field)): \(ft)")
            return true
        }
        if isClass { print("  instance size \(end) (16-byte object header included)") }
    }
    fflush(stdout)
}
