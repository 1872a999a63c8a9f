import COpenSSL

/// The few primitives the token state needs, from OpenSSL's libcrypto.
enum Crypto {
    /// SHA-256 of `bytes`. A failure (a libcrypto without SHA-256) stops the process: an all-zero digest
    /// would make every credential fingerprint equal and hand one credential's tokens to another.
    static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        var len: UInt32 = 0
        let ok = bytes.withUnsafeBytes { b in EVP_Digest(b.baseAddress, b.count, &out, &len, EVP_sha256(), nil) }
        precondition(ok == 1 && len == 32, "EVP_Digest(SHA-256) failed")
        return out
    }

    /// SHA-1 of `bytes`: only where a protocol fixes it (the WebSocket handshake's accept value), never for
    /// anything the proxy protects.
    static func sha1(_ bytes: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 20)
        var len: UInt32 = 0
        let ok = bytes.withUnsafeBytes { b in EVP_Digest(b.baseAddress, b.count, &out, &len, EVP_sha1(), nil) }
        precondition(ok == 1 && len == 20, "EVP_Digest(SHA-1) failed")
        return out
    }

    static func sha256Hex(_ s: String) -> String { hex(sha256(Array(s.utf8))) }

    static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(bytes.count * 2)
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 15)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    static func random(_ n: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: n)
        precondition(RAND_bytes(&out, Int32(n)) == 1, "RAND_bytes failed")
        return out
    }

    /// PBKDF2-HMAC-SHA256 → a 32-byte key; nil when libcrypto refuses (the key buffer would otherwise be
    /// all zeros, and the state file encrypted under a key anyone knows).
    static func deriveKey(secret: String, salt: [UInt8], iterations: Int32 = 200_000) -> [UInt8]? {
        var key = [UInt8](repeating: 0, count: 32)
        let s = Array(secret.utf8)
        let ok = s.withUnsafeBufferPointer { sp in
            sp.withMemoryRebound(to: CChar.self) { cp in
                PKCS5_PBKDF2_HMAC(
                    cp.baseAddress, Int32(s.count), salt, Int32(salt.count), iterations, EVP_sha256(), 32, &key)
            }
        }
        return ok == 1 ? key : nil
    }

    /// HMAC-SHA256 of `data` under `key`: names and digests that only holders of the key can compute or check.
    static func hmacSHA256(key: [UInt8], _ data: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        var len: UInt32 = 0
        let ok = key.withUnsafeBytes { k in
            data.withUnsafeBytes { d in
                HMAC(
                    EVP_sha256(), k.baseAddress, Int32(k.count), d.bindMemory(to: UInt8.self).baseAddress, d.count,
                    &out, &len)
            }
        }
        precondition(ok != nil && len == 32, "HMAC(SHA-256) failed")
        return out
    }

    /// AES-256-GCM: returns iv (12) + tag (16) + ciphertext. `aad` (associated data) is authenticated, not
    /// stored: ``open(_:key:aad:)`` fails unless it is given the same bytes.
    static func seal(_ plain: [UInt8], key: [UInt8], aad: [UInt8] = []) -> [UInt8]? {
        guard let ctx = EVP_CIPHER_CTX_new() else { return nil }
        defer { EVP_CIPHER_CTX_free(ctx) }
        let iv = random(12)
        var out = [UInt8](repeating: 0, count: plain.count + 16)
        var len: Int32 = 0
        var total: Int32 = 0
        guard EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), nil, key, iv) == 1,
            aad.isEmpty || EVP_EncryptUpdate(ctx, nil, &len, aad, Int32(aad.count)) == 1,
            EVP_EncryptUpdate(ctx, &out, &len, plain, Int32(plain.count)) == 1
        else { return nil }
        total = len
        let ok = out.withUnsafeMutableBufferPointer { EVP_EncryptFinal_ex(ctx, $0.baseAddress! + Int(total), &len) }
        guard ok == 1 else { return nil }
        total += len
        var tag = [UInt8](repeating: 0, count: 16)
        guard EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, &tag) == 1 else { return nil }
        return iv + tag + Array(out[0..<Int(total)])
    }

    /// The inverse of ``seal(_:key:aad:)``; nil when the key is wrong, the data was altered or `aad` differs.
    static func open(_ sealed: [UInt8], key: [UInt8], aad: [UInt8] = []) -> [UInt8]? {
        guard sealed.count >= 28, let ctx = EVP_CIPHER_CTX_new() else { return nil }
        defer { EVP_CIPHER_CTX_free(ctx) }
        let iv = Array(sealed[0..<12])
        var tag = Array(sealed[12..<28])
        let cipher = Array(sealed[28...])
        var out = [UInt8](repeating: 0, count: cipher.count + 16)
        var len: Int32 = 0
        guard EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), nil, key, iv) == 1,
            aad.isEmpty || EVP_DecryptUpdate(ctx, nil, &len, aad, Int32(aad.count)) == 1,
            EVP_DecryptUpdate(ctx, &out, &len, cipher, Int32(cipher.count)) == 1,
            EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, 16, &tag) == 1
        else { return nil }
        let total = len
        let ok = out.withUnsafeMutableBufferPointer { EVP_DecryptFinal_ex(ctx, $0.baseAddress! + Int(total), &len) }
        guard ok == 1 else { return nil }
        return Array(out[0..<Int(total + len)])
    }
}
