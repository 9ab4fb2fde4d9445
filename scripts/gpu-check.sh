#!/usr/bin/env bash
# The standing check on a GPU host (see the developers' guide), with nothing but a `mission`
# binary (the host may have no cargo, no network, no curl): `mission server` runs with its
# embedded landing zone, a job asking for one GPU runs `nvidia-smi -L`, a job that allocates
# past its 64 MB memory limit is killed for it, and a job holding one GPU for 60 s (busy where
# the driver lets scripts/gpu-spin.py load it, idle otherwise) has its measured GPU energy
# compared with an integration of `nvidia-smi`'s power.draw sampled every 100 ms over its run.
# Prints the landing zone, the jobs and their output. Usage: scripts/gpu-check.sh
# [path/to/mission] (default target/release/mission); GPU_CHECK_ENERGY_SECONDS sets the 60.
set -euo pipefail
bin="$(realpath "${1:-target/release/mission}")"
here="$(dirname "$(realpath "$0")")"
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
# A mission NAME running SCRIPT, with the files after them as well.
mission_with() {
  printf '%s\n' "$2" >"$work/src/run.sh"
  "$bin" missions create --name "$1" --type shell --setting filename=run.sh --json >"$work/$1.json"
  local id
  id="$(grep -oE '"mission_id": *"[0-9a-f-]+"' "$work/$1.json" | grep -oE '[0-9a-f-]{36}')"
  local file
  for file in "$work/src/run.sh" "${@:3}"; do
    "$bin" files upload "$id" "$file" >/dev/null
  done
  echo "$id"
}
gpu="$(mission_with gpu 'nvidia-smi -L')"
echo "== a job asking for one GPU, running nvidia-smi -L"
"$bin" run "$gpu" --gpus 1 --cpus 1 --memory 256 --follow || true
hog="$(mission_with hog 'python3 -c "b = bytearray(512 << 20); print(len(b))" || exec head -c 512M /dev/zero | tail')"
echo "== a job allocating 512 MB with a 64 MB limit"
"$bin" run "$hog" --cpus 1 --memory 64 --follow || true
"$bin" jobs list --json | grep -oE '"(status|reason|limits|exit_code)": *("[^"]*"|[0-9-]+|null)' || true

seconds="${GPU_CHECK_ENERGY_SECONDS:-60}"
echo "== a job holding one GPU for $seconds s: its measured energy against nvidia-smi's power.draw every 100 ms"
energy="$(mission_with energy "python3 gpu-spin.py $seconds || sleep $seconds" "$here/gpu-spin.py")"
nvidia-smi -i 0 --query-gpu=timestamp,power.draw --format=csv,noheader,nounits -lms 100 >"$work/power.csv" &
sampler=$!
"$bin" run "$energy" --gpus 1 --cpus 1 --memory 1024 --follow || true
sleep 0.5
kill "$sampler" 2>/dev/null || true
job="$("$bin" jobs list --mission "$energy" --json | grep -oE '"job_id": *"[0-9a-f-]+"' | head -1 | grep -oE '[0-9a-f-]{36}')"
"$bin" jobs get "$job"
"$bin" jobs get "$job" --json >"$work/energy-job.json"
python3 - "$work/energy-job.json" "$work/power.csv" <<'PY'
import datetime, json, sys, time

job = json.load(open(sys.argv[1]))
at = lambda field: datetime.datetime.fromisoformat(job[field].replace("Z", "+00:00")).timestamp()
start, end = at("started_at"), at("finished_at")
samples = []
for line in open(sys.argv[2]):
    stamp, watts = (field.strip() for field in line.split(",")[:2])
    day, fraction = stamp.split(".") if "." in stamp else (stamp, "0")
    try:
        samples.append((time.mktime(time.strptime(day, "%Y/%m/%d %H:%M:%S")) + float("0." + fraction), float(watts)))
    except ValueError:
        pass
inside = [(t, w) for t, w in samples if start <= t <= end]
joules = sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in zip(inside, inside[1:]))
# The edges: from the run's start to the first sample, and from the last to its end.
if inside:
    joules += (inside[0][0] - start) * inside[0][1] + (end - inside[-1][0]) * inside[-1][1]
usage = job.get("usage") or {}
gpu = (usage.get("energy_parts") or {}).get("gpu") or {}
smi_wh = joules / 3600
print(f"run: {end - start:.2f} s; nvidia-smi samples inside it: {len(inside)}, mean {joules / max(end - start, 1e-9):.1f} W")
print(f"nvidia-smi power.draw integrated: {smi_wh:.4f} Wh")
print(f"the job's GPU part: {gpu.get('wh', float('nan')):.4f} Wh ({gpu.get('source')}); energy_kwh {usage.get('energy_kwh')} "
      f"(PUE and the modelled CPU and memory parts included)")
if smi_wh > 0 and gpu.get("wh"):
    print(f"measured / nvidia-smi: {gpu['wh'] / smi_wh:.3f} ({(gpu['wh'] / smi_wh - 1) * 100:+.1f}%)")
PY
