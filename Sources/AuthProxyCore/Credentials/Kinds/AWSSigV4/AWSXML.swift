/// Reads the text of simple elements of the small XML documents AWS answers with (STS results, S3 error bodies).
/// Not an XML parser: the first `<Name>` (or `<Name attributes…>`) whose text has no markup, entities decoded.
/// Enough for these flat, machine-written documents. Pure.
enum AWSXML {
    static func text(of element: String, in doc: String) -> String? {
        var rest = doc[...]
        let open = "<\(element)"
        while let start = rest.firstRange(of: open) {
            rest = rest[start.upperBound...]
            guard let next = rest.first else { return nil }
            // `<Name>` or `<Name xmlns=…>`, not `<NameOther>`.
            guard next == ">" || next == " " else { continue }
            guard let gt = rest.firstIndex(of: ">") else { return nil }
            if gt > rest.startIndex, rest[rest.index(before: gt)] == "/" { return "" }
            let body = rest[rest.index(after: gt)...]
            guard let end = body.firstRange(of: "</\(element)>") else { return nil }
            let inner = body[..<end.lowerBound]
            if inner.contains("<") { return nil }
            return decodeEntities(inner)
        }
        return nil
    }

    static func decodeEntities(_ s: Substring) -> String {
        guard s.contains("&") else { return String(s) }
        return String(s).replacing("&lt;", with: "<").replacing("&gt;", with: ">").replacing("&quot;", with: "\"")
            .replacing("&apos;", with: "'").replacing("&amp;", with: "&")
    }
}
