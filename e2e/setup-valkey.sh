#!/usr/bin/env bash
# Installs Valkey 8 (valkey-server, valkey-sentinel, valkey-cli) from Debian's backports suite,
# using the mirror this machine's apt sources already name; falls back to redis 7 from the main
# suite with a warning. Idempotent; run as root.
set -euo pipefail

say() { printf 'setup-valkey: %s\n' "$*" >&2; }

have_valkey() {
  command -v valkey-server >/dev/null && command -v valkey-sentinel >/dev/null \
    && command -v valkey-cli >/dev/null
}

if have_valkey; then
  say "$(valkey-server --version | head -n1)"
  exit 0
fi

[ "$(id -u)" -eq 0 ] || { say "needs root (apt-get)"; exit 1; }
. /etc/os-release
codename="${VERSION_CODENAME:?no VERSION_CODENAME in /etc/os-release}"

# The first Debian mirror URI configured for the main suite, in deb822 or one-line format.
mirror=""
for f in /etc/apt/sources.list.d/*.sources; do
  [ -e "$f" ] || continue
  mirror=$(awk -v suite="$codename" '
    /^URIs:/ { uri = $2 }
    /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == suite) found = 1 }
    /^$/ { if (found && uri != "") { print uri; exit } found = 0; uri = "" }
    END { if (found && uri != "") print uri }' "$f")
  [ -n "$mirror" ] && break
done
if [ -z "$mirror" ]; then
  mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
    | awk -v suite="$codename" '$1 == "deb" && $3 == suite { print $2; exit }')
fi
[ -n "$mirror" ] || { say "no apt source for $codename found; cannot derive a mirror"; exit 1; }

list=/etc/apt/sources.list.d/valkey-operator-backports.sources
if [ ! -e "$list" ]; then
  say "adding $codename-backports from the configured mirror"
  printf 'Types: deb\nURIs: %s\nSuites: %s-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$mirror" "$codename" > "$list"
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
if apt-get install -y -qq -t "$codename-backports" valkey-server valkey-sentinel valkey-tools >&2 \
  && have_valkey; then
  # The packages start a system service; the local cluster runs its own processes.
  systemctl disable --now valkey-server valkey-sentinel >/dev/null 2>&1 || true
  say "$(valkey-server --version | head -n1)"
  exit 0
fi

say "WARNING: valkey 8 is not installable here; falling back to redis-server 7 from $codename"
apt-get install -y -qq redis-server redis-sentinel redis-tools >&2
systemctl disable --now redis-server redis-sentinel >/dev/null 2>&1 || true
say "$(redis-server --version | head -n1)"
