#!/usr/bin/env bash
# Installs what the tests need beyond the Rust toolchain, idempotently:
# Debian's chromium and chromium-driver for the browser test of the /activate page.
set -euo pipefail

if command -v chromedriver >/dev/null 2>&1 && [ -x /usr/bin/chromium ]; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "installing chromium and chromium-driver (apt-get)" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium chromium-driver >/dev/null
