#!/usr/bin/env bash
# The repository stands alone: a clone with nothing beside it builds and tests. No tracked file
# may reach outside it for what it needs (the fixtures tests read live in fixtures/).
set -euo pipefail
cd "$(dirname "$0")/.."
if git ls-files -z | xargs -0 grep -nI -e '\.\./shared' -e 'shared/fixtures' -e 'shared/spec' \
  -- 2>/dev/null | grep -v '^scripts/check-standalone.sh:'; then
  echo "the files above reach outside the repository (copy what they need into it)" >&2
  exit 1
fi
