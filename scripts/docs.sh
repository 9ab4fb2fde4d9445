#!/usr/bin/env bash
# Builds the guide (docs/, an mdBook) into target/book and checks its links; installs mdbook
# (from crates.io, the version below) first where it is missing or another version.
set -euo pipefail
cd "$(dirname "$0")/.."
version="0.5.4"
if ! mdbook --version 2>/dev/null | grep -qx "mdbook v$version"; then
  echo "installing mdbook $version (cargo install)" >&2
  cargo install --locked --quiet mdbook --version "$version" --no-default-features --features search
fi
mdbook build docs
python3 scripts/check-doc-links.py target/book
