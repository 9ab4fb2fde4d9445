#!/usr/bin/env bash
# Builds the Python package (python/: maturin + PyO3 over mission-client) into one abi3 wheel
# for CPython >= 3.9 under target/python-wheels, and prints the wheel's path. Extra arguments go
# to `maturin build` (e.g. --release). maturin comes from $MATURIN, else the test virtualenv
# that scripts/install-test-deps.sh makes.
set -euo pipefail
cd "$(dirname "$0")/.."
maturin="${MATURIN:-target/test-venv/bin/maturin}"
rm -f target/python-wheels/mission_compute-*.whl
"$maturin" build --quiet --manifest-path python/Cargo.toml --target-dir target/python --out target/python-wheels "$@" >&2
ls target/python-wheels/mission_compute-*.whl
