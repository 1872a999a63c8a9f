#!/usr/bin/env bash
# Runs the whole test suite: Swift unit tests, then end-to-end tests with the real binary (the debug build; a
# subset once more with the release build), real clients
# (curl, Python requests, GDAL ogrinfo) and test servers on loopback, then every fuzz target for a bounded time
# (FUZZ_SECONDS per target, default 20; 0 skips them). Installs what it needs from Debian
# packages and PyPI when missing (needs root or sudo). Used by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."

# In CI no variable inherited from outside may turn a failure into a skip (AUTHPROXY_E2E_ALLOW_SKIP,
# NETAUTH_ALLOW_SKIP, PARENTS_ALLOW_SKIP: any *_ALLOW_SKIP) or move the first end-to-end pass onto libcurl.
if [ "${CI:-}" = "true" ]; then
  for v in $(compgen -v | grep '_ALLOW_SKIP$' || true); do unset "$v"; done
  unset AUTHPROXY_TEST_HTTP_CLIENT
fi

sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
need=()
for pkg in libcurl4-openssl-dev libssl-dev zlib1g-dev libpacparser-dev libhiredis-dev pkg-config curl openssl gdal-bin python3 iproute2 util-linux \
           apache2 libapache2-mod-auth-gssapi gss-ntlmssp krb5-kdc krb5-admin-server krb5-user squid stunnel4 microsocks \
           python3-yaml python3-pacparser systemd strace chromium redis-server redis-tools prometheus; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing ${need[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
# pytest-timeout: Tests/e2e/pytest.ini gives every test a time limit, so a spinning proxy fails its test, not CI.
# jsonschema checks support captures against the HAR 1.2 schema (Tests/e2e/test_capture.py); opentelemetry-proto
# decodes the proxy's OTLP exports with the official definitions (Tests/e2e/otlp_receiver.py). pytest-xdist runs the
# end-to-end files on E2E_WORKERS processes (below).
python3 -c 'import requests, pytest, pytest_timeout, xdist, yaml, prometheus_client, websockets, cryptography, jsonschema, opentelemetry.proto.collector.trace.v1.trace_service_pb2, sys; sys.exit(int(websockets.__version__.split(".")[0]) < 15)' 2>/dev/null \
  || python3 -m pip install -q requests pytest pytest-timeout pytest-xdist pyyaml prometheus-client 'websockets>=15' cryptography jsonschema opentelemetry-proto
# A real S3 that checks SigV4 signatures (moto in server mode) and a PMTiles reader for the aws-sigv4 tests; OWSLib
# for the query (GeoServer authkey) tests.
python3 -c 'import moto.server, pmtiles, owslib' 2>/dev/null \
  || python3 -m pip install -q 'moto[server]' pmtiles OWSLib
# Esri's ArcGIS API for Python, for the proxy-over-TLS test (Tests/e2e/test_tls_proxy.py). Large and optional:
# when it cannot be installed, only that test is skipped, saying why.
(cd / && python3 -c 'import arcgis.gis' 2>/dev/null) \
  || python3 -m pip install -q arcgis \
  || echo "== warning: pip install arcgis failed; the ArcGIS API for Python test will be skipped"

echo "== swift format lint --strict (the tree stays formatted; fix with: swift format -i -r --parallel Sources Tests Package.swift)"
swift format lint --strict -r --parallel Sources Tests Package.swift
echo "== swift build (release: what the run command builds)"
swift build -c release --product authproxy
echo "== swift build (no compiler warnings: a warning fails the run when the build compiles the file)"
swift build --build-tests 2>&1 | tee .build/test-build.log
if grep -q ": warning: " .build/test-build.log; then
  grep ": warning: " .build/test-build.log | sort -u
  echo "== compiler warnings (above): fix them"; exit 1
fi
echo "== swift test (unit)"
swift test --skip-build
# Tests that must run for minutes (a sign-in outliving several refresh-token lives) wait on timers, not on the
# CPU: they run beside the main suite, in their own pytest, and their result is checked at its end.
echo "== end-to-end, long-running tests (in the background: Tests/e2e -m long_running)"
AUTHPROXY_BIN="$PWD/.build/debug/authproxy" python3 -m pytest Tests/e2e -q -p no:cacheprovider -m long_running \
  >.build/e2e-long-running.log 2>&1 &
long_running_pid=$!
trap 'kill "$long_running_pid" 2>/dev/null || true' EXIT
# The end-to-end tests wait on servers, clients and timers more than they compute: they run on E2E_WORKERS pytest
# processes (default 2), whole files to a process (--dist loadfile), so a file's module rigs start once. Every test
# starts its own servers on ports it picks; a session rig (the Kerberos realm and Apache, Squid) starts once per
# process.
workers="${E2E_WORKERS:-2}"
parallel=(-n "$workers" --dist loadfile)
[ "$workers" -gt 1 ] || parallel=()
echo "== end-to-end (pytest, $workers processes)"
AUTHPROXY_BIN="$PWD/.build/debug/authproxy" python3 -m pytest Tests/e2e -q -p no:cacheprovider -m "not long_running" "${parallel[@]}"
echo "== end-to-end, long-running tests (result)"
long_running_rc=0
wait "$long_running_pid" || long_running_rc=$?
trap - EXIT
cat .build/e2e-long-running.log
# 5 is pytest's "no tests collected": the tests this stage exists for must not vanish silently.
if [ "$long_running_rc" -ne 0 ]; then echo "== long-running end-to-end tests failed (rc $long_running_rc)"; exit 1; fi
# Upstreams go through the proxy's own HTTP/1.1 client by default (over a TLS connection libcurl makes, for https);
# `[proxy] http_client = "libcurl"` puts them back on libcurl transfers, so the relaying, streaming, framing,
# smuggling and interception suites, the retries and GET-as-POST forms (and the answers that come before an upload
# ended) run once more that way.
echo "== end-to-end, upstreams through libcurl transfers (http_client = \"libcurl\")"
AUTHPROXY_TEST_HTTP_CLIENT=libcurl AUTHPROXY_BIN="$PWD/.build/debug/authproxy" python3 -m pytest -q -p no:cacheprovider "${parallel[@]}" \
  Tests/e2e/test_forwarding.py Tests/e2e/test_streaming.py Tests/e2e/test_smuggling_corpus.py Tests/e2e/test_faults.py \
  Tests/e2e/test_security_regressions.py Tests/e2e/test_security_request_path.py Tests/e2e/test_interception.py \
  Tests/e2e/test_retries.py Tests/e2e/test_get_as_post.py Tests/e2e/test_security_request_path_35.py \
  Tests/e2e/test_security_findings_35_pac.py Tests/e2e/test_connector.py Tests/e2e/test_tracing.py \
  Tests/e2e/test_http_client.py::test_libcurl_can_carry_https_instead \
  Tests/e2e/test_http_client.py::test_an_answer_before_the_upload_ended_closes_the_client_connection_cleanly \
  Tests/e2e/test_http_client.py::test_the_rest_of_an_upload_answered_early_is_read_while_it_keeps_coming
# The release build is what users run; the suite above drives the debug build. A representative subset
# (relaying, ArcGIS token lifecycles, HTTPS interception, WebSocket) runs once more against it (~2 min).
echo "== end-to-end against the release build (forwarding, tokens, interception, WebSocket)"
AUTHPROXY_BIN="$PWD/.build/release/authproxy" python3 -m pytest -q -p no:cacheprovider "${parallel[@]}" \
  Tests/e2e/test_forwarding.py Tests/e2e/test_token_lifecycle.py Tests/e2e/test_interception.py Tests/e2e/test_websocket.py \
  Tests/e2e/test_websocket_tls.py
fuzz_seconds="${FUZZ_SECONDS:-20}"
if [ "$fuzz_seconds" -gt 0 ]; then
  # A crash or invariant violation fails the run; its input stays under .build-libfuzzer/fuzz/TARGET/ (and is
  # printed in base64).
  echo "== fuzzing (libFuzzer + AddressSanitizer, ${fuzz_seconds}s per target)"
  bash scripts/fuzz.sh --seconds "$fuzz_seconds"
fi
