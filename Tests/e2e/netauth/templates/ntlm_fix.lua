-- netauth: make libcurl's NTLM messages acceptable to gss-ntlmssp 1.2.0.
--
-- Runs as an access_checker hook ("early"), i.e. before mod_auth_gssapi's
-- check_user_id hook, on the vhosts marked "NTLM (patched)" / "IIS-like".
--
--  * NEGOTIATE (Type 1): libcurl sends the 32-byte form without the optional
--    8-byte Version field; gss-ntlmssp rejects anything shorter than 40
--    bytes.  Insert a zero Version at offset 32 (shifting payload offsets)
--    and clear the SIGN / SEAL / ALWAYS_SIGN flags so that the server does
--    not negotiate signing (gss-ntlmssp then insists on a Version field and
--    a MIC in the AUTHENTICATE message, which libcurl never sends).
--  * AUTHENTICATE (Type 3): clear the same flags (they are not covered by
--    the NTLMv2 proof when no MIC is present).
--
-- The unpatched stack is kept on the "ntlm_raw" vhost for comparison.

-- Pure-Lua base64: mod_lua's r:base64_decode() drops a trailing NUL byte,
-- and NTLM messages from libcurl end in NUL bytes.
local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local B64IDX = {}
for i = 1, 64 do B64IDX[B64:byte(i)] = i - 1 end

local function b64decode(s)
  s = s:gsub("[^%w%+/]", "")
  local out, bits, nbits = {}, 0, 0
  for i = 1, #s do
    bits = (bits << 6) | B64IDX[s:byte(i)]
    nbits = nbits + 6
    if nbits >= 8 then
      nbits = nbits - 8
      out[#out + 1] = string.char((bits >> nbits) & 0xff)
    end
  end
  return table.concat(out)
end

local function b64encode(s)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = s:byte(i, i + 2)
    local n = (a << 16) | ((b or 0) << 8) | (c or 0)
    local chunk = {}
    for k = 3, 0, -1 do chunk[#chunk + 1] = B64:sub(((n >> (6 * k)) & 63) + 1, ((n >> (6 * k)) & 63) + 1) end
    if not b then chunk[3], chunk[4] = "=", "=" elseif not c then chunk[4] = "=" end
    out[#out + 1] = table.concat(chunk)
  end
  return table.concat(out)
end

local SIGN, SEAL, ALWAYS_SIGN, VERSION = 0x10, 0x20, 0x8000, 0x02000000
local CLEAR = ~(SIGN | SEAL | ALWAYS_SIGN) & 0xffffffff

local function shift_fields(msg, first, count, limit, delta)
  -- security buffers: (len u16, maxlen u16, offset u32) at 1-based position first
  for i = 0, count - 1 do
    local pos = first + i * 8
    local len, maxlen, off = string.unpack("<I2I2I4", msg, pos)
    if len > 0 and off >= limit then
      msg = msg:sub(1, pos - 1) .. string.pack("<I2I2I4", len, maxlen, off + delta) .. msg:sub(pos + 8)
    end
  end
  return msg
end

-- `header`: the request field carrying the messages ("Authorization" for an
-- origin; "Proxy-Authorization" for a forward proxy, see fix_ntlm_proxy).
function fix_ntlm(r, header)
  header = header or "Authorization"
  local h = r.headers_in[header]
  if not h then return apache2.DECLINED end
  local scheme, b64 = h:match("^%s*(%S+)%s+(%S+)%s*$")
  if not scheme then return apache2.DECLINED end
  local ls = scheme:lower()
  if ls ~= "ntlm" and ls ~= "negotiate" then return apache2.DECLINED end
  local msg = b64decode(b64)
  if #msg < 16 or msg:sub(1, 8) ~= "NTLMSSP\0" then return apache2.DECLINED end
  local mtype, flags = string.unpack("<I4I4", msg, 9)
  local before = #msg
  if mtype == 1 then
    if #msg < 40 then
      -- domain (pos 17) and workstation (pos 25) fields; payload starts at 32
      msg = shift_fields(msg, 17, 2, 32, 8)
      msg = msg:sub(1, 32) .. string.rep("\0", 8) .. msg:sub(33)
    end
    msg = msg:sub(1, 12) .. string.pack("<I4", flags & CLEAR) .. msg:sub(17)
  elseif mtype == 3 and #msg >= 64 then
    local flags3 = string.unpack("<I4", msg, 61)
    msg = msg:sub(1, 60) .. string.pack("<I4", flags3 & CLEAR) .. msg:sub(65)
    flags = flags3
  else
    return apache2.DECLINED
  end
  r:info(string.format("netauth ntlm_fix: type %d, %d -> %d bytes, flags 0x%08x -> 0x%08x",
                       mtype, before, #msg, flags, flags & CLEAR))
  r.headers_in[header] = scheme .. " " .. b64encode(msg)
  return apache2.DECLINED
end

-- The same fix-up for proxy authentication (Tests/e2e/parents: Apache as an
-- NTLM forward proxy, where libcurl's messages come in Proxy-Authorization).
function fix_ntlm_proxy(r)
  return fix_ntlm(r, "Proxy-Authorization")
end

-- ErrorDocument 401 handler of the NTLM-only vhost: keep only NTLM offers.
-- (Headers set by mod_auth_gssapi arrive in r.err_headers_out of the
-- internally redirected request.)
local BODY_401 = [[<!DOCTYPE HTML PUBLIC "-//IETF//DTD HTML 2.0//EN">
<html><head>
<title>401 Unauthorized</title>
</head><body>
<h1>Unauthorized</h1>
<p>This server could not verify that you
are authorized to access the document
requested.</p>
</body></html>
]]

function ntlm_only_401(r)
  -- apr_table_get returns the first value: "NTLM <b64>" for a Type-2 challenge
  -- (the only value then), "Negotiate" when mod_auth_gssapi offered both.
  local first = r.err_headers_out["WWW-Authenticate"] or ""
  if not first:match("^%s*[Nn][Tt][Ll][Mm]%s+%S") then first = "NTLM" end
  r.err_headers_out["WWW-Authenticate"] = nil
  r.err_headers_out["WWW-Authenticate"] = first
  r.status = 401
  r.content_type = "text/html; charset=iso-8859-1"
  r:write(BODY_401)
  return apache2.OK
end
