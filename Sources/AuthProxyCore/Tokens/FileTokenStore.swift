/// The state file as a ``TokenStore``: one process, its own token requests. Followed by stamp: `authproxy login`
/// and `signout` (other processes) replace the file, and the next look sees the new version.
///
/// Ownership: used only on the token service's queue (``TokenStore``).
final class FileTokenStore: TokenStore {
    let file: TokenStateFile
    /// The version last read or written by this process.
    private var stamp: TokenStateFile.Stamp?
    weak var observer: (any TokenStoreObserver)?

    init(_ file: TokenStateFile) {
        self.file = file
    }

    var location: String { file.path }

    func load() throws(StateError) -> TokenStoreLoad {
        do throws(StateError) {
            // No lock to read: writers replace the file by rename, so a reader sees one whole version.
            let contents = try file.load()
            stamp = file.stamp()
            return TokenStoreLoad(contents: contents)
        } catch  where error.kind == .damaged {
            let aside = try file.withLock { () throws(StateError) in try file.quarantine() }
            stamp = file.stamp()
            return TokenStoreLoad(contents: TokenStateFile.Contents(), quarantined: aside, damage: error)
        }
    }

    func changes() -> Result<TokenStateFile.Contents, StateError>? {
        let now = file.stamp()
        guard now != stamp else { return nil }
        stamp = now
        do throws(StateError) {
            return .success(try file.load())
        } catch {
            return .failure(error)
        }
    }

    func update(_ body: (inout TokenStateFile.Contents) throws(StateError) -> Void) throws(StateError)
        -> TokenStateFile.UpdateResult
    {
        let result = try file.update(body)
        stamp = result.stamp
        return result
    }

    /// One process: ``TokenCache`` makes the request single per key already, and nobody else fetches for it.
    func claim(_ slot: TokenSlot, holding: IssuedToken?, rejected: String?, done: @escaping (TokenClaim) -> Void) {
        done(.fetch(nil))
    }

    /// Nothing to share: the service saves its tokens to the file through ``update(_:)`` (`persist`).
    func publish(_ slot: TokenSlot, token: IssuedToken, lease: TokenLease?) {}

    /// No lock was taken (``claim(_:holding:rejected:done:)`` hands out none).
    func abandon(_ slot: TokenSlot, lease: TokenLease) {}

    /// The file keeps no token the cache dropped: the next save leaves it out.
    func withdraw(_ slot: TokenSlot, token: IssuedToken) {}

    /// The state file is the only copy, and the service reads it itself.
    func sharedRefreshToken(credential: String, fingerprint: String) -> TokenStateFile.StoredRefreshToken?? { nil }

    /// Other processes on this host follow the state file, which holds it already.
    func shareRefreshToken(_ stored: TokenStateFile.StoredRefreshToken) {}

    /// The service has just re-read the state file (another process's exchange would be there): exchange.
    func claimExchange(_ current: TokenStateFile.StoredRefreshToken, done: @escaping (ExchangeClaim) -> Void) {
        done(.exchange(nil))
    }

    /// The service writes the state file itself, compare-and-set under its lock.
    func finishExchange(
        _ current: TokenStateFile.StoredRefreshToken, exchanged: TokenStateFile.StoredRefreshToken,
        lease: TokenLease?
    ) -> Bool? { nil }

    /// No lock was taken.
    func abandonExchange(_ current: TokenStateFile.StoredRefreshToken, lease: TokenLease) {}
}
