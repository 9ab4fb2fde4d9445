#!/usr/bin/env bash
# Captures what the real Slurm commands print, for the fixtures the `sbatch`/`squeue`/… of
# `mission` are compared with (fixtures/slurm/). Runs against the test cluster
# (scripts/slurm-test-cluster.sh), which it starts in DIR; writes one file per command line.
#
#   bash scripts/capture-slurm-output.sh DIR [OUT]    (OUT: fixtures/slurm by default)
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:?usage: capture-slurm-output.sh DIR [OUT]}"
out="$(realpath -m "${2:-fixtures/slurm}")"
mkdir -p "$out" "$dir/work"
export SLURM_CONF="$(bash scripts/slurm-test-cluster.sh start "$dir")"
cd "$dir/work"

# Each capture: its name, then the command; stdout and stderr and the exit code are kept.
capture() {
  local name="$1"
  shift
  { "$@" 2>&1; echo "exit=$?"; } > "$out/$name.txt" || true
}

scancel --user="$(id -un)" 2>/dev/null || true
done_ok=$(sbatch --parsable -J ok --wrap "true")
failing=$(sbatch --parsable -J bad --wrap "exit 3")
for _ in $(seq 1 60); do
  [ -z "$(squeue -h -j "$done_ok,$failing" -o %i 2>/dev/null)" ] && break
  sleep 1
done
running=$(sbatch --parsable -J fit --comment hello --wrap "sleep 120")
array=$(sbatch --parsable -J arr --array=0-2 --wrap "sleep 120")
held=$(sbatch --parsable -H -J held --wrap "true")
sleep 2

capture sbatch-submitted sbatch --wrap true
capture sbatch-parsable sbatch --parsable --wrap true
capture sbatch-bad-mem sbatch --mem=lots --wrap true
capture sbatch-bad-time sbatch --time=abc --wrap true
capture sbatch-bad-cpus sbatch -c x --wrap true
capture sbatch-bad-gres sbatch --gres=foo:2 --wrap true
capture sbatch-bad-partition sbatch -p nopart --wrap true
capture sbatch-unknown-option sbatch --bogus-flag --wrap true
capture sbatch-no-script sbatch nonexistent.sh
capture squeue squeue
capture squeue-format squeue -o "%i %j %T %t %u %M %l %D %R %N %C %m %A %a %F %K %k %V %S %e %r"
capture squeue-noheader squeue -h -o "%i|%T"
capture squeue-unknown-job squeue -j 999999
capture scontrol-show-job scontrol show job "$running"
capture scontrol-show-held scontrol show job "$held"
capture scontrol-hostnames scontrol show hostnames "n[1-3],m5"
capture scancel-unknown scancel 999999
capture scontrol-hold-running scontrol hold "$running"
capture scontrol-hold-unknown scontrol hold 999999
capture scontrol-release-unknown scontrol release 999999
capture scontrol-requeue-pending scontrol requeue "$held"
capture scontrol-release scontrol release "$held"
capture scontrol-requeue-running scontrol requeue "$running"
capture scontrol-requeue-unknown scontrol requeue 999999
capture sacct sacct -j "$done_ok,$failing"
capture sacct-parsable sacct -X -n -P -j "$done_ok,$failing" -o JobID,JobIDRaw,JobName,State,ExitCode,Elapsed,AllocCPUS,ReqMem
capture sacct-p sacct -X -p -j "$done_ok" -o JobID,State,ExitCode
capture sinfo sinfo
capture sinfo-format sinfo -h -o "%P %a %l %D %t %N %c %m %G"
capture sacctmgr-user sacctmgr -n -P show user "$(id -un)" format=User,DefaultAccount
capture sacctmgr-assoc sacctmgr -n -P show assoc user="$(id -un)" format=Account,User
scancel "$running" "$array" "$held" || true
echo "captured into $out"
