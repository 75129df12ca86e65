#!/usr/bin/env bash
# Fetches Prometheus and promtool from Debian forky's prometheus and promtool packages and
# prints the directory holding the two binaries on stdout (progress on stderr): promtool
# checks and unit-tests the alert rules (hack/alerts-check.sh), prometheus is there for an
# e2e that scrapes the exporters. Run as root (the private apt state of debian.sh).
#
# Debian builds upstream's release with its Go; both binaries link glibc only, at symbol
# versions up to 2.34 (the packages' `libc6 (>= 2.34)`), so they run on this host's own
# libc (Debian 12 has 2.36) and nothing else of the closure is unpacked: the directory
# holds just `prometheus` and `promtool`. On a host whose libc is older the check below
# fails and says so.
#
# Cached at ${VALKEY_OPERATOR_CACHE:-$HOME/.cache/valkey-operator}/tools/prometheus-<key>/
# (<key> hashes the two .deb file names and this script), with <dir>.version (the
# upstream version, e.g. 3.5.3) next to it.
set -euo pipefail

say() { printf 'prometheus: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }
# A command that fails outside a test ends the script (set -e): say which, never silently.
set -E
trap 'say "failed (exit $?) at line $LINENO: $BASH_COMMAND"' ERR

[[ "$(id -u)" -eq 0 ]] || die "needs root (debian.sh's apt state)"
self="$(readlink -f "${BASH_SOURCE[0]}")"
cache="${VALKEY_OPERATOR_CACHE:-$HOME/.cache/valkey-operator}"
suite=forky
# shellcheck source=debian.sh
. "$(dirname "$self")/debian.sh"
debian_closure "$suite" "$suite" prometheus promtool
prometheus_deb="$(printf '%s\n' "${debs[@]}" | grep '^prometheus_')" || die "closure lacks prometheus"
promtool_deb="$(printf '%s\n' "${debs[@]}" | grep '^promtool_')" || die "closure lacks promtool"
# 3.5.3+ds1-6 -> 3.5.3 (the Debian revision, repack suffix and any epoch dropped).
version="$(sed 's/^promtool_\(.*\)_[^_]*\.deb$/\1/; s/^[0-9]*%3a//; s/-[^-]*$//; s/+.*$//' <<<"$promtool_deb")"

key="$({ echo "$prometheus_deb"; echo "$promtool_deb"; cat "$self"; } | sha256sum | cut -c1-12)"
out="$cache/tools/prometheus-$key"
if [[ -x "$out/promtool" && -x "$out/prometheus" ]]; then
  say "cached: prometheus and promtool $version ($suite)"
  echo "$out"
  exit 0
fi
debian_download

mkdir -p "$cache/tools"
tmp="$(mktemp -d "$cache/tools/.tmp-prometheus-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
t0=$SECONDS
for d in "$prometheus_deb" "$promtool_deb"; do
  dpkg-deb --fsys-tarfile "$archives/$d" | tar -x -C "$tmp" ./usr/bin
done
mkdir "$tmp/out"
for b in prometheus promtool; do
  mv "$tmp/usr/bin/$b" "$tmp/out/$b"
  # Run here, on this host's libc: a missing library or symbol version shows as ldd's
  # "not found" or as the loader's error below.
  if ldd "$tmp/out/$b" 2>&1 | grep -q 'not found'; then
    ldd "$tmp/out/$b" >&2 || true
    die "$b from $suite needs a library or symbol version this host lacks ($(ldd --version | head -n1))"
  fi
  got="$("$tmp/out/$b" --version 2>&1)" || die "$b from $suite does not run on this host: $got"
  [[ "$got" == *"$b, version $version"* ]] || die "expected $b $version, got: $got"
  say "$(head -n1 <<<"$got")"
done

printf '%s\n' "$version" >"$tmp/version"
mv -f "$tmp/version" "$out.version"
mv -T "$tmp/out" "$out" 2>/dev/null || [[ -x "$out/promtool" ]] || die "cannot move the binaries into $out"
say "unpacked $out in $((SECONDS - t0))s ($(du -sh "$out" | cut -f1))"
echo "$out"
