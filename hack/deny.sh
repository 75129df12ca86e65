#!/usr/bin/env bash
# cargo-deny over the workspace (deny.toml): licences, bans (duplicate versions included)
# and sources, offline; advisories against RustSec's database when it can be fetched, and a
# line saying so when it cannot (this machine reaches only package registries).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
say() { printf 'deny: %s\n' "$*"; }

# cargo-deny reads every package of Cargo.lock, those of other platforms too, which no
# build here downloads: on a new machine they are not in cargo's cache yet.
cargo fetch --locked --quiet
cargo deny --locked --offline check licenses bans sources
if cargo deny --locked fetch db >/dev/null 2>&1; then
  cargo deny --locked check advisories
else
  say "advisories NOT checked: RustSec's advisory database could not be fetched from here"
fi
