import Testing

@testable import AuthProxyCore

@Suite struct DoctorRestInfoTests {
    private func read(_ s: String) -> RestInfo.Reading { RestInfo.read(Array(s.utf8)) }

    @Test func standaloneServer() {
        let r = read(
            #"""
            {"currentVersion":11.1,"fullVersion":"11.1.0","soapUrl":"https://h/arcgis/services","secureSoapUrl":null,
             "authInfo":{"isTokenBasedSecurity":true,"tokenServicesUrl":"https://h/arcgis/tokens/generateToken","shortLivedTokenValidity":60}}
            """#)
        #expect(
            r
                == .info(
                    RestInfo(
                        currentVersion: "11.1", fullVersion: "11.1.0", isTokenBasedSecurity: true,
                        tokenServicesURL: "https://h/arcgis/tokens/generateToken", shortLivedTokenValidity: 60)))
        if case .info(let i) = r {
            #expect(i.usesTokens)
            #expect(i.version == "11.1.0")
        }
    }

    @Test func federatedServerNamesItsPortal() {
        let r = read(
            #"{"currentVersion":10.9,"owningSystemUrl":"https://h/portal","authInfo":{"isTokenBasedSecurity":true,"tokenServicesUrl":"https://h/portal/sharing/rest/generateToken"}}"#
        )
        guard case .info(let i) = r else {
            Issue.record("\(r)")
            return
        }
        #expect(i.owningSystemURL == "https://h/portal")
        #expect(i.currentVersion == "10.9")
        #expect(i.shortLivedTokenValidity == nil)
    }

    @Test func webTierServerWithoutTokens() {
        guard case .info(let i) = read(#"{"currentVersion":10,"authInfo":{"isTokenBasedSecurity":false}}"#) else {
            Issue.record("not info")
            return
        }
        #expect(i.currentVersion == "10")
        #expect(!i.usesTokens)
    }

    /// Members of unexpected types count as absent, not as a failure of the whole answer.
    @Test func lenientTypes() {
        guard
            case .info(let i) = read(
                #"{"currentVersion":"11.3","owningSystemUrl":"","authInfo":{"isTokenBasedSecurity":1,"shortLivedTokenValidity":"60","tokenServicesUrl":7}}"#
            )
        else {
            Issue.record("not info")
            return
        }
        #expect(i.currentVersion == "11.3")
        #expect(i.owningSystemURL == nil)
        #expect(i.isTokenBasedSecurity == true)
        #expect(i.shortLivedTokenValidity == nil)
        #expect(i.tokenServicesURL == nil)
    }

    @Test func errorInsteadOfInformation() {
        guard
            case .error(let e) = read(
                #"{"error":{"code":499,"message":"Token Required","messageCode":"GWM_0003","details":[]}}"#)
        else {
            Issue.record("not an error")
            return
        }
        #expect(e.code == 499)
        #expect(e.rejectsToken)
    }

    @Test(arguments: [
        "<html><body>401 Authorization Required</body></html>",
        #"{"status":"ok"}"#,
        "",
        "[1,2]",
        #"{"error":"#,
    ])
    func notArcGIS(_ body: String) {
        #expect(read(body) == .notArcGIS)
    }
}

@Suite struct DoctorArcGISErrorBodyTests {
    private func read(_ status: Int, _ ct: String?, _ body: String) -> ArcGISErrorBody? {
        ArcGISErrorBody.read(status: status, contentType: ct, body: Array(body.utf8))
    }

    @Test(arguments: [
        (
            200, "text/plain;charset=utf-8",
            #"{"error":{"code":499,"message":"Token Required","messageCode":"GWM_0003","details":[]}}"#
        ),
        (499, "application/json", #"{"error":{"code":499,"message":"Token Required","details":[]}}"#),
        (
            200, "text/javascript",
            #"cb({"error":{"code":499,"message":"Token Required","messageCode":"GWM_0003","details":[]}});"#
        ),
        (200, "text/plain", #"{"code":499,"message":"Token Required","messageCode":"GWM_0003","details":[]}"#),
        (200, "text/html", "<html><body>Token Required</body></html>"),
        (499, nil, ""),
    ])
    func tokenRequired(_ status: Int, _ ct: String?, _ body: String) {
        let e = read(status, ct, body)
        #expect(e?.meaning == .tokenRequired, "\(body)")
        #expect(e?.code == 499)
    }

    @Test func invalidTokenWithSpacingAndMessage() {
        let e = read(
            200, "application/json",
            "{\n  \"error\" : {\n    \"code\" : 498,\n    \"message\" : \"Invalid token.\",\n    \"details\" : [ ]\n  }\n}"
        )
        #expect(e?.meaning == .invalidToken)
        #expect(e?.label == #"498 "Invalid token.""#)
    }

    @Test func invalidTokenTilePage() {
        #expect(read(200, "text/html", "<html><h1>Invalid Token</h1></html>")?.meaning == .invalidToken)
    }

    @Test func forbiddenIsNoPermissionNotATokenProblem() {
        let e = read(
            403, "application/json",
            #"{"error":{"code":403,"message":"You do not have permissions to access this resource or perform this operation.","messageCode":"GWM_0003","details":[]}}"#
        )
        #expect(e?.meaning == .noPermission)
        #expect(e?.messageCode == "GWM_0003")
    }

    @Test func otherErrorsAreReportedAsSuch() {
        let e = read(200, "text/plain", #"{"error":{"code":400,"message":"Invalid URL","details":["Invalid URL"]}}"#)
        #expect(e?.meaning == .other)
        #expect(e?.details == ["Invalid URL"])
    }

    @Test(arguments: [
        (200, "application/json", #"{"features":[{"attributes":{"code":499}}]}"#),
        (200, "image/png", "Invalid Token"),
        (401, "text/html", "<html>401 Authorization Required</html>"),
        (200, "application/json", #"{"count":3}"#),
    ])
    func notAnArcGISError(_ status: Int, _ ct: String, _ body: String) {
        #expect(read(status, ct, body) == nil, "\(body)")
    }
}
