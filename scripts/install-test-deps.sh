#!/usr/bin/env bash
# Installs what the tests need beyond the Rust toolchain, idempotently:
# - Debian's chromium and chromium-driver, for the browser test of the /activate page;
# - Debian's postgresql, for the PostgreSQL store and replica tests (scripts/postgres-test-server.sh
#   runs its own cluster; the package's own cluster is not used);
# - Debian's unzip, Info-ZIP's reader, which checks the server's zip archives (ZIP64 included)
#   beside Python's zipfile;
# - Debian's slurm-wlm, slurmdbd, mariadb-server and munge, for the Slurm landing zone
#   (scripts/slurm-test-cluster.sh runs a one-node cluster of its own, with its accounting
#   database; the package's own MariaDB is not used);
# - Debian's systemd, whose systemd-analyze verifies the service units of packaging/systemd;
# - Debian's podman, runc and debootstrap, for jobs in container images, and the test image they
#   run: a minimal Debian root filesystem (debootstrap --variant=minbase bookworm), imported with
#   podman import and saved as an OCI archive at target/test-image/debian-bookworm.tar (made once;
#   scripts/test.sh names it in MISSION_TEST_IMAGE);
# - Jupyter Lab, and the workflow tools from PyPI (snakemake with its Slurm and TES executor
#   plugins and S3 storage plugin, submitit) in virtualenvs under /opt/mission-test, and the job
#   image Snakemake's TES executor runs in (the test image with snakemake, built offline from
#   wheels made here: target/test-image/snakemake-bookworm.tar);
# - a Python virtual environment at target/test-venv with, from PyPI, moto[server] (the
#   S3-compatible server the cargo-bay tests start, scripts/s3-test-server.py), schemathesis
#   (the API fuzzer of crates/mission-server/tests/api/fuzz.rs), maturin, pytest and mypy
#   (the Python package's build, tests and type check), and ipykernel with jupyter_client (the
#   real Jupyter kernel python/tests/test_notebook.py runs the package in), and py-tes (the
#   GA4GH TES client crates/mission-cli/tests/cli/tes_with_py_tes.py drives unchanged);
# - a second virtualenv at target/galileo-venv with the unmodified galileo-sdk 1.0.1 from PyPI,
#   which python/tests/test_galileo.py drives against the server (it pins old packages that
#   cannot share the first one).
set -euo pipefail
cd "$(dirname "$0")/.."

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

if ! command -v chromedriver >/dev/null 2>&1 || [ ! -x /usr/bin/chromium ]; then
  echo "installing chromium and chromium-driver (apt-get)" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium chromium-driver >/dev/null
fi

if ! compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null; then
  echo "installing postgresql (apt-get)" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >/dev/null
fi

if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1 \
  || ! command -v slurmdbd >/dev/null 2>&1 || ! command -v mariadbd >/dev/null 2>&1; then
  echo "installing slurm-wlm, slurmdbd, mariadb-server and munge (apt-get)" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq slurm-wlm slurmdbd mariadb-server munge >/dev/null
fi

if ! command -v unzip >/dev/null 2>&1; then
  echo "installing unzip (apt-get)" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq unzip >/dev/null
fi

if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "installing systemd, for systemd-analyze (apt-get)" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq systemd >/dev/null
fi

# Multi-node jobs' MPI test: Debian's OpenMPI and mpi4py for the system Python.
if ! command -v mpirun >/dev/null 2>&1 || ! /usr/bin/python3 -c 'import mpi4py' >/dev/null 2>&1; then
  echo "installing openmpi-bin and python3-mpi4py (apt-get)" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq openmpi-bin python3-mpi4py >/dev/null
fi

if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
  echo "installing podman, runc and debootstrap (apt-get)" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq podman runc debootstrap >/dev/null
fi

test_image=target/test-image/debian-bookworm.tar
if [ ! -s "$test_image" ]; then
  echo "building the test image $test_image (debootstrap, podman import)" >&2
  rootfs="$(mktemp -d "${TMPDIR:-/tmp}/mission-test-rootfs.XXXXXX")"
  $sudo debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >/dev/null
  # What no job needs: documentation, locales, package lists.
  $sudo rm -rf "$rootfs"/usr/share/{doc,man,info,locale} "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*
  mkdir -p "$(dirname "$test_image")"
  $sudo tar -C "$rootfs" -c . | $sudo podman --cgroup-manager cgroupfs import - localhost/mission-test:bookworm >/dev/null
  $sudo podman save -q --format oci-archive -o "$test_image.partial" localhost/mission-test:bookworm
  $sudo podman rmi localhost/mission-test:bookworm >/dev/null
  $sudo rm -rf "$rootfs"
  mv "$test_image.partial" "$test_image"
fi

venv=target/test-venv
if ! "$venv/bin/python" -c "import moto.server, boto3, schemathesis, pytest, mypy, ipykernel, jupyter_client, tes" >/dev/null 2>&1 || [ ! -x "$venv/bin/maturin" ]; then
  if ! python3 -c "import venv, ensurepip" >/dev/null 2>&1; then
    echo "installing python3-venv (apt-get)" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-venv >/dev/null
  fi
  echo "installing moto[server], schemathesis, maturin, pytest, mypy, a Jupyter kernel and py-tes into $venv (pip)" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'moto[server]>=5.1,<6' 'schemathesis>=4.32,<5' \
    'maturin>=1.7,<2' 'pytest>=8,<9' 'mypy>=1.10,<2' 'ipykernel>=6.29,<8' 'jupyter_client>=8,<9' 'py-tes==1.1.4'
fi

