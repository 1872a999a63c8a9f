/// A set of files whose contents a ``ConfigWatcher`` follows: the paths whose directories it watches, and the
/// same set as it is on disk now (compared with the last one seen, so only a change of contents counts).
protocol WatchedFiles: Sendable, Equatable {
    /// Every path whose directory is watched.
    var paths: [String] { get }
    /// The same files, read again now.
    func rereadFromDisk() -> Self
}

extension ConfigInputs: WatchedFiles {
    func rereadFromDisk() -> ConfigInputs { reread(with: readTextFile) }
}
