#!/usr/bin/env bash
# Instructions (callgrind Ir) per new intercepted HTTPS connection, full handshake against resumed: the handshake
# CPU that TLS session resumption saves a returning client, as a count that stays put on a noisy machine.
#
#   bash bench/irhandshake.sh BINARY [--seconds S] [--tls1.2]
#
# An nginx HTTPS origin (core 1; self-signed EC P-256 certificate for localhost) serves small.json; BINARY runs
# under valgrind --tool=callgrind (core 0) with [tls] interception (a CA from `authproxy ca init`), a
# server-trust credential for the origin and the api-key credential of the benches. bench/tlsload.c (core 1), one
# client at a time, opens a new connection per request: TCP, CONNECT localhost:ORIGIN, TLS handshake with the
# minted certificate, GET small.json. A warm-up mints the leaf and fills the upstream pool; then for each mode the
# counters are zeroed, tlsload runs S seconds (default 20) and the counters are dumped:
#   full     every handshake a full one (tlsload -N);
#   resumed  every handshake offers the session the client got last (tlsload -N -R; the first one is full).
# Ir per connection = Ir ÷ handshakes tlsload completed (CONNECT, handshake, one GET and the close, in user space:
# authproxy, Swift runtime, libdispatch, libcurl, OpenSSL, libc; not the kernel). --tls1.2 caps the client at
# TLS 1.2 (session tickets). valgrind needs the workarounds of bench/irperrequest.sh (see there). Loopback only.
set -euo pipefail
BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BIN=""; SECONDS_PER_MODE=20; MAXPROTO=""
if [[ $# -gt 0 && "$1" != -* ]]; then BIN="$(readlink -f "$1")"; shift; fi
while [[ $# -gt 0 ]]; do
    case "$1" in
        --seconds) SECONDS_PER_MODE="$2"; shift 2 ;;
        --tls1.2) MAXPROTO=1; shift ;;
        -h|--help) sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
[[ -n "$BIN" && -x "$BIN" ]] || { echo "usage: bash bench/irhandshake.sh BINARY [--seconds S] [--tls1.2]" >&2; exit 2; }
need=()
for t in valgrind nginx cc objcopy openssl; do
    command -v "$t" >/dev/null 2>&1 || [[ -x /usr/sbin/$t ]] || need+=("$t")
done
[[ ${#need[@]} -eq 0 ]] || { echo "needs: ${need[*]} (apt-get install valgrind nginx-light gcc binutils openssl libssl-dev)" >&2; exit 2; }

# shellcheck source=bench/pinned.sh
source "$BENCH_DIR/pinned.sh"
getent ahostsv4 localhost | grep -q '^127\.0\.0\.1 ' || { echo "localhost does not resolve to 127.0.0.1" >&2; exit 1; }
objcopy --strip-debug "$BIN" "$TMP/authproxy"
cc -O2 -shared -fPIC "$BENCH_DIR/valgrind/sigsuspend_copy.c" -o "$TMP/sigsuspend_copy.so"
cc -O2 -Wall -o "$TMP/tlsload" "$BENCH_DIR/tlsload.c" -lssl -lcrypto -lpthread
if [[ -n "$MAXPROTO" ]]; then
    # tlsload has no protocol switch: cap it with an OpenSSL configuration of its own (tlsload's environment only).
    cat > "$TMP/openssl-tls12.cnf" <<'CNF'
openssl_conf = conf
[conf]
ssl_conf = ssl
[ssl]
system_default = sys
[sys]
MaxProtocol = TLSv1.2
CNF
fi

ORIGIN_PORT=$(free_port); PORT=$(free_port)
mkdir -p "$TMP/www" "$TMP/o" "$TMP/state"
head -c 2023 "$BENCH_DIR/small.json" > "$TMP/www/small.json"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj "/CN=localhost" \
    -addext "subjectAltName=DNS:localhost" -keyout "$TMP/origin.key" -out "$TMP/origin.pem" 2>/dev/null
cat > "$TMP/o/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $TMP/o/nginx.pid;
error_log $TMP/o/err.log;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000; keepalive_timeout 3600s;
  client_body_temp_path $TMP/o/b; proxy_temp_path $TMP/o/p; fastcgi_temp_path $TMP/o/f; uwsgi_temp_path $TMP/o/u;
  scgi_temp_path $TMP/o/s;
  server { listen 127.0.0.1:$ORIGIN_PORT ssl; ssl_certificate $TMP/origin.pem; ssl_certificate_key $TMP/origin.key;
           root $TMP/www; } }
CONF
taskset -c 1 nginx -c "$TMP/o/nginx.conf" & PIDS+=($!)
"$TMP/authproxy" ca init --dir "$TMP/ca" > "$TMP/ca.log" 2>&1 || { cat "$TMP/ca.log" >&2; exit 1; }
cat > "$TMP/proxy.conf" <<CONF
[proxy]
listen = ["127.0.0.1:$PORT"]
connect_ports = [$ORIGIN_PORT]
state_dir = "$TMP/state"
[log]
level = "notice"
[tls]
ca_cert = "$TMP/ca/ca.pem"
ca_key = "$TMP/ca/ca.key"
[[credential]]
name = "trust"
type = "server-trust"
match = "https://localhost:$ORIGIN_PORT"
ca_file = "$TMP/origin.pem"
[[credential]]
name = "bench"
type = "api-key"
key = "BENCHKEY0123456789"
match = "https://localhost:$ORIGIN_PORT"
CONF
LD_PRELOAD="$TMP/sigsuspend_copy.so" taskset -c 0 valgrind --tool=callgrind --callgrind-out-file="$TMP/cg.%p.out" \
    "$TMP/authproxy" serve --config "$TMP/proxy.conf" > "$TMP/log" 2>&1 &
VPID=$!; PIDS+=("$VPID")
for _ in $(seq 1 1200); do grep -q "authproxy started" "$TMP/log" && break; kill -0 "$VPID" 2>/dev/null || break; sleep 0.2; done
grep -q "authproxy started" "$TMP/log" || { cat "$TMP/log" >&2; echo "authproxy under valgrind did not start" >&2; exit 1; }
load() { # seconds [tlsload flags]
    local s="$1"; shift
    env ${MAXPROTO:+OPENSSL_CONF="$TMP/openssl-tls12.cnf"} taskset -c 1 "$TMP/tlsload" -a "127.0.0.1:$PORT" -t "localhost:$ORIGIN_PORT" -s localhost -C "$TMP/ca/ca.pem" \
        -p /small.json -b 2023 -c 1 -d "$s" "$@" 2>>"$TMP/tlsload.err"
}
dumps() { find "$TMP" -maxdepth 1 -name "cg.$VPID.out.*" | wc -l; }
field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" <<<"$2"; }
w=$(load 5 -N -R)
[[ "$(field errors "$w")" == "-" && "$(field requests "$w")" -gt 0 ]] || { echo "warm-up failed: $w" >&2; cat "$TMP/tlsload.err" >&2; exit 1; }
echo "binary: $BIN"
echo "client: tlsload, one connection at a time, $([[ -n "$MAXPROTO" ]] && echo "TLS 1.2 at most" || echo "TLS 1.3"); $SECONDS_PER_MODE s per mode under callgrind"
declare -A IR_PER
for mode in full resumed; do
    flags=(-N); [[ $mode == resumed ]] && flags+=(-R)
    n_before=$(dumps)
    callgrind_control -z "$VPID" >/dev/null 2>&1
    out=$(load "$SECONDS_PER_MODE" "${flags[@]}")
    callgrind_control -d "$VPID" >/dev/null 2>&1
    for _ in $(seq 1 50); do (( $(dumps) > n_before )) && break; sleep 0.2; done
    ir=$(awk '/^summary:/ {print $2}' "$(ls -t "$TMP"/cg."$VPID".out.* | head -n1)")
    hs=$(field handshakes "$out"); res=$(field resumed "$out"); errs=$(field errors "$out")
    [[ "$errs" == "-" && -n "$ir" && "$hs" -gt 0 ]] || { echo "$mode: failed: $out" >&2; cat "$TMP/tlsload.err" >&2; exit 1; }
    IR_PER[$mode]=$((ir / hs))
    python3 -c "print(f'$mode: {$hs} connections ({$res} resumed), Ir total {$ir:,}, Ir per connection {$ir / $hs:,.0f}')"
done
python3 -c "print(f'resumed ÷ full: {${IR_PER[resumed]} / ${IR_PER[full]}:.2f}')"
