/// The settings of a `type = "api-key"` credential (docs/credentials-arcgis.md#api-key): one `key` (a legacy key, or
/// one key of an API key credentials item, with an optional `expires`), or `keys` with up to two slots, each with its
/// `expires`; an optional `referer` for keys restricted to referrers.
extension APIKeySettings {
    public static func parse(_ entry: inout TableReader, name: String) throws(ConfigError) -> APIKeySettings {
        // A key goes into requests as it is: what no token service may hand out (``TokenSyntax``) is refused, without
        // quoting it.
        func checkedKey(_ r: inout TableReader, _ number: Int) throws(ConfigError) -> String {
            guard let v = try r.string("key"), !v.isEmpty else {
                throw r.missing("key", "credential '\(name)': slot \(number) needs a key")
            }
            if let why = TokenSyntax.arcgisProblem(v) {
                throw ConfigError(key: r.path + ".key", line: r.line(of: "key"), "the value (not shown): \(why)")
            }
            return v
        }

        var slots: [APIKeySettings.Slot] = []
        let single = entry.table["key"]
        if let list = try entry.tableArray("keys") {
            let line = entry.line(of: "keys")
            if let single {
                throw ConfigError(
                    key: entry.path + ".keys", line: line ?? single.line,
                    "give either key (one key) or keys (up to two slots), not both")
            }
            guard !list.isEmpty, list.count <= APIKeySettings.maxSlots else {
                throw ConfigError(
                    key: entry.path + ".keys", line: line,
                    "needs one or two slots (an API key credentials item has two), e.g. keys = [{ key = \"${ARCGIS_KEY_1}\", expires = \"2027-05-01T00:00:00Z\" }, { key = \"${ARCGIS_KEY_2}\", expires = \"2027-11-01T00:00:00Z\" }]"
                )
            }
            for var slot in list {
                let number = slots.count + 1
                let key = try checkedKey(&slot, number)
                guard let expires = try slot.dateTime("expires") else {
                    throw slot.missing(
                        "expires",
                        "credential '\(name)': slot \(number) needs expires, the key's expiration date as the portal shows it (RFC 3339, e.g. 2027-05-01T00:00:00Z)"
                    )
                }
                try slot.finish()
                if let twin = slots.first(where: { $0.key == key }) {
                    throw ConfigError(
                        key: slot.path + ".key", line: slot.line(of: "key"),
                        "the same key as slot \(twin.number): each slot holds its own key")
                }
                slots.append(APIKeySettings.Slot(number: number, key: key, expires: expires))
            }
        } else {
            guard single != nil else {
                throw entry.missing("key", "credential '\(name)' of type api-key needs key (or keys, for two slots)")
            }
            slots = [
                APIKeySettings.Slot(number: 1, key: try checkedKey(&entry, 1), expires: try entry.dateTime("expires"))
            ]
        }
        var referer = try entry.string("referer")
        if let r = referer {
            if let why = OutboundHead.fieldProblem(name: "Referer", value: r) {
                throw ConfigError(key: entry.path + ".referer", line: entry.line(of: "referer"), "the value \(why)")
            }
            if r.isEmpty { referer = nil }
        }
        return APIKeySettings(slots: slots, referer: referer)
    }
}
