#!/usr/bin/env bash
# Builds a minimal Valkey root filesystem from Debian packages and prints its
# directory on stdout (progress on stderr).
#
# Usage: e2e/images/valkey-rootfs.sh VERSION      (run as root: chroot, ownership)
#   VERSION  Debian suite           valkey-server
#   8.0      bookworm-backports     8.0.x
#   8.1      trixie                 8.1.x
#   9.1      forky                  9.1.x
#
# How: a private apt state per suite (never the host's) under
#   ${VALKEY_OPERATOR_CACHE:-$HOME/.cache/valkey-operator}/images/apt/<suite>/
# resolves the dependency closure of valkey-server, valkey-sentinel, valkey-tools
# and a small shell userland against an empty dpkg status, downloads it
# (--download-only), and unpacks every .deb with dpkg-deb into a merged-/usr tree.
# Maintainer scripts do not run; what they would have set up (sh, awk, loader
# link, the valkey user, /data, /tmp) is created here. Docs, man pages, locales
# and systemd units are dropped.
#
# The index is refreshed at most once a day (stamp file), so warm runs need no
# network. The result is cached at
#   ${cache}/images/rootfs/valkey-<VERSION>-<key>/
# with <key> hashing the sorted .deb file names (they carry versions) and this
# script; sidecar files <dir>.version (valkey-server package version), <dir>.suite
# and <dir>.packages sit next to it. A warm run with an existing key prints the
# path without extracting anything.
set -euo pipefail

say() { printf 'valkey-rootfs: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

(($# == 1)) || die "usage: $0 VERSION   (8.0, 8.1 or 9.1)"
version="$1"
# hints: packages that steer apt to the small alternative of an "A | B" dependency
# (bookworm: usr-is-merged instead of usrmerge, which pulls in all of perl; forky:
# standalone sysusers/tmpfiles instead of the whole of systemd).
case "$version" in
  8.0) suite=bookworm-backports; suites="bookworm bookworm-backports"; hints=(usr-is-merged) ;;
  8.1) suite=trixie; suites="trixie"; hints=() ;;
  9.1) suite=forky; suites="forky"; hints=(systemd-standalone-sysusers systemd-standalone-tmpfiles) ;;
  *) die "unknown VERSION '$version' (want 8.0, 8.1 or 9.1)" ;;
esac
[[ "$(id -u)" -eq 0 ]] || die "needs root (files owned by root and 999, chroot checks)"

self="$(readlink -f "${BASH_SOURCE[0]}")"
cache="${VALKEY_OPERATOR_CACHE:-$HOME/.cache/valkey-operator}"
arch=amd64
# libc-bin: ldconfig and the C.UTF-8 locale (valkey-server exits with "Failed to
# configure LOCALE" when LANG names a locale the image lacks, e.g. LANG=C.UTF-8).
pkgs=(valkey-server valkey-sentinel valkey-tools dash bash coreutils grep sed mawk findutils libc-bin "${hints[@]}")

# --- The Debian mirror, as configured for this machine's own suite ---------------
# Same derivation as e2e/setup-valkey.sh: the first URI given for the host's codename
# in deb822 sources, else in one-line sources. Nothing is hard-coded.
derive_mirror() {
  local codename f m=""
  codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
  [[ -n "$codename" ]] || return 1
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -e "$f" ]] || continue
    m=$(awk -v suite="$codename" '
      /^URIs:/ { uri = $2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == suite) found = 1 }
      /^$/ { if (found && uri != "") { print uri; exit } found = 0; uri = "" }
      END { if (found && uri != "") print uri }' "$f")
    [[ -n "$m" ]] && break
  done
  if [[ -z "$m" ]]; then
    m=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
      | awk -v suite="$codename" '$1 == "deb" && $3 == suite { print $2; exit }')
  fi
  [[ -n "$m" ]] && echo "$m"
}

# --- Private apt state for the suite ----------------------------------------------
ad="$cache/images/apt/$suite"
mkdir -p "$ad/etc" "$ad/prefs" "$ad/state/lists/partial" "$ad/cache/archives/partial"
touch "$ad/status"
exec 8>"$ad/.lock"
flock 8 # one resolver/downloader per suite at a time

