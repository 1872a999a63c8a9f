#!/usr/bin/env bash
# Builds authproxy (release) and runs it with the given config (default: proxy.conf.example).
# Installs libcurl4-openssl-dev, libssl-dev, libpacparser-dev and libhiredis-dev first if they are missing (Debian/Ubuntu, needs root or sudo).
set -euo pipefail
cd "$(dirname "$0")/.."
config="${1:-proxy.conf.example}"
shift || true

need=()
for pkg in libcurl4-openssl-dev libssl-dev libpacparser-dev libhiredis-dev pkg-config; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing ${need[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

swift build -c release --product authproxy >&2
exec .build/release/authproxy serve --config "$config" "$@"
