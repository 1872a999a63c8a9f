#!/usr/bin/env bash
# Stored-field layout (offset, size, type) of Swift types inside a built binary, read from its type metadata.
#
#   bash bench/typelayout.sh BINARY Module.Type[.Nested] ...
#   e.g. bash bench/typelayout.sh .build/release/authproxy AuthProxyCore.ClientConnection AuthProxyCore.NetworkAuth
#
# Builds bench/typelayout/ into a shared library with the toolchain's swiftc and clang (in a temp dir), preloads
# it into `BINARY --version` and prints, when that exits, each type's fields; for a class also its instance size.
# Internal types work too (the names are resolved at run time). Used to see what a connection object is made of.
set -euo pipefail
[[ $# -ge 2 ]] || { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
BIN="$(readlink -f "$1")"; shift
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/typelayout" && pwd)"
SWIFTC="$(command -v swiftc)"
CLANG="$(dirname "$SWIFTC")/clang"
[[ -x "$CLANG" ]] || CLANG="$(command -v clang)"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
"$CLANG" -c -fPIC "$DIR/fini.c" -o "$TMP/fini.o"
"$SWIFTC" -O -emit-library "$DIR/TypeLayout.swift" "$TMP/fini.o" -o "$TMP/libtypelayout.so"
TYPELAYOUT_TYPES="$(IFS=,; echo "$*")" LD_PRELOAD="$TMP/libtypelayout.so" "$BIN" --version