# Host apt.conf.d is still read (it may carry e.g. date-check settings needed for
# this machine's mirror); everything stateful is redirected here.
apt_opts=(
  -o "Dir::State=$ad/state" -o "Dir::State::status=$ad/status"
  -o "Dir::Cache=$ad/cache" -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache="
  -o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$ad/etc"
  -o "Dir::Etc::Preferences=/dev/null" -o "Dir::Etc::PreferencesParts=$ad/prefs"
  -o "APT::Architecture=$arch" -o "APT::Architectures::=$arch"
  -o "APT::Sandbox::User=root" -o "Debug::NoLocking=1"
  -o "Acquire::Languages=none" -o "APT::Get::List-Cleanup=1"
)
apt() { apt-get "${apt_opts[@]}" "$@"; }

sources="$ad/etc/debian.sources"
stamp="$ad/.updated"
if [[ ! -s "$sources" ]]; then
  mirror="$(derive_mirror)" || die "no apt source for this machine's suite found; cannot derive a Debian mirror"
  printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nTargets: Packages\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$mirror" "$suites" >"$sources.tmp"
  mv -f "$sources.tmp" "$sources"
  rm -f "$stamp"
fi
if [[ ! -e "$stamp" || -n "$(find "$stamp" -mmin +1440 2>/dev/null)" ]]; then
  say "refreshing the $suite package index (at most once a day)..."
  t0=$SECONDS
  if apt -q update >"$ad/update.log" 2>&1 && ! grep -q '^[WE]:' "$ad/update.log"; then
    touch "$stamp"
    say "index refreshed in $((SECONDS - t0))s"
  elif compgen -G "$ad/state/lists/*_Packages*" >/dev/null; then
    say "WARNING: index refresh failed (see $ad/update.log); using the previous index"
  else
    cat "$ad/update.log" >&2
    die "apt-get update for $suite failed"
  fi
fi

# --- Resolve the closure (from the cached index, no network) -----------------------
# Simulated install against the empty status: one "Inst NAME (VERSION ARCHIVE [ARCH])"
# line per package (sometimes followed by " [...]"); the pool file name is
# NAME_VERSION_ARCH.deb with ':' as %3a. The result is remembered until the next
# index refresh, so a warm run does not start apt at all.
closure="$ad/closure-$(printf '%s\n' "$arch" "${pkgs[@]}" | sha256sum | cut -c1-12)"
if [[ -s "$closure" && "$closure" -nt "$stamp" ]]; then
  mapfile -t debs <"$closure"
