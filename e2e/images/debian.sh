# Sourced by the rootfs scripts (valkey-rootfs.sh, exporter-rootfs.sh): the Debian
# packages of a root filesystem, resolved and downloaded through a private apt state per
# suite (never the host's). The caller defines say() and die() and runs as root.
#
#   debian_closure SUITE "SUITES" PKG...
#
# resolves the dependency closure of PKG... in SUITES (the suite's own index, refreshed
# at most once a day) against an empty dpkg status and sets `debs`: the closure's .deb
# file names, sorted (they carry versions, so they make a cache key). Then
#
#   debian_download
#
# downloads what the suite's archive cache lacks and sets `archives`, the directory
# holding them. A caller whose result is cached by that key skips the download.

# The mirror this machine's own suite uses: the first URI given for its codename in
# deb822 sources, else in one-line sources. Nothing is hard-coded.
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

debian_closure() {
  local suite="$1" suites="$2"
  shift 2
  local pkgs=("$@") arch=amd64
  local cache="${VALKEY_OPERATOR_CACHE:-$HOME/.cache/valkey-operator}"
  local ad="$cache/images/apt/$suite"
  mkdir -p "$ad/etc" "$ad/prefs" "$ad/state/lists/partial" "$ad/cache/archives/partial"
  touch "$ad/status"
  exec 8>"$ad/.lock"
  flock 8 # one resolver/downloader per suite at a time

  # Host apt.conf.d is still read (it may carry e.g. date-check settings needed for
  # this machine's mirror); everything stateful is redirected here.
  local apt_opts=(
    -o "Dir::State=$ad/state" -o "Dir::State::status=$ad/status"
    -o "Dir::Cache=$ad/cache" -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache="
    -o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$ad/etc"
    -o "Dir::Etc::Preferences=/dev/null" -o "Dir::Etc::PreferencesParts=$ad/prefs"
    -o "APT::Architecture=$arch" -o "APT::Architectures::=$arch"
    -o "APT::Sandbox::User=root" -o "Debug::NoLocking=1"
    -o "Acquire::Languages=none" -o "APT::Get::List-Cleanup=1"
  )

  local sources="$ad/etc/debian.sources" stamp="$ad/.updated" mirror
  if [[ ! -s "$sources" ]]; then
    mirror="$(derive_mirror)" || die "no apt source for this machine's suite found; cannot derive a Debian mirror"
    printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nTargets: Packages\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      "$mirror" "$suites" >"$sources.tmp"
    mv -f "$sources.tmp" "$sources"
    rm -f "$stamp"
  fi
  if [[ ! -e "$stamp" || -n "$(find "$stamp" -mmin +1440 2>/dev/null)" ]]; then
    say "refreshing the $suite package index (at most once a day)..."
    local t0=$SECONDS
    if apt-get "${apt_opts[@]}" -q update >"$ad/update.log" 2>&1 && ! grep -q '^[WE]:' "$ad/update.log"; then
      touch "$stamp"
      say "index refreshed in $((SECONDS - t0))s"
    elif compgen -G "$ad/state/lists/*_Packages*" >/dev/null; then
      say "WARNING: index refresh failed (see $ad/update.log); using the previous index"
    else
      cat "$ad/update.log" >&2
      die "apt-get update for $suite failed"
    fi
  fi

  # Resolve (from the cached index, no network): a simulated install against the empty
  # status prints one "Inst NAME (VERSION ARCHIVE [ARCH])" line per package (sometimes
  # followed by " [...]"); the pool file name is NAME_VERSION_ARCH.deb with ':' as %3a.
  # The result is remembered until the next index refresh, so a warm run starts no apt.
  local closure sim
  closure="$ad/closure-$(printf '%s\n' "$arch" "${pkgs[@]}" | sha256sum | cut -c1-12)"
  if [[ -s "$closure" && "$closure" -nt "$stamp" ]]; then
    mapfile -t debs <"$closure"
  else
    say "resolving the package closure in $suite..."
    sim="$(apt-get "${apt_opts[@]}" -s install --no-install-recommends "${pkgs[@]}" 2>&1)" \
      || { echo "$sim" >&2; die "cannot resolve packages in $suite"; }
    mapfile -t debs < <(sed -n 's/^Inst \([^ ]*\) (\([^ ]*\) .* \[\([^]]*\)\])\( \[.*\]\)\{0,1\}$/\1_\2_\3.deb/p' <<<"$sim" \
      | sed 's/:/%3a/g' | LC_ALL=C sort)
    ((${#debs[@]})) || { echo "$sim" >&2; die "empty package closure for $suite"; }
    printf '%s\n' "${debs[@]}" >"$closure.tmp" && mv -f "$closure.tmp" "$closure"
  fi
  debian_apt_opts=("${apt_opts[@]}") debian_pkgs=("${pkgs[@]}") debian_suite="$suite"
  debian_archives="$ad/cache/archives"
}

debian_download() {
  local suite="$debian_suite" ad
  archives="$debian_archives"
  local d f missing=0
  for d in "${debs[@]}"; do [[ -s "$archives/$d" ]] || missing=$((missing + 1)); done
  if ((missing)); then
    say "downloading $missing of ${#debs[@]} packages from $suite..."
    local t1=$SECONDS
    ad="$(dirname "$(dirname "$archives")")"
    apt-get "${debian_apt_opts[@]}" -q -y install --download-only --no-install-recommends "${debian_pkgs[@]}" >"$ad/download.log" 2>&1 \
      || { cat "$ad/download.log" >&2; die "download failed"; }
    say "downloaded in $((SECONDS - t1))s"
  fi
  for d in "${debs[@]}"; do [[ -s "$archives/$d" ]] || die "expected $archives/$d after download"; done
  # Drop superseded versions of these packages (other closures of the suite share the
  # cache, so packages outside this one stay).
  declare -A wanted=() names=()
  for d in "${debs[@]}"; do wanted[$d]=1; names[${d%%_*}]=1; done
  for f in "$archives"/*.deb; do
    [[ -e "$f" ]] || continue
    d="$(basename "$f")"
    # An `if`, not `[[ ]] && rm`: a false test as the loop's last command would be the
    # function's status, and `set -e` would end the caller silently (the first cold run).
    if [[ -n "${names[${d%%_*}]:-}" && -z "${wanted[$d]:-}" ]]; then rm -f "$f"; fi
  done
  # The suite's lock stays held until the caller exits: it unpacks from the cache next.
}
