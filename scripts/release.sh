#!/usr/bin/env bash
# Builds the release archive of Mission Compute Service:
#   target/release-archive/mission-VERSION-ARCH-linux-gnu.tar.gz
# holding
#   mission                    the binary (cargo's `dist` profile: fat LTO, stripped)
#   completions/               for bash (mission.bash), zsh (_mission) and fish (mission.fish)
#   slurm-commands/            sbatch, srun, squeue, sacct, scancel, scontrol, sinfo, sacctmgr:
#                              links to ../mission, which answers as each (put it on PATH)
#   systemd/                   the hardened units of packaging/systemd
#   config/                    example config files documenting every key (server.toml, lz.toml)
#   man/man1/                  the man pages of `mission` and of each command (`man -M man mission-run`)
#   openapi/v1.json            the HTTP API's OpenAPI document
#   README.md                  how to run it
#   BUILD-INFO                 version, commit, target, the glibc it needs, the licence
#   SHA256SUMS                 of every file above (`sha256sum -c SHA256SUMS` in the folder)
# and prints the archive's path. `--binary PATH` packs a binary built already instead of building
# one (the test suite packs the binary it tested); `--out DIR` writes somewhere else;
# `--glibc VERSION` builds against that glibc (2.17 for CentOS 7, 2.28 for RHEL 8) with
# cargo-zigbuild, from any host (`cargo install cargo-zigbuild`, and zig: `pip install ziglang`).
# A 2.17 build ran the Python package's tests here, jobs on the embedded landing zone included.
#
# The binary links glibc dynamically and needs the version BUILD-INFO names (the newest symbol
# version it uses) or later: built on Debian 12, glibc 2.34 (RHEL 9, Ubuntu 22.04, Debian 12).
# For older hosts (HPC login nodes on RHEL 8: 2.28, CentOS 7: 2.17, the oldest Rust supports),
# build with --glibc 2.17, or on the oldest system it must run on and pack that with --binary.
set -euo pipefail
cd "$(dirname "$0")/.."

binary=""
glibc=""
out=target/release-archive
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --glibc) glibc="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "release.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$binary" ] && [ -n "$glibc" ]; then
  command -v cargo-zigbuild >/dev/null 2>&1 || { echo "release.sh: --glibc needs cargo-zigbuild (cargo install cargo-zigbuild) and zig (pip install ziglang)" >&2; exit 1; }
  cargo zigbuild --locked --profile dist --target "$(uname -m)-unknown-linux-gnu.$glibc" -p mission-cli >&2
  binary="target/$(uname -m)-unknown-linux-gnu/dist/mission"
elif [ -z "$binary" ]; then
  cargo build --locked --profile dist -p mission-cli >&2
  binary=target/dist/mission
fi
[ -x "$binary" ] || { echo "release.sh: $binary is not an executable" >&2; exit 1; }

version="$("$binary" --version | awk '{print $2}')"
arch="$(uname -m)"
name="mission-$version-$arch-linux-gnu"
mkdir -p "$out"
stage="$out/$name"
rm -rf "$stage" "$out/$name.tar.gz"
mkdir -p "$stage/completions" "$stage/systemd" "$stage/config" "$stage/openapi"

install -m 0755 "$binary" "$stage/mission"
"$stage/mission" completions bash > "$stage/completions/mission.bash"
"$stage/mission" completions zsh > "$stage/completions/_mission"
"$stage/mission" completions fish > "$stage/completions/mission.fish"
"$stage/mission" man-pages "$stage/man/man1" > /dev/null
"$stage/mission" slurm-commands install "$stage/slurm-commands" --link-to ../mission > /dev/null
install -m 0644 packaging/systemd/*.service "$stage/systemd/"
"$stage/mission" server default-config > "$stage/config/server.toml"
"$stage/mission" lz default-config > "$stage/config/lz.toml"
install -m 0644 openapi/v1.json "$stage/openapi/v1.json"
install -m 0644 README.md "$stage/README.md"

glibc="$(objdump -T "$stage/mission" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -Vu | tail -1)"
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [ -n "$(git status --porcelain 2>/dev/null)" ]; then commit="$commit (with uncommitted changes)"; fi
cat > "$stage/BUILD-INFO" <<EOF
version: $version
commit: $commit
target: $arch-linux-gnu
needs: glibc $glibc or later
licence: Apache-2.0
EOF

(cd "$stage" && find . -type f ! -name SHA256SUMS | sed 's|^\./||' | LC_ALL=C sort | xargs sha256sum > SHA256SUMS)
tar -C "$out" --owner=0 --group=0 --sort=name -czf "$out/$name.tar.gz" "$name"
echo "$out/$name.tar.gz"
