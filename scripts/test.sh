#!/usr/bin/env bash
# The whole test suite: the guide (built, links checked), unit and end-to-end tests (nextest),
# doc examples, rustdoc lint.
# Installs its Debian test dependencies first (scripts/install-test-deps.sh); every server the
# tests start listens on 127.0.0.1 with a free port.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo nextest --version >/dev/null 2>&1; then
  echo "cargo-nextest not found; installing it (cargo install --locked cargo-nextest)" >&2
  cargo install --locked cargo-nextest
fi

# The repository stands alone (nothing read from beside it), the server crate's floors hold
# (scripts/check-floors.py), and formatting: all fail in a second instead of after the build.
bash scripts/check-standalone.sh
python3 scripts/check-floors.py
cargo fmt --all -- --check
cargo fmt --manifest-path python/Cargo.toml -- --check

# The guide (docs/, an mdBook) builds with every link leading somewhere; beside the installs.
mkdir -p target
bash scripts/docs.sh >target/docs.log 2>&1 &
docs=$!
bash scripts/install-test-deps.sh
wait "$docs" || { cat target/docs.log >&2; echo "the guide did not build or has broken links" >&2; exit 1; }
tail -1 target/docs.log
# The browser test must run here, not skip.
export MISSION_REQUIRE_BROWSER=1
# So must the S3 cargo-bay tests (the script installs their server).
export MISSION_REQUIRE_S3=1
# And the memory-limit job test needs cgroups (CI has v1 controllers, writable as root).
export MISSION_REQUIRE_CGROUPS=1
# Jobs run sandboxed (as uids of their own, in namespaces): the suite runs as root.
export MISSION_REQUIRE_SANDBOX=1
# And schemathesis fuzzes the API from its OpenAPI document (the script installs it).
export MISSION_REQUIRE_SCHEMATHESIS=1
# And a real Jupyter Lab runs as a session (the script installs it in /opt/mission-test/jupyter).
export MISSION_REQUIRE_JUPYTER=1
# And jobs in container images run with Podman, in the Debian image the script builds.
export MISSION_REQUIRE_PODMAN=1
export MISSION_TEST_IMAGE="$PWD/target/test-image/debian-bookworm.tar"
# And snakemake (with its Slurm executor plugin) and submitit, unchanged from PyPI, drive the
# service through its Slurm commands (the script installs them in /opt/mission-test/workflows).
export MISSION_REQUIRE_WORKFLOWS=1
# And the unmodified galileo-sdk drives the server from its own virtualenv (the script makes it).
export MISSION_REQUIRE_GALILEO=1
# And systemd-analyze verifies the service units (the script installs systemd).
export MISSION_REQUIRE_SYSTEMD=1
# And Debian's OpenMPI runs mpi4py across a gang's nodes through `mission lz-exec`.
export MISSION_REQUIRE_MPI=1
# The PostgreSQL tests run on one server for the whole suite (each test makes a database of its
# own on it), in a directory of this run's own, stopped and removed when the run ends.
export MISSION_REQUIRE_POSTGRES=1
postgres_dir="$(mktemp -d "${TMPDIR:-/tmp}/mission-test-postgres.XXXXXX")"
# The Slurm runner's tests run against a one-node Slurm of this run's own (slurmctld, slurmd,
# slurmdbd and its MariaDB on loopback), stopped and removed when the run ends.
export MISSION_REQUIRE_SLURM=1
slurm_dir="$(mktemp -d "${TMPDIR:-/tmp}/mission-test-slurm.XXXXXX")"
cleanup() {
  bash scripts/postgres-test-server.sh stop "$postgres_dir" || true
  bash scripts/slurm-test-cluster.sh stop "$slurm_dir" || true
  rm -rf "$postgres_dir" "$slurm_dir"
}
trap cleanup EXIT
MISSION_TEST_POSTGRES_URL="$(bash scripts/postgres-test-server.sh start "$postgres_dir")"
MISSION_TEST_POSTGRES_CA="$(bash scripts/postgres-test-server.sh ca "$postgres_dir")"
export MISSION_TEST_POSTGRES_URL MISSION_TEST_POSTGRES_CA
MISSION_TEST_SLURM_CONF="$(bash scripts/slurm-test-cluster.sh start "$slurm_dir")"
export MISSION_TEST_SLURM_CONF

cargo nextest run --workspace --no-fail-fast
# The Python package: its wheel, installed into the test virtualenv, against a real server (the
# `mission` binary the tests above built).
wheel="$(bash scripts/build-python.sh)"
target/test-venv/bin/pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel"
MISSION_BIN="$PWD/target/debug/mission" target/test-venv/bin/pytest -q -p no:cacheprovider python/tests
# Its types, as a user's type checker sees them: the annotations and the native module's stubs.
(cd python && ../target/test-venv/bin/mypy --strict --no-incremental mission)
cargo test --doc --workspace
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
