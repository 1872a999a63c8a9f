#!/usr/bin/env bash
# Regenerates docs/status-page.png, the admin listener's status page as shown in docs/operations.md ("Status page").
#
#   bash scripts/status-screenshot.sh [BINARY] [--out FILE]
#
# BINARY  authproxy to run (default .build/debug/authproxy, built if missing)
# --out   where the PNG goes (default docs/status-page.png)
#
# Starts on 127.0.0.1 only, on free ports, and stops on exit: the ArcGIS test server (Tests/e2e/arcgis/server.py,
# role server, user alice), a static origin (python3 -m http.server) and authproxy with an admin listener and
# three credentials: an api-key for the origin, an arcgis-token with prefetch for the test server, and an
# arcgis-token for a path there that has no token service (so the page shows a failing token). A few requests go
# through the proxy, then headless Chromium (Debian package chromium) takes the screenshot.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN=""
OUT="$ROOT/docs/status-page.png"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --out) OUT="$2"; shift 2 ;;
        -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "unknown argument: $1" >&2; exit 2 ;;
        *) BIN="$(readlink -f "$1")"; shift ;;
    esac
done
if [[ -z "$BIN" ]]; then
    BIN="$ROOT/.build/debug/authproxy"
    [[ -x "$BIN" ]] || (cd "$ROOT" && swift build --product authproxy >&2)
fi
BROWSER=""
for name in chromium chromium-browser google-chrome; do
    if command -v "$name" >/dev/null 2>&1; then BROWSER="$(command -v "$name")"; break; fi
done
[[ -n "$BROWSER" ]] || { echo "needs headless Chromium (apt-get install chromium)" >&2; exit 2; }

TMP="$(mktemp -d /tmp/authproxy-status-shot.XXXXXX)"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_http() { # url
    for _ in $(seq 1 100); do curl -s --noproxy '*' -o /dev/null "$1" && return 0; sleep 0.1; done
    echo "not answering: $1" >&2; exit 1
}

AGS_PORT=$(free_port); ORIGIN_PORT=$(free_port); PROXY_PORT=$(free_port); ADMIN_PORT=$(free_port)
python3 "$ROOT/Tests/e2e/arcgis/server.py" --port "$AGS_PORT" --role server --user alice:alice-pass --ttl 3600 \
    > "$TMP/ags.log" 2>&1 &
PIDS+=($!)
mkdir -p "$TMP/www"
echo '{"ok": true}' > "$TMP/www/echo"
(cd "$TMP/www" && exec python3 -m http.server "$ORIGIN_PORT" --bind 127.0.0.1) > "$TMP/origin.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$AGS_PORT/arcgis/rest/info?f=json"
wait_http "http://127.0.0.1:$ORIGIN_PORT/echo"

cat > "$TMP/proxy.conf" <<EOF
[proxy]
listen = ["127.0.0.1:$PROXY_PORT"]
state_dir = "$TMP/state"
[admin]
listen = "127.0.0.1:$ADMIN_PORT"
[log]
level = "warning"
[[credential]]
name = "basemaps"
type = "api-key"
key = "SCREENSHOT-KEY"
match = "http://127.0.0.1:$ORIGIN_PORT/echo"
[[credential]]
name = "enterprise"
type = "arcgis-token"
username = "alice"
password = "alice-pass"
match = "http://127.0.0.1:$AGS_PORT/arcgis"
prefetch = true
[[credential]]
name = "archive"
type = "arcgis-token"
username = "alice"
password = "alice-pass"
match = "http://127.0.0.1:$AGS_PORT/archive"
EOF
"$BIN" serve --config "$TMP/proxy.conf" > "$TMP/proxy.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$ADMIN_PORT/healthz"

via() { curl -s --noproxy '' -x "http://127.0.0.1:$PROXY_PORT" -o /dev/null "$@" || true; }
for _ in 1 2 3; do via "http://127.0.0.1:$ORIGIN_PORT/echo"; done
for _ in 1 2 3 4; do via "http://127.0.0.1:$AGS_PORT/arcgis/rest/services/Roads/FeatureServer/0/query?where=1%3D1&f=json"; done
via "http://127.0.0.1:$AGS_PORT/archive/rest/services?f=json"
sleep 1

"$BROWSER" --headless --no-sandbox --disable-gpu --no-proxy-server --user-data-dir="$TMP/chromium" \
    --hide-scrollbars --window-size=1200,840 --screenshot="$OUT" "http://127.0.0.1:$ADMIN_PORT/" \
    > "$TMP/chromium.log" 2>&1
[[ -s "$OUT" ]] || { echo "no screenshot written; chromium said:" >&2; cat "$TMP/chromium.log" >&2; exit 1; }
echo "wrote $OUT"