else
  say "resolving the package closure in $suite..."
  sim="$(apt -s install --no-install-recommends "${pkgs[@]}" 2>&1)" || { echo "$sim" >&2; die "cannot resolve packages in $suite"; }
  mapfile -t debs < <(sed -n 's/^Inst \([^ ]*\) (\([^ ]*\) .* \[\([^]]*\)\])\( \[.*\]\)\{0,1\}$/\1_\2_\3.deb/p' <<<"$sim" \
    | sed 's/:/%3a/g' | LC_ALL=C sort)
  ((${#debs[@]})) || { echo "$sim" >&2; die "empty package closure for $suite"; }
  printf '%s\n' "${debs[@]}" >"$closure.tmp" && mv -f "$closure.tmp" "$closure"
fi
[[ " ${debs[*]} " == *" libc6_"* ]] || die "closure lacks libc6: ${debs[*]}"
server_deb="$(printf '%s\n' "${debs[@]}" | grep '^valkey-server_')" || die "closure lacks valkey-server"
pkg_version="$(sed 's/^valkey-server_\(.*\)_[^_]*\.deb$/\1/; s/%3a/:/g' <<<"$server_deb")"

key="$({ printf '%s\n' "${debs[@]}"; cat "$self"; } | sha256sum | cut -c1-12)"
out="$cache/images/rootfs/valkey-$version-$key"
if [[ -d "$out" ]]; then
  say "cached: valkey-server $pkg_version ($suite)"
  echo "$out"
  exit 0
fi

# --- Download (only what is missing from the suite's archive cache) ----------------
archives="$ad/cache/archives"
missing=0
for d in "${debs[@]}"; do [[ -s "$archives/$d" ]] || missing=$((missing + 1)); done
if ((missing)); then
  say "downloading $missing of ${#debs[@]} packages from $suite..."
  t0=$SECONDS
  apt -q -y install --download-only --no-install-recommends "${pkgs[@]}" >"$ad/download.log" 2>&1 \
    || { cat "$ad/download.log" >&2; die "download failed"; }
  say "downloaded in $((SECONDS - t0))s"
fi
for d in "${debs[@]}"; do [[ -s "$archives/$d" ]] || die "expected $archives/$d after download"; done
# Keep the archive cache to the current closure.
declare -A wanted=()
for d in "${debs[@]}"; do wanted[$d]=1; done
for f in "$archives"/*.deb; do
  [[ -e "$f" && -z "${wanted[$(basename "$f")]:-}" ]] && rm -f "$f"
done

# --- Unpack into a temp dir, then rename into place -------------------------------
mkdir -p "$cache/images/rootfs"
tmp="$(mktemp -d "$cache/images/rootfs/.tmp-valkey-$version-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
root="$tmp/root"
say "unpacking ${#debs[@]} packages (valkey-server $pkg_version, $suite)..."
t0=$SECONDS
mkdir -p "$root"/usr/{bin,sbin,lib,lib64}
for l in bin sbin lib lib64; do ln -s "usr/$l" "$root/$l"; done
for d in "${debs[@]}"; do
  dpkg-deb --fsys-tarfile "$archives/$d" | tar -x --keep-directory-symlink -C "$root"
done

# What maintainer scripts / alternatives would have created.
[[ -e "$root/usr/bin/sh" ]] || ln -s dash "$root/usr/bin/sh"
[[ -e "$root/usr/bin/awk" ]] || ln -s mawk "$root/usr/bin/awk"
if [[ ! -e "$root/usr/lib64/ld-linux-x86-64.so.2" ]]; then
  ln -sf ../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$root/usr/lib64/ld-linux-x86-64.so.2"
fi
mkdir -p "$root/etc" "$root/data" "$root/tmp" "$root/root" "$root/run" "$root/var/tmp"
cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/bash
valkey:x:999:999:Valkey:/data:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
EOF
cat >"$root/etc/group" <<'EOF'
root:x:0:
valkey:x:999:
nogroup:x:65534:
EOF
[[ -e "$root/usr/sbin/nologin" ]] || sed -i 's|/usr/sbin/nologin$|/bin/false|' "$root/etc/passwd"
chmod 0644 "$root/etc/passwd" "$root/etc/group"
chown 999:999 "$root/data" && chmod 0755 "$root/data"
chmod 1777 "$root/tmp" "$root/var/tmp"
chmod 0700 "$root/root"

# The official image's entrypoint contract: options or a config file as the first argument
# run valkey-server with them; a 0022 umask becomes 0077. (Its drop from root to the valkey
# user is left out: no setpriv here, and the operator's pods run as 999 already.)
mkdir -p "$root/usr/local/bin"
printf '%s\n' '#!/bin/sh' 'set -e' \
  'if [ "${1#-}" != "$1" ] || [ "${1%.conf}" != "$1" ]; then' \
  '	set -- valkey-server "$@"' 'fi' \
  "if [ \"\$(umask)\" = '0022' ]; then" '	umask 0077' 'fi' 'exec "$@"' \
  >"$root/usr/local/bin/docker-entrypoint.sh"
chmod 0755 "$root/usr/local/bin/docker-entrypoint.sh"

# Slim down: docs, man/info pages, locales, systemd units and SysV init scripts.
rm -rf "$root"/usr/share/{doc,man,info,locale,lintian,bug} \
  "$root"/usr/lib/systemd "$root"/etc/systemd "$root"/etc/init.d
# A loader cache, as libc-bin's trigger would build (libs also resolve without it).
if [[ -x "$root/usr/sbin/ldconfig" ]]; then chroot "$root" /usr/sbin/ldconfig || true; fi

# Sanity checks before publishing.
got="$(chroot "$root" /usr/bin/valkey-server --version)" || die "valkey-server does not run in the new rootfs"
[[ "$got" == *"v=$version."* ]] || die "expected valkey $version.x, got: $got"
chroot "$root" /bin/sh -c 'valkey-cli --version >/dev/null && echo x | awk "{print}" >/dev/null' \
  || die "shell/valkey-cli/awk do not work in the new rootfs"

printf '%s\n' "$pkg_version" >"$tmp/version"
printf '%s\n' "$suite" >"$tmp/suite"
printf '%s\n' "${debs[@]}" >"$tmp/packages"
mv -f "$tmp/version" "$out.version"
mv -f "$tmp/suite" "$out.suite"
mv -f "$tmp/packages" "$out.packages"
mv -T "$root" "$out" 2>/dev/null || [[ -d "$out" ]] || die "cannot move rootfs into $out"
say "built $out in $((SECONDS - t0))s ($(du -sh "$out" | cut -f1)): $got"
echo "$out"
