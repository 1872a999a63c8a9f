#!/usr/bin/env bash
# For each credential kind: how many Swift files outside the kind's own folder name it (its settings type, its
# Kind case or accessor). The seam's measure (docs/ARCHITECTURE.md, "How to add a credential kind"): 0 for token
# kinds; network kinds are also named by the connection layer that applies them (NetworkAuth, libcurl options).
# Usage: scripts/kind-reach.sh [git-rev]   (default: the work tree)
set -euo pipefail
cd "$(dirname "$0")/.."
rev="${1:-}"
files() {
    if [ -n "$rev" ]; then git ls-tree -r --name-only "$rev" Sources/AuthProxyCore | grep '\.swift$'
    else find Sources/AuthProxyCore -name '*.swift' | sort; fi
}
# Code only: doc comments that mention a kind do not make a file depend on it.
content() { { if [ -n "$rev" ]; then git show "$rev:$1"; else cat "$1"; fi; } | grep -vE '^\s*//'; }
# kind | folder under Credentials/Kinds | pattern naming it
kinds=(
  'api-key|APIKey|\.apiKey\b|APIKeySettings|APIKeySlot'
  'token|Token|PregeneratedToken|\.token\(token:|case \.token\(let t, let referer|case \.token = c\.kind|case \.token:$'
  'arcgis-token|ArcGISToken|\.arcgisToken\b|ArcGISTokenSettings'
  'oauth-app|OAuthApp|\.oauthApp\b|OAuthAppSettings'
  'oauth-user|OAuthUser|\.oauthUser\b|OAuthUserSettings'
  'oauth2|OAuth2|\.oauth2\b|OAuth2Settings'
  'header|Header|case \.header\(|\.header\(fields|HeaderSettings'
  'query|Query|QueryKind|QueryParameters'
  'aws-sigv4|AWSSigV4|AWSSigV4Kind|SigV4Signer'
  'azure-sas|AzureSAS|AzureSASSettings|AzureSASKind'
  'server-trust|ServerTrust|\.serverTrust\b|ServerTrustSettings'
  'password|Password|case \.password\b|\.password\(|PasswordSettings'
  'kerberos|Kerberos|case \.kerberos\b|\.kerberos\(|KerberosSettings'
  'certificate|Certificate|case \.certificate\b|\.certificate\(|ClientCertificateSettings'
)
all=$(files)
printf '%-14s %s\n' kind files-outside-its-folder
for k in "${kinds[@]}"; do
    name=${k%%|*}; rest=${k#*|}; folder=${rest%%|*}; pattern=${rest#*|}
    n=0; list=""
    for f in $all; do
        # Its folder, and the registration line in CredentialKinds.swift.
        case "$f" in Sources/AuthProxyCore/Credentials/Kinds/"$folder"/*|*/Credentials/CredentialKinds.swift) continue ;; esac
        if [ "$(content "$f" | grep -cE "$pattern" || true)" -gt 0 ]; then n=$((n + 1)); list="$list ${f#Sources/AuthProxyCore/}"; fi
    done
    printf '%-14s %3d %s\n' "$name" "$n" "${VERBOSE:+$list}"
done