# Jupyter Lab for the session tests, where a job's uid of its own can run it: the system's
# Python (one under /root, as pyenv installs it, is out of its reach), outside /tmp (jobs get a
# private one).
jupyter="${MISSION_TEST_JUPYTER:-/opt/mission-test/jupyter}"
if [ ! -x "$jupyter/bin/jupyter-lab" ]; then
  echo "installing Jupyter Lab into $jupyter (pip, with /usr/bin/python3)" >&2
  $sudo rm -rf "$jupyter"
  $sudo /usr/bin/python3 -m venv "$jupyter"
  $sudo "$jupyter/bin/pip" install --quiet --disable-pip-version-check 'jupyterlab>=4,<5' 'ipykernel>=6.29,<8'
fi

# The workflow tools the Slurm commands and the TES API are driven by, unchanged from PyPI:
# snakemake with its Slurm and TES executor plugins and its S3 storage plugin, and submitit. With the system's Python, outside /tmp, as Jupyter above:
# the host account the tests run them as (and its batch jobs) must reach it.
workflows="${MISSION_TEST_WORKFLOWS:-/opt/mission-test/workflows}"
if ! "$workflows/bin/python" -c "import snakemake, snakemake_executor_plugin_slurm, snakemake_executor_plugin_tes, snakemake_storage_plugin_s3, submitit" >/dev/null 2>&1; then
  echo "installing snakemake, its Slurm and TES executor and S3 storage plugins and submitit into $workflows (pip, with /usr/bin/python3)" >&2
  $sudo rm -rf "$workflows"
  $sudo /usr/bin/python3 -m venv "$workflows"
  $sudo "$workflows/bin/pip" install --quiet --disable-pip-version-check 'snakemake==9.27.1' \
    'snakemake-executor-plugin-slurm==2.8.0' 'snakemake-executor-plugin-tes==0.1.3' \
    'snakemake-storage-plugin-s3==0.3.6' 'submitit==1.5.4'
fi

# The image Snakemake's TES executor runs its jobs in: the test image with Debian's Python and
# the same snakemake as above with its S3 storage plugin (a job fetches its inputs and stores its
# outputs in S3 itself), `python` and `pip` on the PATH as the plugin's job script calls them.
# Its wheels are made here, with this host's pip and trust store, and installed in the image from
# them. Each job script first `pip install`s the storage plugin: the image's pip takes it, without
# its dependencies (installed already), from a copy of its wheel, offline as the tests run.
# Made once from the test image, as target/test-image/snakemake-bookworm.tar.
snakemake_image=target/test-image/snakemake-bookworm.tar
if [ ! -s "$snakemake_image" ]; then
  echo "building the Snakemake job image $snakemake_image (podman build on the test image)" >&2
  context="$(mktemp -d "${TMPDIR:-/tmp}/mission-snakemake-image.XXXXXX")"
  # PEP 517 builds (setuptools and wheel fetched for the build): snakemake's connection_pool
  # comes only as an sdist without a pyproject.toml, and the venv has no `wheel` to build it the
  # legacy way (a fresh machine, with no wheel of it cached, failed there).
  "$workflows/bin/pip" wheel --quiet --disable-pip-version-check --use-pep517 -w "$context/wheels" \
    'snakemake==9.27.1' 'snakemake-storage-plugin-s3==0.3.6'
  cat > "$context/Containerfile" <<'CONTAINERFILE'
FROM localhost/mission-test:bookworm
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      python3 python3-venv >/dev/null \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /usr/share/doc /usr/share/man
COPY wheels /tmp/wheels
RUN python3 -m venv /opt/snakemake \
 && /opt/snakemake/bin/pip install -q --no-index --find-links /tmp/wheels --disable-pip-version-check \
      'snakemake==9.27.1' 'snakemake-storage-plugin-s3==0.3.6' \
 && mkdir /opt/wheels && cp /tmp/wheels/snakemake_storage_plugin_s3-*.whl /opt/wheels/ \
 && rm -rf /tmp/wheels \
 && printf '[global]\nno-index = true\nfind-links = /opt/wheels\n[install]\nno-deps = true\n' > /etc/pip.conf \
 && find /opt/snakemake/lib/python3.11/site-packages/botocore/data -mindepth 1 -maxdepth 1 \
      ! -name s3 ! -name sts ! -name '*.json' -exec rm -rf {} + \
 && printf '#!/bin/sh\nexec /opt/snakemake/bin/python "$@"\n' > /usr/local/bin/python \
 && printf '#!/bin/sh\nexec /opt/snakemake/bin/pip "$@"\n' > /usr/local/bin/pip \
 && chmod 755 /usr/local/bin/python /usr/local/bin/pip
CONTAINERFILE
  $sudo podman --cgroup-manager cgroupfs load -q -i "$test_image" >/dev/null
  $sudo podman --cgroup-manager cgroupfs build -q --network host -t localhost/mission-test:snakemake "$context" >/dev/null
  $sudo podman save -q --format oci-archive -o "$snakemake_image.partial" localhost/mission-test:snakemake
  $sudo podman rmi localhost/mission-test:snakemake localhost/mission-test:bookworm >/dev/null
  rm -rf "$context"
  mv "$snakemake_image.partial" "$snakemake_image"
fi

galileo=target/galileo-venv
if ! "$galileo/bin/python" -c "import galileo_sdk" >/dev/null 2>&1; then
  echo "installing galileo-sdk 1.0.1 into $galileo (pip)" >&2
  rm -rf "$galileo"
  python3 -m venv "$galileo"
  "$galileo/bin/pip" install --quiet --disable-pip-version-check 'galileo-sdk==1.0.1'
fi
