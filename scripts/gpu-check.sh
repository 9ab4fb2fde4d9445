#!/usr/bin/env bash
# The standing check on a GPU host (see the developers' guide), with nothing but a `mission`
# binary (the host may have no cargo, no network, no curl): `mission server` runs with its
# embedded landing zone, a job asking for one GPU runs `nvidia-smi -L`, and a job that allocates
# past its 64 MB memory limit is killed for it. Prints the landing zone, both jobs and their
# output. Usage: scripts/gpu-check.sh [path/to/mission] (default target/release/mission).
set -euo pipefail
bin="$(realpath "${1:-target/release/mission}")"
work="$(mktemp -d)"
server=""
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
export HOME="$work/home"
mkdir -p "$HOME" "$work/src"
port=$((20000 + RANDOM % 20000))
export MISSION_SERVER="http://127.0.0.1:$port"
"$bin" server --listen "127.0.0.1:$port" --data-dir "$work/data" >"$work/server.log" 2>&1 &
server=$!
for _ in $(seq 300); do
  grep -q "landing zone" "$work/server.log" 2>/dev/null && [ -s "$work/data/initial-admin-password" ] && break
  sleep 0.1
done
password="$(tr -d '\n' <"$work/data/initial-admin-password")"

# Sign in: `mission login` prints its code; the first admin approves it at /activate (a form POST
# through bash's /dev/tcp, for want of curl).
urlencode() {
  local s="$1" i c out=""
  for ((i = 0; i < ${#s}; i++)); do
    c="${s:i:1}"
    case "$c" in [a-zA-Z0-9.~_-]) out+="$c" ;; *) out+="$(printf '%%%02X' "'$c")" ;; esac
  done
  printf '%s' "$out"
}
"$bin" login --no-browser >"$work/login.log" 2>&1 &
login=$!
code=""
for _ in $(seq 100); do
  code="$(grep -oE '[A-Z]{4}-[A-Z]{4}' "$work/login.log" | head -1 || true)"
  [ -n "$code" ] && break
  sleep 0.1
done
body="user_code=$code&username=admin&password=$(urlencode "$password")&action=approve"
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf 'POST /activate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' \
  "${#body}" "$body" >&3
head -1 <&3 | grep -q " 200 " || { echo "approving the sign-in failed" >&2; exit 1; }
exec 3<&-
wait "$login"

echo "== the embedded landing zone"
"$bin" stations get local
mission_with() {
  printf '%s\n' "$2" >"$work/src/run.sh"
  "$bin" missions create --name "$1" --type shell --setting filename=run.sh --json >"$work/$1.json"
  local id
  id="$(grep -oE '"mission_id": *"[0-9a-f-]+"' "$work/$1.json" | grep -oE '[0-9a-f-]{36}')"
  "$bin" files upload "$id" "$work/src/run.sh" >/dev/null
  echo "$id"
}
gpu="$(mission_with gpu 'nvidia-smi -L')"
echo "== a job asking for one GPU, running nvidia-smi -L"
"$bin" run "$gpu" --gpus 1 --cpus 1 --memory 256 --follow || true
hog="$(mission_with hog 'python3 -c "b = bytearray(512 << 20); print(len(b))" || exec head -c 512M /dev/zero | tail')"
echo "== a job allocating 512 MB with a 64 MB limit"
"$bin" run "$hog" --cpus 1 --memory 64 --follow || true
"$bin" jobs list --json | grep -oE '"(status|reason|limits|exit_code)": *("[^"]*"|[0-9-]+|null)' || true
