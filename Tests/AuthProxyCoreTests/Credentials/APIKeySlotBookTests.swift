import Testing

@testable import AuthProxyCore

struct APIKeySlotBookTests {
    let day: Int64 = 86_400_000
    var two: APIKeySettings {
        APIKeySettings(slots: [
            .init(number: 1, key: "K1", expires: 100 * day), .init(number: 2, key: "K2", expires: 200 * day),
        ])
    }

    @Test func firstUsableSlotIsUsedAndExpiredOnesNever() {
        let book = APIKeySlotBook()
        #expect(book.choose("c", two, now: 0) == .use(slot: 1))
        #expect(book.choose("c", two, now: 100 * day) == .use(slot: 2))
        #expect(book.choose("c", two, now: 200 * day) == .allExpired)
        let legacy = APIKeySettings(slots: [.init(number: 1, key: "K")])
        #expect(book.choose("c", legacy, now: .max) == .use(slot: 1))
    }

    @Test func aRejectedSlotSwitchesOnceAndStaysOff() {
        var book = APIKeySlotBook()
        let r1 = book.rejected("c", two, slot: 1, now: 10)
        #expect(r1 == .switched(from: 1, to: 2, newly: true))
        // Requests that carried slot 1 before the switch are rejected too: they switch silently.
        let r2 = book.rejected("c", two, slot: 1, now: 11)
        #expect(r2 == .switched(from: 1, to: 2, newly: false))
        #expect(book.choose("c", two, now: 12) == .use(slot: 2))
        // A late acceptance of slot 1, sent before it was rejected, does not bring it back (no flapping).
        let r3 = book.accepted("c", two, slot: 1, sentAt: 9)
        #expect(!r3)
        #expect(book.choose("c", two, now: 13) == .use(slot: 2))
        #expect(book.rejectedAt("c", two, slot: 1) == 11)
        #expect(book.rejectedAt("c", two, slot: 2) == nil)
        // Another credential is not affected.
        #expect(book.choose("d", two, now: 13) == .use(slot: 1))
    }

    @Test func bothRejectedTriesTheOneRejectedLongestAgoAndHealsOnAcceptance() {
        var book = APIKeySlotBook()
        _ = book.rejected("c", two, slot: 1, now: 10)
        let r4 = book.rejected("c", two, slot: 2, now: 20)
        #expect(r4 == .exhausted(slot: 2, newly: true))
        #expect(book.choose("c", two, now: 21) == .retryRejected(slot: 1))
        let r5 = book.rejected("c", two, slot: 1, now: 30)
        #expect(r5 == .exhausted(slot: 1, newly: false))
        #expect(book.choose("c", two, now: 31) == .retryRejected(slot: 2))
        // Accepted when sent after its rejection: usable again.
        let r6 = book.accepted("c", two, slot: 2, sentAt: 31)
        #expect(r6)
        #expect(book.choose("c", two, now: 32) == .use(slot: 2))
    }

    @Test func aSingleKeyRejectedIsExhausted() {
        var book = APIKeySlotBook()
        let one = APIKeySettings(slots: [.init(number: 1, key: "K")])
        let r7 = book.rejected("c", one, slot: 1, now: 5)
        #expect(r7 == .exhausted(slot: 1, newly: true))
        #expect(book.choose("c", one, now: 6) == .retryRejected(slot: 1))
    }

    @Test func anExpiredOtherSlotIsNoFallback() {
        var book = APIKeySlotBook()
        let r8 = book.rejected("c", two, slot: 2, now: 150 * day)
        #expect(r8 == .exhausted(slot: 2, newly: true))
    }

    @Test func aReloadKeepsRejectionsOfUnchangedKeysOnly() {
        var book = APIKeySlotBook()
        _ = book.rejected("c", two, slot: 1, now: 10)
        _ = book.rejected("gone", two, slot: 1, now: 10)
        book.retain(["c": two])
        #expect(book.choose("c", two, now: 11) == .use(slot: 2))
        #expect(book.rejections["gone"] == nil)
        var rotated = two
        rotated.slots[0].key = "K1-new"
        book.retain(["c": rotated])
        #expect(book.choose("c", rotated, now: 12) == .use(slot: 1))
    }

    @Test func expiryNotes() {
        let s = APIKeySettings(slots: [
            .init(number: 1, key: "SECRET-1", expires: 10 * day), .init(number: 2, key: "SECRET-2", expires: 30 * day),
        ])
        let notes = s.expiryNotes(credential: "c", now: 17 * day, warningDays: 14)
        #expect(notes.count == 2)
        #expect(notes[0].contains("slot 1 expired at") && notes[0].contains("not used"))
        #expect(notes[1].contains("slot 2 expires at") && notes[1].contains("in 13 days"))
        #expect(!notes.joined().contains("SECRET"))
        #expect(s.expiryNotes(credential: "c", now: 0, warningDays: 5).isEmpty)
        #expect(s.expiries(credential: "c").map(\.which) == ["1", "2"])
    }
}
