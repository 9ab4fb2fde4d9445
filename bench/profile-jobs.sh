#!/usr/bin/env bash
# Where a trivial job's CPU time goes: runs the jobs benchmark (1,000 jobs, no array) with
# `perf record` attached to its `mission server` (call graphs by DWARF unwinding; the server runs
# the embedded landing zone, so the agent, its spawner and the jobs' processes are children of
# it and are recorded too), then sorts the samples into the parts of a job's life
# (bench/profile_breakdown.py): SQLite, HTTP, scheduler, agent, the job's process before and
# after exec. Needs perf (Debian's linux-perf). The figures include the benchmark's sign-in
# and its 20 dispatch-latency jobs.
# Usage: bash bench/profile-jobs.sh [perf.data path] (BENCH_MISSION_BIN picks another binary).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v perf >/dev/null || { echo "perf not found: apt-get install linux-perf" >&2; exit 1; }
data="${1:-target/profile-jobs.perf}"
hz=1999
latency_jobs=20
throughput_jobs=1000
cargo bench -p mission-cli --bench jobs --no-run >/dev/null
log="$(mktemp)"
gate="$(mktemp -u)"
BENCH_START_GATE="$gate" BENCH_ARRAY_JOBS=0 BENCH_LATENCY_JOBS=$latency_jobs BENCH_THROUGHPUT_JOBS=$throughput_jobs \
  cargo bench -p mission-cli --bench jobs >"$log" 2>&1 &
bench=$!
server=""
for _ in $(seq 600); do
  server="$(pgrep -n -f 'mission server --listen 127.0.0.1:0' || true)"
  [ -n "$server" ] && break
  sleep 0.1
done
[ -n "$server" ] || { echo "the benchmark's server did not start" >&2; cat "$log" >&2; exit 1; }
# perf ends when the server does, at the benchmark's end. The benchmark waits for the gate
# before its first job, so the agent's spawner (started with the first job) is recorded too.
perf record -q -F "$hz" -g --call-graph dwarf,8192 -p "$server" -o "$data" >/dev/null 2>&1 &
sleep 2
touch "$gate"
wait "$bench"
wait || true  # perf, which ends with the server
rm -f "$gate"
grep -E '^\|' "$log"
perf script -i "$data" -F comm,ip,sym --no-inline 2>/dev/null >"$data.txt"
python3 bench/profile_breakdown.py "$data.txt" "$hz" $((latency_jobs + 1 + throughput_jobs))
rm -f "$log"
